"""From a provider's JSON answer to the matches it proves.

Where the list (or the one object) is, which field is the `provider_ref`, and which items belong
to the operation. Anything unexpected raises `UnusableResponse`: a response we do not understand
must become "could not answer", never "found nothing".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from probes.base import ProbeTarget
from probes.templates import Template
from reconciler.domain import Match

Scalar = str | int | float | bool


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
    """A field of a JSON object must equal (or, for `contains`, contain) an expected value.

    A string is a template (`"{operation_id}"`); other scalars are compared as they are.
    """

    path: str
    expected: Template | Scalar
    contains: bool = False

    @classmethod
    def table(cls, table: Mapping[str, Scalar], where: str,
              contains: bool = False) -> tuple[FieldCheck, ...]:
        return tuple(
            cls(path, Template.parse(value, where) if isinstance(value, str) else value, contains)
            for path, value in table.items())

    def holds(self, data: Any, target: ProbeTarget) -> bool:
        try:
            actual = dig(data, self.path)
        except LookupError:
            return False
        if isinstance(self.expected, Template):
            wanted = self.expected.render(target)
            return isinstance(actual, str) and (
                wanted in actual if self.contains else actual == wanted)
        # True == 1 in Python, but not in JSON.
        return actual == self.expected and isinstance(actual, bool) == isinstance(
            self.expected, bool)


@dataclass(frozen=True, slots=True)
class StatusFilter:
    """Which of an object's statuses are the effect.

    `effect`: the effect happened (or will, like a queued message); `no_effect`: it did not
    (a failed or canceled object is not the effect). Any other status (a payment still
    `requires_action`, a status the provider added since) decides nothing yet: the read
    proves no zero while such an object is there.
    """

    path: str
    effect: frozenset[str]
    no_effect: frozenset[str] = frozenset()

    def classify(self, item: dict[str, Any]) -> bool | None:
        """True: the effect; False: not the effect; None: undecided."""
        try:
            status = dig(item, self.path)
        except LookupError:
            return None
        if status in self.effect:
            return True
        return False if status in self.no_effect else None


@dataclass(frozen=True, slots=True)
class Found:
    """The operation's matches in one answer; `undecided` counts its objects whose status
    decides nothing yet (they forbid a zero)."""

    matches: tuple[Match, ...]
    undecided: int = 0


@dataclass(frozen=True, slots=True)
class Extraction:
    """How to read matches out of a JSON answer.

    `path` leads to a list of items or, when `single`, to the one object of a read by id.
    `hash` is where an item carries the request hash the agent attached (for instance
    `metadata.request_hash`): a real provider returns only what it was given.
    """

    path: str
    single: bool
    ref: str
    hash: str | None = None
    where: tuple[FieldCheck, ...] = ()
    status: StatusFilter | None = None

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
        undecided = 0
        for item in items:
            if not self._belongs(item, target):
                continue
            effect = True if self.status is None else self.status.classify(item)
            if effect is None:
                undecided += 1
            elif effect:
                match = self._match(item)
                matches.setdefault(match.provider_ref, match)
        return Found(tuple(matches.values()), undecided)

    def _belongs(self, item: dict[str, Any], target: ProbeTarget) -> bool:
        return all(check.holds(item, target) for check in self.where)

    def _match(self, item: dict[str, Any]) -> Match:
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
        return Match(str(ref), request_hash)
