"""Placeholders that put an operation's identity into a probe's URL, query and filters.

A template is checked when the probe is built (a typo fails at startup, not at 3 a.m.) and only
knows a fixed set of fields: `{operation_id}`, `{idempotency_key}`, `{request_hash}`,
`{provider}`, `{action}` and `{correlation[NAME]}`. No attribute or index access beyond that, so a
configuration cannot reach into Python objects the way `str.format` would let it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from string import Formatter

from probes.base import ProbeTarget
from probes.errors import ProbeConfigError

_FIELD = re.compile(
    r"operation_id|idempotency_key|request_hash|provider|action|correlation\[[A-Za-z0-9_.-]+\]")


class MissingValue(Exception):
    """The operation lacks a value the template needs; the probe cannot answer for it."""


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template: its text, and its literal pieces each followed by a field or None."""

    text: str
    parts: tuple[tuple[str, str | None], ...]

    @classmethod
    def parse(cls, text: str, where: str) -> Template:
        try:
            pieces = list(Formatter().parse(text))
        except ValueError as exc:
            raise ProbeConfigError(f"{where}: bad template {text!r}: {exc}") from exc
        for _, field, spec, conversion in pieces:
            if field is not None and (spec or conversion or not _FIELD.fullmatch(field)):
                raise ProbeConfigError(
                    f"{where}: unknown placeholder {{{field}}} in {text!r}; use {{operation_id}}, "
                    "{idempotency_key}, {request_hash}, {provider}, {action} or "
                    "{correlation[NAME]}")
        return cls(text, tuple((literal, field) for literal, field, _, _ in pieces))

    def render(self, target: ProbeTarget, encode: Callable[[str], str] = str) -> str:
        """The text for `target`, each inserted value passed through `encode` (e.g. URL quoting)."""
        return "".join(literal + ("" if field is None else encode(_value(field, target)))
                       for literal, field in self.parts)


def _value(field: str, target: ProbeTarget) -> str:
    if field.startswith("correlation["):
        ref = field[len("correlation["):-1]
        value = target.correlation.get(ref)
        if not value:
            raise MissingValue(f"correlation ref missing: {ref}")
        return value
    attribute: str | None = getattr(target, field)
    if attribute is None:
        raise MissingValue(f"operation has no {field.replace('_', ' ')}")
    return attribute
