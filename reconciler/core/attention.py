"""What waits on a human, and why: the operator console's queue, `ops queue`, the
`?escalated=true` filter and the human-queue gauges all read it from here. Pure: no I/O.

An operation *must* be acted on by a human (the API's `escalated=true`) when

    a sweeper escalated it and no decision came since   escalated and still indeterminate
    or the rules say so outright                         next action escalate_to_human

A human resolution settles the first (the verdict becomes verified_*); proof that supersedes
it and leaves the operation indeterminate again puts it back. The console also shows what a
human *should* look at: a second effect, a false success, a retry waiting for approval.
"""

from __future__ import annotations

from enum import StrEnum

from reconciler.core.domain import Verdict
from reconciler.core.verdicts import NextAction


class Reason(StrEnum):
    """Why an operation waits on a human, most pressing first."""

    ESCALATED = "escalated"
    ESCALATE = "escalate_to_human"
    DUPLICATE_EFFECT = "duplicate_effect"
    FALSE_SUCCESS = "false_success"
    AWAIT_APPROVAL = "await_approval"


#: The reasons that make `escalated=true`: a human must decide before anything moves.
MUST_ACT = frozenset({Reason.ESCALATED, Reason.ESCALATE})

EXPLAINED: dict[Reason, str] = {
    Reason.ESCALATED: "escalated by the sweep (deadline passed or probe budget spent) and "
                      "still undecided: resolve it from what the provider shows",
    Reason.ESCALATE: "no retry is possible and nothing proves the outcome: a human decides",
    Reason.DUPLICATE_EFFECT: "the provider shows two effects: compensate the extra one and "
                             "record the compensation",
    Reason.FALSE_SUCCESS: "reported success, but the provider shows no effect: the run that "
                          "made the call is unhealthy",
    Reason.AWAIT_APPROVAL: "the action cannot be compensated: a retry needs a human's approval",
}


#: The rules, first that holds wins: each is the cached decision's fields it needs equal. Data,
#: so that the SQL store filters and counts by the very same rules (store.sql).
RULES: tuple[tuple[Reason, dict[str, str | bool]], ...] = (
    (Reason.ESCALATED, {"escalated": True, "verdict": Verdict.INDETERMINATE.value}),
    (Reason.ESCALATE, {"next_action": NextAction.ESCALATE}),
    # A compensated duplicate (next action `compensated`) keeps its verdict, off the queue.
    (Reason.DUPLICATE_EFFECT, {"verdict": Verdict.DUPLICATE_EFFECT.value,
                               "next_action": NextAction.COMPENSATE}),
    (Reason.FALSE_SUCCESS, {"verdict": Verdict.FALSE_SUCCESS.value}),
    (Reason.AWAIT_APPROVAL, {"next_action": NextAction.AWAIT_APPROVAL}),
)


def reason_of(verdict: str, next_action: str, escalated: bool) -> Reason | None:
    """Why an operation with this cached decision waits on a human; None when it does not."""
    fields = {"verdict": verdict, "next_action": next_action, "escalated": escalated}
    return next((reason for reason, needs in RULES
                 if all(fields[name] == value for name, value in needs.items())), None)


def must_act(verdict: str, next_action: str, escalated: bool) -> bool:
    """The API's `escalated`: a human must act before anything moves."""
    return reason_of(verdict, next_action, escalated) in MUST_ACT
