"""Could a probe have seen this operation's effect? SPEC section 3, "a zero counts only where the
probe could have seen the effect". Pure: no I/O, no clock.

Every probe declares its `Sight`: the actions whose effects appear where it reads (*scope*) and
what it finds an effect by (*correlation*). Every intent says what its request carried
(`Intent.carried`). An empty read by a probe that fails either question proves no zero: the
shell records it `unavailable` with the finding `probe_blind` and the question's name. The
third question, *time* (was the read made after the request settled?), is the engine's: a zero
before the latest settle time is never conclusive (`verdicts.is_conclusive_zero`).

    probe.sight.covers  ∋ intent.action ?           no ─▶ blind: scope
    probe.sight.finds_by ∩ intent.carried ≠ ∅ ?     no ─▶ blind: correlation
      (provider_ref counts as carried once the provider returned a ref for this operation)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from reconciler.core.domain import Carried, Intent

#: The finding an empty read gets when the probe could not have seen the effect.
PROBE_BLIND = "probe_blind"


class Blind(StrEnum):
    """The question of SPEC section 3 that a probe's read failed."""

    SCOPE = "scope"
    CORRELATION = "correlation"
    TIME = "time"


@dataclass(frozen=True, slots=True)
class Sight:
    """What a probe can see: the actions it covers (none declared: it covers none) and what it
    finds effects by."""

    covers: frozenset[str] = frozenset()
    finds_by: frozenset[Carried] = frozenset()

    def covers_action(self, action: str) -> bool:
        return action in self.covers


def blind_to(sight: Sight, intent: Intent, *,
             ref_returned: Callable[[], bool] = lambda: False) -> Blind | None:
    """The first question of scope and correlation that `sight` fails for `intent` (None: the
    probe could have seen its effect). `ref_returned` asks whether the provider returned a
    reference for this operation (a receipt in a response), so that a probe reading by
    reference can find it."""
    if not sight.covers_action(intent.action):
        return Blind.SCOPE
    if sight.finds_by & intent.carried:
        return None
    # Asked last and only of a probe that reads by reference: it may cost the shell a read.
    if Carried.PROVIDER_REF in sight.finds_by and ref_returned():
        return None
    return Blind.CORRELATION


def blind_error(blind: Blind, probe: str, intent: Intent) -> str:
    """The `error` of the `unavailable` observation that stands for a blind empty read."""
    if blind is Blind.SCOPE:
        return (f"{PROBE_BLIND}: scope: probe {probe!r} does not cover action "
                f"{intent.action!r}; its zero proves nothing")
    if blind is Blind.CORRELATION:
        return (f"{PROBE_BLIND}: correlation: probe {probe!r} finds effects by something the "
                "request did not carry; its zero proves nothing")
    return f"{PROBE_BLIND}: time: the read came before the request settled"
