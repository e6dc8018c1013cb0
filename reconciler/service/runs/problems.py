"""The runs API's problems: one `type` per way a request on a run can fail, and the runtime's
errors (`reconciler.core.errors`) answered as those problems wherever a route raises them.

The routes raise the problems that are theirs alone (no agent, a follow-up that does not match
the run's pause, a cancel still under way) as `ProblemError`; `install_run_problems` answers the
rest, the runtime's own errors, with the problem registered for each.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from reconciler.core.errors import (
    ApprovalError,
    ContinuationError,
    DecisionNotAllowedError,
    IllegalTransitionError,
    RunConflictError,
    RunError,
    RunKeyError,
    UnknownRunError,
)
from reconciler.service.problems import ProblemType, problem_response

NO_AGENT = ProblemType("no-agent", 404, "No agent configured")
UNKNOWN_RUN = ProblemType("unknown-run", 404, "Unknown run")
ILLEGAL_TRANSITION = ProblemType("illegal-transition", 409, "The run's state does not allow this")
RUN_CONFLICT = ProblemType("run-conflict", 409, "Another request or worker is working on the run")
CONTINUATION_MISMATCH = ProblemType("continuation-mismatch", 409, "Not the run's pending continue "
                                                          "request")
CONTINUATION_INCOMPLETE = ProblemType("continuation-incomplete", 422,
                                      "The follow-up does not say which pause it continues")
APPROVAL_MISMATCH = ProblemType("approval-mismatch", 409,
                                "No pending approval has this resume token")
DECISION_NOT_ALLOWED = ProblemType("decision-not-allowed", 409,
                                   "The call awaiting approval does not take this decision")
RUN_KEY = ProblemType("run-key", 503, "The run key cannot open this run's events")
CANCEL_PENDING = ProblemType("cancel-pending", 409, "The run is still stopping")

_BY_ERROR: dict[type[RunError], ProblemType] = {
    UnknownRunError: UNKNOWN_RUN,
    IllegalTransitionError: ILLEGAL_TRANSITION,
    RunConflictError: RUN_CONFLICT,
    ContinuationError: CONTINUATION_MISMATCH,
    # Before its base class: the first match answers.
    DecisionNotAllowedError: DECISION_NOT_ALLOWED,
    ApprovalError: APPROVAL_MISMATCH,
}


def install_run_problems(app: FastAPI) -> None:
    """Answer the runtime's errors as problems."""
    for error in _BY_ERROR:
        app.add_exception_handler(error, _on_run_error)  # type: ignore[arg-type]
    app.add_exception_handler(RunKeyError, _on_run_key_error)  # type: ignore[arg-type]


async def _on_run_key_error(request: Request, exc: RunKeyError) -> JSONResponse:
    # The key is the operator's to fix; the detail names the variable, never its value.
    return problem_response(RUN_KEY, str(exc), request.url.path)


async def _on_run_error(request: Request, exc: RunError) -> JSONResponse:
    kind = next(k for cls, k in _BY_ERROR.items() if isinstance(exc, cls))
    return problem_response(kind, str(exc), request.url.path, extensions={"run_id": exc.run_id})
