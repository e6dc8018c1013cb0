"""Continuation across request deadlines: a long run spans many request/response cycles.

    request 1 ─ step ─ step ─ step ─┤ deadline - step_reserve: pause, answer
                                    │   task_continue_request {id: c1, tool_steps: 3}
    request 2 (task_continue_response {continue_request_id: c1}) ─ step ─ step ─ … done

Between steps only: a step already under way when the deadline passes runs to its end (a model
call or tool call cannot be paused halfway), so the answer can come after the deadline by up to
one step. Size `step_reserve_s` to the slowest step.

Every request makes at least one step of progress before it may pause, however short its
deadline: a `deadline_s` at or below `step_reserve_s` would otherwise pause before the first
step, and every continue would pause again with nothing done. Such a deadline means "one step
per request", and the answer then comes after the deadline by that one step:

    deadline_s <= step_reserve_s:  request ─ step ─┤ pause   continue ─ step ─┤ pause   …
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from reconciler.errors import ContinuationError
from reconciler.runs.events import RunView


@dataclass(frozen=True, slots=True)
class ContinueRequest:
    """What a paused run hands back to its caller; send the id back to go on."""

    id: str
    run_id: str
    tool_steps: int
    type: str = "task_continue_request"


def new_request_id() -> str:
    return f"cont_{uuid.uuid4().hex}"


def out_of_time(deadline: float | None, reserve_s: float, steps_done: int) -> bool:
    """True when the request should pause before its next step: it made a step already, and
    fewer than `reserve_s` seconds are left before `deadline` (time.monotonic)."""
    return steps_done > 0 and deadline is not None and deadline - time.monotonic() < reserve_s


def check_response(view: RunView, continue_request_id: str) -> None:
    """Raise ContinuationError unless the id answers the run's pending continue request."""
    if continue_request_id in view.answered_continues:
        raise ContinuationError(view.run_id, f"continue request {continue_request_id!r} was "
                                             "answered already; a response is used once")
    if view.continue_request is None:
        raise ContinuationError(view.run_id, "the run has no pending continue request")
    if continue_request_id != view.continue_request:
        raise ContinuationError(view.run_id, f"{continue_request_id!r} does not match the "
                                             f"pending continue request {view.continue_request!r}")
