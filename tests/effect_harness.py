"""A provider as a plain Python object, for `@effect` and the framework adapters' tests: it
charges by idempotency key, can lose its answer after charging or fail before, and has an
authoritative probe that lists its charges by key. Both backends of `reconciler.effect` (the
embedded store and a sidecar over HTTP) are built on it by `backend`, which conftest.py's
`store` fixture runs each test on; `charge_tool` is the tool the adapters' agents call."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes.base import Probe, ProbeTarget, utc_now
from reconciler.client import ReconcilerClient
from reconciler.client.effects import Recorder
from reconciler.core.domain import Authority, Carried, Match, Observation, ProviderContract
from reconciler.core.sight import Sight
from reconciler.effect import current_call
from reconciler.effect.backends import EmbeddedBackend
from reconciler.ledger import Ledger
from reconciler.service.app import create_app
from reconciler.service.settings import Settings
from reconciler.store.schema import open_store
from reconciler.testing import FakeProbe

from service_harness import serving

PROVIDER = "ledger"
#: This provider is never still applying a request when its caller stops waiting (a lost
#: answer comes after the charge, a failed send charges nothing): nothing is in flight.
CONTRACT = ProviderContract(PROVIDER, idempotency_keys=True, visibility_lag_s=0.0,
                            inflight_s=0.0)


class Lost(TimeoutError):
    """The provider's answer never came back (a read timeout, as the caller sees it)."""


@dataclass
class Provider:
    """Charges by key. `faults` are used up in order, one per call: "lose_response" charges
    and then times out, "fail_before_commit" times out without charging, "refuse" refuses the
    connection (nothing sent)."""

    charges: list[tuple[str, str]] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    calls: int = 0

    def charge(self, key: str, amount: int) -> dict[str, Any]:
        self.calls += 1
        fault = self.faults.pop(0) if self.faults else None
        if fault == "refuse":
            raise ConnectionRefusedError("connection refused")
        if fault == "fail_before_commit":
            raise Lost("read timed out")
        ref = f"ch_{len(self.charges) + 1}"
        self.charges.append((key, ref))
        if fault == "lose_response":
            raise Lost("read timed out")
        return {"id": ref, "amount": amount}

    def refs(self, key: str | None) -> list[str]:
        return [ref for k, ref in self.charges if k == key]


def charge_tool(provider: Provider) -> Callable[[str, int], dict[str, Any]]:
    """The tool the adapters' agents are given, before their framework's decorator: it charges
    `provider` under the idempotency key the gate gave the call (its name, docstring and
    signature are what the frameworks show the model)."""
    def charge(order: str, amount: int) -> dict[str, Any]:
        """Charge the customer for an order."""
        call = current_call()
        assert call is not None and call.intent.idempotency_key is not None
        return provider.charge(call.intent.idempotency_key, amount)
    return charge


def charges_probe(provider: Provider) -> FakeProbe:
    """The kit's fake probe reading `provider`'s own list of charges under the operation's key:
    authoritative, and it finds a `charge` by the key the call sent."""
    def charges(target: ProbeTarget) -> Observation:
        return Observation(target.operation_id, utc_now(), "ledger.charges",
                           Authority.AUTHORITATIVE,
                           tuple(Match(ref) for ref in provider.refs(target.idempotency_key)))
    return FakeProbe(answer=charges, name="ledger.charges",
                     sight=Sight(frozenset({"charge"}), frozenset({Carried.IDEMPOTENCY_KEY})))


def probes_for(provider: Provider) -> Any:
    def lookup(name: str) -> Sequence[Probe]:
        return [charges_probe(provider)] if name == PROVIDER else []
    return lookup


@contextmanager
def backend(kind: str, provider: Provider, tmp_path: Path,
            probes: Sequence[Probe] | None = None) -> Iterator[Recorder]:
    """An embedded store, or a sidecar on loopback, probing `provider` (or with `probes`)."""
    db = f"sqlite:///{tmp_path / f'{kind}.db'}"
    lookup = probes_for(provider) if probes is None else (
        lambda name: probes if name == PROVIDER else [])
    if kind == "embedded":
        with EmbeddedBackend(db, probes_for=lookup, contracts=[CONTRACT]) as b:
            yield b
        return
    store = open_store(db)
    store.put_contract(CONTRACT)
    app = create_app(Settings(db=db, sweep_interval_s=0), ledger=Ledger(store),
                     probes_for=lookup)
    with serving(app) as url, ReconcilerClient(url) as client:
        yield client


BACKENDS = ("embedded", "sidecar")
