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

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.core.errors import ContinuationError
from reconciler.core.runs.events import RunView


@dataclass(frozen=True, slots=True)
class ContinueRequest:
    """What a paused run hands back to its caller; send the id back to go on."""

    id: str
    run_id: str
    tool_steps: int
    type: str = "task_continue_request"


#: Seed 003's prefix. The run's id is inside, so a follow-up that carries only the
#: task_continue_response finds its run: `continue_<run id>_<32 hex digits>`.
PREFIX = "continue_"
_NONCE = 32


def new_request_id(run_id: str) -> str:
    return f"{PREFIX}{run_id}_{uuid.uuid4().hex}"


def run_of_request(request_id: str) -> str | None:
    """The run a continue request id belongs to; None if it is not one of ours."""
    run_id, sep, nonce = request_id.removeprefix(PREFIX).rpartition("_")
    if not request_id.startswith(PREFIX) or not sep or not run_id or len(nonce) != _NONCE:
        return None
    return run_id if all(c in "0123456789abcdef" for c in nonce) else None


def out_of_time(deadline: float | None, now: float, reserve_s: float, steps_done: int) -> bool:
    """True when the request should pause before its next step: it made a step already, and
    fewer than `reserve_s` seconds are left before `deadline`. `now` is the caller's reading of
    the monotonic clock the deadline was set on (the runtime's `monotonic`)."""
    return steps_done > 0 and deadline is not None and deadline - now < reserve_s


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


def continue_event(response_id: str, request_id: str, step: int) -> dict[str, Any]:
    """Seed 003's checkpoint event, exactly: the response `response_id` ends here."""
    return {"type": "response.output_item.done",
            "item": {"type": "task_continue_request", "id": request_id, "step": step},
            "id": response_id}


@dataclass(frozen=True, slots=True)
class FollowUp:
    """What a long task's follow-up request carries: the answer's id, and the original
    task_continue_request item it answers (None when the request left it out)."""

    continue_request_id: str
    request_item: Mapping[str, Any] | None


def follow_up(messages: Sequence[Mapping[str, Any]]) -> FollowUp | None:
    """The last task_continue_response in `messages` and the request item with its id; None
    when there is no (well-formed) response."""
    responses = [m for m in messages if m.get("type") == "task_continue_response"]
    if not responses or not isinstance(responses[-1].get("continue_request_id"), str):
        return None
    answered = str(responses[-1]["continue_request_id"])
    requests = [m for m in messages
                if m.get("type") == "task_continue_request" and m.get("id") == answered]
    return FollowUp(answered, requests[-1] if requests else None)
