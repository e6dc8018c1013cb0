"""Placeholders that put an operation's identity into a probe's URL, query, headers and filters.

A template is checked when the probe is built (a typo fails at startup, not at 3 a.m.) and only
knows a fixed set of fields: `{operation_id}`, `{idempotency_key}`, `{request_hash}`,
`{provider}`, `{action}`, `{correlation[NAME]}`, and two times, `{intent_at:FORMAT}` and
`{dispatched_at:FORMAT}`. No attribute or index access beyond that, so a configuration cannot
reach into Python objects the way `str.format` would let it.

A time needs a format, and may carry an offset in seconds (`{intent_at:unix-300}`: five minutes
before the intent, for a window's lower bound that tolerates the provider's clock):

    unix     1700000000               Stripe created[gte]
    unix6    1700000000.000000        Slack oldest / latest
    iso      2023-11-14T22:13:20Z     GitHub since
    date     2023-11-14               Twilio DateSent>
    eastern  2023-11-14T17:13:20      Postmark fromdate (its API reads US Eastern time; rendered
                                      at UTC-5, which is never later than Eastern, so a lower
                                      bound only widens)

Every format rounds down: a lower bound rounded down still covers the moment it stands for.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from string import Formatter

from probes.base import ProbeTarget
from probes.errors import ProbeConfigError

_FIELD = re.compile(
    r"operation_id|idempotency_key|request_hash|provider|action|correlation\[[A-Za-z0-9_.-]+\]")
_TIME_FIELDS = frozenset({"intent_at", "dispatched_at"})
_TIME_SPEC = re.compile(r"(?P<format>unix6|unix|iso|date|eastern)(?P<offset>[+-][0-9]+)?")
_EASTERN_NEVER_LATER = timezone(timedelta(hours=-5))


class MissingValue(Exception):
    """The operation lacks a value the template needs; the probe cannot answer for it."""


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template: its text, and its literal pieces each followed by a field (and its
    time spec) or None."""

    text: str
    parts: tuple[tuple[str, str | None, str], ...]

    @classmethod
    def parse(cls, text: str, where: str) -> Template:
        try:
            pieces = list(Formatter().parse(text))
        except ValueError as exc:
            raise ProbeConfigError(f"{where}: bad template {text!r}: {exc}") from exc
        for _, name, spec, conversion in pieces:
            if name is None:
                continue
            if name in _TIME_FIELDS:
                if conversion or not spec or not _TIME_SPEC.fullmatch(spec):
                    raise ProbeConfigError(
                        f"{where}: {{{name}}} in {text!r} needs a format: "
                        f"{{{name}:unix}}, unix6, iso, date or eastern, optionally with an "
                        f"offset in seconds ({{{name}:unix-300}})")
            elif spec or conversion or not _FIELD.fullmatch(name):
                raise ProbeConfigError(
                    f"{where}: unknown placeholder {{{name}}} in {text!r}; use {{operation_id}}, "
                    "{idempotency_key}, {request_hash}, {provider}, {action}, "
                    "{correlation[NAME]}, {intent_at:FORMAT} or {dispatched_at:FORMAT}")
        return cls(text, tuple((literal, name, spec or "") for literal, name, spec, _ in pieces))

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(name for _, name, _ in self.parts if name is not None)

    def render(self, target: ProbeTarget, encode: Callable[[str], str] = str) -> str:
        """The text for `target`, each inserted value passed through `encode` (e.g. URL quoting)."""
        return "".join(
            literal + ("" if name is None else encode(_value(name, spec, target)))
            for literal, name, spec in self.parts)


def _value(name: str, spec: str, target: ProbeTarget) -> str:
    if name in _TIME_FIELDS:
        at: datetime | None = getattr(target, name)
        if at is None:
            raise MissingValue(f"operation has no {name.replace('_', ' ')}")
        return format_time(at, spec)
    if name.startswith("correlation["):
        ref = name[len("correlation["):-1]
        value = target.correlation.get(ref)
        if not value:
            raise MissingValue(f"correlation ref missing: {ref}")
        return value
    attribute: str | None = getattr(target, name)
    if attribute is None:
        raise MissingValue(f"operation has no {name.replace('_', ' ')}")
    return attribute


def format_time(at: datetime, spec: str) -> str:
    """`at` in a time spec's format (see the module docstring), rounded down."""
    match = _TIME_SPEC.fullmatch(spec)
    if match is None:
        raise ValueError(spec)
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    at = at + timedelta(seconds=int(match["offset"] or 0))
    kind = match["format"]
    if kind == "unix":
        return str(math.floor(at.timestamp()))
    if kind == "unix6":
        micros = math.floor(at.timestamp() * 1_000_000)
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"
    if kind == "iso":
        return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if kind == "date":
        return at.astimezone(UTC).strftime("%Y-%m-%d")
    return at.astimezone(_EASTERN_NEVER_LATER).strftime("%Y-%m-%dT%H:%M:%S")
