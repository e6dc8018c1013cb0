"""From a provider's JSON answer to the matches it proves.

Where the list (or the one object) is, which field is the `provider_ref`, and which items belong
to the operation. Anything unexpected raises `UnusableResponse`: a response we do not understand
must become "could not answer", never "found nothing".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from probes.base import ProbeTarget
from probes.templates import Template
from reconciler.core.domain import Match

Scalar = str | int | float | bool

#: The marker an agent puts in text a provider keeps no metadata for (an issue body), in both
#: forms docs/webhooks.md offers: `<!-- reconciler:op=ID -->` and
#: `<!-- reconciler:op=ID request_hash=sha256:HEX -->`. The id is read whole, so `op=abc` is
#: never found in `op=abcd`.
MARKER = re.compile(r"<!-- reconciler:op=(?P<op>\S+?)(?: request_hash=(?P<hash>\S+))? -->")

#: How a `FieldCheck` compares: `equals` the value, `contains` it as text, or has it as a
#: `member` of a list (labels).
HOW = ("equals", "contains", "member")


class UnusableResponse(Exception):
    """The answer cannot be read as evidence; the message is short and holds no response data."""


def dig(data: Any, path: str) -> Any:
    """The value at a dotted path (`data`, `metadata.operation_id`); "" is the whole document."""
    for part in path.split(".") if path else ():
        if not isinstance(data, dict) or part not in data:
            raise LookupError(path)
        data = data[part]
    return data


@dataclass(frozen=True, slots=True)
class FieldCheck:
    """A field of a JSON object must equal an expected value (`how`: or contain it as text, or
    be a list that has it as an element).

    A string is a template (`"{operation_id}"`); other scalars are compared as they are.
    """

    path: str
    expected: Template | Scalar
    how: str = "equals"

    @classmethod
    def table(cls, table: Mapping[str, Scalar], where: str,
              how: str = "equals") -> tuple[FieldCheck, ...]:
        return tuple(
            cls(path, Template.parse(value, where) if isinstance(value, str) else value, how)
            for path, value in table.items())

    def holds(self, data: Any, target: ProbeTarget) -> bool:
        try:
            actual = dig(data, self.path)
        except LookupError:
            return False
        wanted = self.expected.render(target) if isinstance(self.expected, Template) \
            else self.expected
        if self.how == "member":
            return isinstance(actual, list) and any(_same(wanted, a) for a in actual)
        if self.how == "contains":
            return isinstance(actual, str) and isinstance(wanted, str) and wanted in actual
        return _same(wanted, actual)


def _same(wanted: Scalar, actual: Any) -> bool:
    # True == 1 in Python, but not in JSON.
    return actual == wanted and isinstance(actual, bool) == isinstance(wanted, bool)


@dataclass(frozen=True, slots=True)
class StatusFilter:
    """Which of an object's statuses are the effect.

    `effect`: the effect happened (or will, like a queued message); `no_effect`: it did not
    (a failed or canceled object is not the effect). `no_effect_with`: statuses that are not
    the effect only when the object also holds a value at the path named (a Stripe
    PaymentIntent back in `requires_payment_method` with a `last_payment_error`: the provider
    declined the payment, and says so; without one it was never confirmed). Any other status
    (a payment still `requires_action`, a status the provider added since) decides nothing
    yet: the read proves no zero while such an object is there.
    """

    path: str
    effect: frozenset[str]
    no_effect: frozenset[str] = frozenset()
    #: (status, path) pairs.
    no_effect_with: tuple[tuple[str, str], ...] = ()

    def classify(self, item: dict[str, Any]) -> bool | None:
        """True: the effect; False: not the effect; None: undecided."""
        try:
            status = dig(item, self.path)
        except LookupError:
            return None
        if status in self.effect:
            return True
        if status in self.no_effect:
            return False
        return False if any(status == when and _held(item, shown_by)
                            for when, shown_by in self.no_effect_with) else None


def _held(item: dict[str, Any], path: str) -> bool:
    try:
        return dig(item, path) not in (None, "", {}, [])
    except LookupError:
        return False


@dataclass(frozen=True, slots=True)
class Found:
    """The operation's matches in one answer; `undecided` counts its objects whose status
    decides nothing yet (they forbid a zero); `foreign` holds the matches in content written
    by another account than the configured one (SPEC section 3: hints, `weak`)."""

    matches: tuple[Match, ...]
    undecided: int = 0
    foreign: tuple[Match, ...] = ()


@dataclass(frozen=True, slots=True)
class Extraction:
    """How to read matches out of a JSON answer.

    `path` leads to a list of items or, when `single`, to the one object of a read by id.
    `hash` is where an item carries the request hash the agent attached (for instance
    `metadata.request_hash`): a real provider returns only what it was given. `marker` is a
    text field that must hold this operation's `MARKER` (whose `request_hash`, when there is
    no `hash` path, is the match's hash). `author` checks who wrote an item: a match that
    fails them was written by someone else and proves nothing.
    """

    path: str
    single: bool
    ref: str
    hash: str | None = None
    where: tuple[FieldCheck, ...] = ()
    status: StatusFilter | None = None
    marker: str | None = None
    author: tuple[FieldCheck, ...] = ()

    def items(self, body: Any) -> list[dict[str, Any]]:
        """The answer's objects (one, for a read by id)."""
        try:
            located = dig(body, self.path)
        except LookupError:
            raise UnusableResponse(f"no {self.path!r} in the response") from None
        if self.single:
            if not isinstance(located, dict):
                raise UnusableResponse("the response is not an object")
            return [located]
        if not isinstance(located, list) or not all(isinstance(i, dict) for i in located):
            raise UnusableResponse(f"{self.path or 'the response'!r} is not a list of objects")
        return located

    def found(self, body: Any, target: ProbeTarget) -> Found:
        items = self.items(body)
        if self.single and not self._belongs(items[0], target):
            # Someone else's object under our reference proves nothing either way.
            raise UnusableResponse("the object found is not this operation's")
        matches: dict[str, Match] = {}
        foreign: dict[str, Match] = {}
        undecided = 0
        for item in items:
            if not self._belongs(item, target):
                continue
            effect = True if self.status is None else self.status.classify(item)
            if effect is None:
                undecided += 1
            elif effect:
                match = self._match(item, target)
                ours = all(check.holds(item, target) for check in self.author)
                (matches if ours else foreign).setdefault(match.provider_ref, match)
        return Found(tuple(matches.values()), undecided, tuple(foreign.values()))

    def _belongs(self, item: dict[str, Any], target: ProbeTarget) -> bool:
        return all(check.holds(item, target) for check in self.where) and (
            self.marker is None or self._marker(item, target) is not None)

    def _marker(self, item: dict[str, Any], target: ProbeTarget) -> re.Match[str] | None:
        """This operation's marker in the item's `marker` text (an exact id, either form)."""
        try:
            text = dig(item, str(self.marker))
        except LookupError:
            return None
        if not isinstance(text, str):
            return None
        return next((m for m in MARKER.finditer(text) if m["op"] == target.operation_id), None)

    def _match(self, item: dict[str, Any], target: ProbeTarget) -> Match:
        try:
            ref = dig(item, self.ref)
        except LookupError:
            raise UnusableResponse(f"a matching item has no {self.ref!r}") from None
        if isinstance(ref, bool) or not isinstance(ref, str | int) or ref == "":
            raise UnusableResponse(f"a matching item has an unusable {self.ref!r}")
        request_hash: Any = None
        if self.hash is not None:
            try:
                request_hash = dig(item, self.hash)
            except LookupError:
                request_hash = None
            if not isinstance(request_hash, str | None):
                raise UnusableResponse(f"a matching item has an unusable {self.hash!r}")
        elif self.marker is not None:
            marker = self._marker(item, target)
            request_hash = marker["hash"] if marker else None
        return Match(str(ref), request_hash)
