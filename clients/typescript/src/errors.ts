/** Every error the client raises on purpose, as `reconciler/core/errors.py` names them. */

/** An RFC 9457 problem document, as the sidecar answers errors. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  [field: string]: unknown;
}

export class ReconcilerError extends Error {
  override name = "ReconcilerError";
  constructor(message: string, readonly operationId?: string) {
    super(message);
  }
}

/** The sidecar answered with a problem; `problem` holds its type and detail. */
export class ServiceError extends ReconcilerError {
  override name = "ServiceError";
  constructor(readonly status: number, readonly problem: Problem, operationId?: string) {
    super(`sidecar answered ${status}: ${problem.title ?? "error"}` +
      (problem.detail ? `: ${problem.detail}` : ""), operationId);
  }
}

/** No intent is recorded for this operation id: record the intent first. */
export class UnknownOperationError extends ReconcilerError {
  override name = "UnknownOperationError";
}

/** The sidecar refused to open an attempt for want of the live retry grant: do not send. */
export class RetryNotGrantedError extends ReconcilerError {
  override name = "RetryNotGrantedError";
}

/** The gate refused a retry: nothing was sent. `verdict` and `findings` say why. */
export class RetryRefusedError extends ReconcilerError {
  override name = "RetryRefusedError";
  constructor(operationId: string, readonly verdict: string, readonly reason: string,
    readonly findings: readonly string[] = []) {
    super(`retry of ${operationId} refused (${verdict}): ${reason}`, operationId);
  }
}
