"""Where `reconciler.effect` keeps its records: a sidecar over HTTP, or a store in this process.

Both speak `client.effects.Recorder`, the four calls an effect needs. `ReconcilerClient` is
one (the sidecar: many workers, one place that probes); `EmbeddedBackend` is the same ledger, retry
gate and sweeper the sidecar runs, opened in-process on a SQLAlchemy URL, for a single process
that wants no second one running.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from pathlib import Path

from probes.base import Probe
from reconciler.client.calls import RecordedOut
from reconciler.core.domain import Attempt, Intent, Match, ProviderContract
from reconciler.core.schedule import SweepPolicy
from reconciler.core.schemas import AttemptIn, IntentIn, OperationOut, RetryIn, RetryOut
from reconciler.ledger import Judgement, Ledger
from reconciler.ledger.gate import RetryGate, RetryRequest
from reconciler.ledger.sweep import ProbeLookup, Sweeper
from reconciler.service.settings import load_providers
from reconciler.service.views import operation_out, retry_out
from reconciler.store.kinds import leases_of
from reconciler.store.schema import DEFAULT_URL, open_store


class EmbeddedBackend:
    """The sidecar's ledger, gate and sweeper in this process, on the store at `db`.

    `config` is the sidecar's configuration file (its `[providers.*]` contracts and probes);
    `probes_for` and `contracts` give the same in code. Without probes, a repeat call after an
    ambiguous attempt is refused until evidence is recorded. Nothing sweeps in the background:
    a repeat call reconciles its own operation first, and `sweep()` runs one pass on demand.
    """

    def __init__(self, db: str = DEFAULT_URL, *, config: Path | None = None,
                 probes_for: ProbeLookup | None = None, policy: SweepPolicy | None = None,
                 contracts: Sequence[ProviderContract] = (), lease_ttl_s: float = 60.0) -> None:
        store = open_store(db)
        providers = load_providers(config) if config else {}
        for contract in [*(setup.contract for setup in providers.values()), *contracts]:
            store.put_contract(contract)

        def configured(provider: str) -> Sequence[Probe]:
            setup = providers.get(provider)
            return setup.probes if setup else ()

        self.ledger = Ledger(store)
        leases = leases_of(store)
        self.gate = RetryGate(self.ledger, leases, lease_ttl_s)
        self.sweeper = Sweeper(self.ledger, leases, probes_for or configured, policy)

    def _out(self, judgement: Judgement) -> OperationOut:
        return operation_out(judgement, judgement.escalated)

    def record_intent(self, intent: IntentIn) -> RecordedOut[OperationOut]:
        recorded = self.ledger.record_intent(Intent(
            intent.operation_id, intent.request_hash, intent.idempotency_key, intent.provider,
            intent.action, intent.effect, self.ledger.clock(), intent.run_id,
            intent.tool_call_id, dict(intent.correlation),
            None if intent.carries is None else frozenset(intent.carries)))
        return RecordedOut(self._out(recorded.judgement), recorded.created)

    def record_attempt(self, operation_id: str, attempt: AttemptIn) -> RecordedOut[OperationOut]:
        # The dispatch time the caller measured, as the sidecar keeps it (one clock here).
        at = attempt.at.astimezone(UTC) if attempt.at else self.ledger.clock()
        receipt = attempt.receipt
        # Through the gate, as the sidecar records it: a retry reported with its grant's
        # holder and token was sent under the grant, one without was not (SPEC rule 6).
        recorded = self.gate.record_attempt(Attempt(
            operation_id, attempt.attempt, attempt.idempotency_key, attempt.request_hash, at,
            attempt.outcome, attempt.status,
            Match(receipt.provider_ref, receipt.request_hash) if receipt else None),
            attempt.holder, token=attempt.grant or "")
        return RecordedOut(self._out(recorded.judgement), recorded.created)

    def reconcile(self, operation_id: str) -> OperationOut:
        judgement = self.sweeper.reconcile(operation_id)
        return self._out(judgement or self.ledger.judge(operation_id))

    def ask_retry(self, operation_id: str, retry: RetryIn) -> RetryOut:
        holder = retry.holder or "embedded"
        answer = self.gate.ask(RetryRequest(operation_id, retry.idempotency_key,
                                            retry.request_hash, holder))
        return retry_out(answer, holder)

    def sweep(self) -> list[OperationOut]:
        """One sweep pass over every operation due for probing."""
        return [self._out(j) for j in self.sweeper.sweep()]

    def close(self) -> None:
        self.sweeper.close()

    def __enter__(self) -> EmbeddedBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
