"""DBOS Transact: `reconciled_step` is `@DBOS.step` whose side effect goes through the gate.

    @reconciled_step(provider="stripe", action="payment_intents.create", tagged=True,
                     retries_allowed=True)
    def charge(order: str, amount: int) -> dict[str, Any]:
        call = current_call()          # the operation id goes where Stripe keeps metadata
        return payments.create(amount=amount, metadata={"operation_id": call.operation_id})

DBOS records a step's output once the step returns; a process killed after the provider
committed and before that record leaves the step in flight, and DBOS recovery runs it again
(https://docs.dbos.dev/architecture#how-workflow-recovery-works). Here that re-run, and each of
DBOS's own retries of the step (`retries_allowed`), is a repeat of one operation (the
workflow id and step number: `engine_operation`), so it asks the gate first:

    recovery re-runs the step ─ reconcile ─ ask the gate ─┬─ granted: send again
                                                          ├─ verified_applied: nothing sent;
                                                          │  `replay(Applied)` is the output
                                                          └─ refused: RetryRefusedError

DBOS records what the step came to (the output, or the refusal with its verdict) as the
step's result, so a later replay of the workflow sees the same. DBOS does not retry a
refusal (`retry_unless_refused`): asking the same gate again at once answers the same, and the
refusal says what to do next. A workflow that catches it and calls the step again makes a new
step: a new operation unless `operation_id` names the effect itself (an order id).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar, overload

from dbos import DBOS

from reconciler.client.effects import Recorder
from reconciler.core.domain import Effect
from reconciler.core.errors import RetryRefusedError
from reconciler.effect import Applied, Classifier, EffectSite, ReceiptReader
from reconciler.integrations.durable import engine_operation, ident

P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R")


def step_operation() -> str:
    """The operation id of the DBOS step running now: its workflow id and step number, the
    identity DBOS re-runs it under. Also the idempotency key of a `keyed` step."""
    workflow, step = DBOS.workflow_id, DBOS.step_id
    if workflow is None or step is None:
        raise RuntimeError("a reconciled step runs inside a DBOS workflow: its operation id "
                           "is the workflow id and step number")
    return engine_operation("dbos", workflow, str(step))


def _step_operation(*_: Any, **__: Any) -> str:
    return step_operation()


def _workflow(*_: Any, **__: Any) -> str | None:
    workflow = DBOS.workflow_id
    return ident(workflow) if workflow else None


def retry_unless_refused(should_retry: Callable[[BaseException], bool] | None = None
                         ) -> Callable[[BaseException], bool]:
    """DBOS's `should_retry` for a reconciled step: never a gate refusal; any other error as
    `should_retry` says (default: yes). Every retry DBOS makes asks the gate before sending."""
    def decide(error: BaseException) -> bool:
        if isinstance(error, RetryRefusedError):
            return False
        return should_retry(error) if should_retry else True
    return decide


@overload
def reconciled_step(*, provider: str, action: str, effect: Effect | str = ...,
                    operation_id: Callable[..., str] | None = ..., keyed: bool = ...,
                    tagged: bool = ..., params: Any = ...,
                    backend: Recorder | None = ..., classify: Classifier | None = ...,
                    receipt: ReceiptReader | None = ..., replay: None = ...,
                    holder: str | None = ..., correlation: Any = ..., name: str | None = ...,
                    retries_allowed: bool = ..., interval_seconds: float = ...,
                    max_attempts: int = ..., backoff_rate: float = ...,
                    should_retry: Callable[[BaseException], bool] | None = ...,
                    ) -> Callable[[Callable[P, T]], Callable[P, T | Applied]]: ...


@overload
def reconciled_step(*, provider: str, action: str, effect: Effect | str = ...,
                    operation_id: Callable[..., str] | None = ..., keyed: bool = ...,
                    tagged: bool = ..., params: Any = ...,
                    backend: Recorder | None = ..., classify: Classifier | None = ...,
                    receipt: ReceiptReader | None = ..., replay: Callable[[Applied], R],
                    holder: str | None = ..., correlation: Any = ..., name: str | None = ...,
                    retries_allowed: bool = ..., interval_seconds: float = ...,
                    max_attempts: int = ..., backoff_rate: float = ...,
                    should_retry: Callable[[BaseException], bool] | None = ...,
                    ) -> Callable[[Callable[P, T]], Callable[P, T | R]]: ...


def reconciled_step(*, provider: str, action: str, effect: Effect | str = Effect.NON_IDEMPOTENT,
                    operation_id: Callable[..., str] | None = None, keyed: bool = False,
                    tagged: bool = False, params: Any = None,
                    backend: Recorder | None = None, classify: Classifier | None = None,
                    receipt: ReceiptReader | None = None,
                    replay: Callable[[Applied], Any] | None = None,
                    holder: str | None = None,
                    correlation: Mapping[str, str] | Callable[..., Mapping[str, str]] | None = None,
                    name: str | None = None, retries_allowed: bool = False,
                    interval_seconds: float = 1.0, max_attempts: int = 3,
                    backoff_rate: float = 2.0,
                    should_retry: Callable[[BaseException], bool] | None = None,
                    ) -> Callable[[Callable[P, Any]], Callable[P, Any]]:
    """`@DBOS.step(...)` (`name` and the retry options are DBOS's) around `@effect(...)`
    (`provider`, `action`, `effect`, `params`, `backend`, `classify`, `receipt`, `replay`,
    `holder`, `correlation` are `reconciler.effect`'s; docs/effect.md). The operation id is
    `step_operation()` (or `operation_id`, a function of the step's arguments, for an effect
    more than one step may make); the run is the workflow. `keyed`: the step sends the provider that
    operation id as its idempotency key (`current_call().intent.idempotency_key`); `tagged`:
    it attaches the operation id where the provider keeps metadata. A step that does
    neither carries nothing a probe can find: a re-run of it after a lost answer is refused,
    and a human decides (docs/integrations/dbos.md)."""
    operation = operation_id or _step_operation
    site: EffectSite[Any] = EffectSite(
        provider=provider, action=action, effect=effect, operation_id=operation,
        key=operation if keyed else None, tagged=tagged, params=params,
        backend=backend, classify=classify, receipt=receipt, replay=replay, holder=holder,
        run_id=_workflow, tool_call_id=None, correlation=correlation)

    def decorate(fn: Callable[P, Any]) -> Callable[P, Any]:
        step: Callable[P, Any] = DBOS.step(
            name=name, retries_allowed=retries_allowed, interval_seconds=interval_seconds,
            max_attempts=max_attempts, backoff_rate=backoff_rate,
            should_retry=retry_unless_refused(should_retry))(site(fn))
        return step

    return decorate
