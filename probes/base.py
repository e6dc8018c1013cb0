"""The probe seam: what a probe is given, the one method it has, and how one is built."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TypeAlias, runtime_checkable

from reconciler.core.domain import Intent, Observation, Receipt
from reconciler.core.sight import Sight

log = logging.getLogger(__name__)

#: What a probe returns: an observation of the provider, or the provider's own receipt for a
#: key (one name for it, from the probe's contract to the sweep that records it).
ProbeResult: TypeAlias = Observation | Receipt


def utc_now() -> datetime:
    """The default clock of probes: an observation's time is always timezone-aware UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class ProbeTarget:
    """An operation's identity, as much as a probe needs to find its effect.

    `intent_at` is when the intent was recorded (before any dispatch): a time-windowed read
    (`created[gte]`, `oldest`, `since`, `fromdate`, `DateSent>`) starts there, less a margin for
    the provider's clock, so it always reaches past the latest dispatch. `dispatched_at` is the
    latest dispatch when the caller knows it (the intent's time otherwise).
    """

    operation_id: str
    idempotency_key: str | None
    provider: str
    action: str
    request_hash: str
    correlation: Mapping[str, str] = field(default_factory=dict)
    intent_at: datetime | None = None
    dispatched_at: datetime | None = None

    @classmethod
    def of(cls, intent: Intent, dispatched_at: datetime | None = None) -> ProbeTarget:
        return cls(intent.operation_id, intent.idempotency_key, intent.provider, intent.action,
                   intent.request_hash, dict(intent.correlation), intent.at,
                   dispatched_at or intent.at)


@runtime_checkable
class Probe(Protocol):
    """Reads the provider and reports one piece of evidence about one operation.

    Returns an `Observation` (authority, matches, when, and an error when `unavailable`) or, for
    a lookup of the provider's own record of a key, a `Receipt`. It must not raise for provider
    trouble: an error is an `unavailable` observation, evidence of nothing.

    `sight` says which actions' effects appear where it reads and what it finds them by (SPEC
    section 3): an empty read of an operation it could not see proves no zero. A configured
    probe's is set when it is built (`ProbeRegistry.build`: the configuration's `actions`, and
    what its reads are derived to find effects by); a probe given in code declares its own.
    """

    name: str
    sight: Sight

    def probe(self, target: ProbeTarget) -> ProbeResult: ...


def sight_of(probe: Probe) -> Sight:
    """The probe's sight; a probe that declares none covers none (SPEC section 3), which is
    logged once per probe name: its empty reads no longer count as a zero."""
    sight = getattr(probe, "sight", None)
    if isinstance(sight, Sight):
        return sight
    name = getattr(probe, "name", type(probe).__name__)
    if name not in _SIGHTLESS:
        _SIGHTLESS.add(name)
        log.warning("probe %r has no sight: it covers no action, and none of its empty reads "
                    "counts as a zero (docs/probes.md, \"What a probe sees\")", name)
    return Sight()


#: Probe names already logged for having no sight.
_SIGHTLESS: set[str] = set()


@runtime_checkable
class AsyncProbe(Probe, Protocol):
    """A probe that can also be called as a task on an event loop: `aprobe` reads what `probe`
    reads and answers what it answers, under the same contract. The sweep calls it on its
    probe loop (`probes/loop.py`) instead of giving the call a thread."""

    async def aprobe(self, target: ProbeTarget) -> ProbeResult: ...


class ProbeFactory(Protocol):
    """Builds a probe: what a name in the registry (or a plugin's entry point) resolves to.

    `name` is the probe's own name (it goes into every `Observation.probe`), `options` its
    configuration table (already checked for inline secrets) and `env` the environment to read
    credentials from. Raise `probes.errors.ProbeConfigError` for bad options.
    """

    def __call__(self, name: str, options: Mapping[str, Any], env: Mapping[str, str]) -> Probe:
        ...
