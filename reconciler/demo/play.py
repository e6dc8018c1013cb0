"""The one runner that plays every demo scenario against a live sandbox.

    record intent ─▶ dispatch (fault) ─▶ record attempt ─▶ reconcile, a few rounds ─▶ verdict
                                                             │
                      (a retry scenario) ask the gate ◀──────┘ ─▶ dispatch only if granted

Everything runs on loopback: the sandbox on an ephemeral 127.0.0.1 port, the ledger on a SQLite
file in a temporary directory, the probes built from a configuration like a user's TOML.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from probes.config import parse_config
from reconciler.core.domain import Authority, Facts, Intent, Observation, Receipt, Verdict
from reconciler.core.hashing import derive_idempotency_key
from reconciler.core.schedule import SweepPolicy
from reconciler.demo.agent import SHAPES, dispatch, plan_intent
from reconciler.demo.scenarios import CREDENTIALS, SCENARIOS, Scenario, probe_config
from reconciler.ledger import Judgement, Ledger
from reconciler.ledger.gate import RetryGate, RetryRequest
from reconciler.ledger.sweep import Sweeper
from reconciler.sandbox import RunningSandbox, running_sandbox
from reconciler.sandbox.faults import holds_answer
from reconciler.store.leases import SqlLeases
from reconciler.store.schema import open_store
from reconciler.store.sql import SqlStore

RUN_ID = "demo-run"
#: Reconcile rounds per dispatch, and the real-time wait between them: enough to outlast the
#: settle time and the visibility window after it (scenarios.IN_FLIGHT_S + VISIBILITY_LAG_S)
#: with room to spare.
ROUNDS, ROUND_WAIT_S = 10, 0.3
#: The agent's patience per dispatch, and how long `lose_response` holds a request (longer, so
#: the agent times out).
CLIENT_TIMEOUT_S, HOLD_S = 0.3, 1.0
#: A dispatch whose fault is not meant to outlast the agent's patience (sandbox.faults.
#: holds_answer: a lost answer, a provider still working) waits this long for its answer: on a
#: loaded machine an answer can take longer than CLIENT_TIMEOUT_S, and a timeout there would be
#: another scenario (an acknowledged send read as a timed-out one).
ANSWER_WAIT_S = 30.0
GRANTED, REFUSED = "retry granted", "retry refused"


@dataclass(frozen=True, slots=True)
class Played:
    """What happened in one scenario, next to what was expected."""

    scenario: Scenario
    path: tuple[str, ...]
    expected: tuple[str, ...]
    wire: str
    evidence: str
    findings: tuple[str, ...]

    @property
    def as_expected(self) -> bool:
        return self.path == self.expected


def expected_path(scenario: Scenario) -> tuple[str, ...]:
    """The verdicts (and gate answer) a scenario should go through, in order."""
    path = [] if scenario.early is None else [scenario.early.value]
    path.append(scenario.expect.value)
    if scenario.retry is not None:
        path += [GRANTED if scenario.retry.granted else REFUSED, scenario.retry.then.value]
    return tuple(path)


class Demo:
    """The sandbox, the ledger, the sweeper and the gate the scenarios share."""

    def __init__(self, sandbox: RunningSandbox, store: SqlStore, http: httpx.Client) -> None:
        self.sandbox = sandbox
        self.ledger = Ledger(store)
        self.http = http
        providers = parse_config(probe_config(sandbox.url), env=CREDENTIALS, source="<demo>")
        for setup in providers.values():
            store.put_contract(setup.contract)
        leases = SqlLeases(store)
        # A probe that hangs is cut off well inside the demo's patience, never waited out.
        self.sweeper = Sweeper(self.ledger, leases, lambda name: providers[name].probes,
                               SweepPolicy(probe_timeout_s=3.0), holder="demo-sweeper")
        self.gate = RetryGate(self.ledger, leases)

    def play(self, scenario: Scenario) -> Played:
        shape = SHAPES[scenario.provider]
        self.sandbox.state.configure(**asdict(scenario.reads), hold_s=HOLD_S)
        intent = plan_intent(shape, f"op-{scenario.name}", self.ledger.clock(), RUN_ID)
        self.ledger.record_intent(intent)
        wire = [self._send(intent, 1, scenario.fault)]
        rounds = self._reconcile(intent.operation_id)
        path = [rounds[0].value] if scenario.early is not None else []
        path.append(rounds[-1].value)
        if scenario.retry is not None:
            key = intent.idempotency_key if scenario.retry.same_key else derive_idempotency_key(
                RUN_ID, intent.operation_id + "/retry")
            answer = self.gate.ask(RetryRequest(intent.operation_id, key, intent.request_hash,
                                                holder="demo-agent"))
            path.append(GRANTED if answer.allowed else REFUSED)
            if answer.allowed:
                time.sleep(scenario.retry.after_s)
                wire.append(self._send(intent, 2, scenario.retry.fault))
                path.append(self._reconcile(intent.operation_id)[-1].value)
            else:
                path.append(answer.verdict.value)
        final = self.ledger.judge(intent.operation_id)
        return Played(scenario, tuple(path), expected_path(scenario), ", ".join(wire),
                      evidence_summary(final.facts), final.decision.findings)

    def _send(self, intent: Intent, number: int, fault: str | None) -> str:
        shape = SHAPES[intent.provider]
        attempt = dispatch(self.http, self.sandbox.url, shape, intent, number,
                           self.ledger.clock(), fault=fault,
                           timeout_s=CLIENT_TIMEOUT_S if holds_answer(fault) else ANSWER_WAIT_S)
        if fault is not None and "lose_response" in fault:
            self._committed(intent.request_hash)
        self.ledger.record_attempt(attempt)
        return attempt.outcome.value if attempt.status is None else f"HTTP {attempt.status}"

    def _committed(self, request_hash: str, patience_s: float = 5.0) -> None:
        """Wait until a write whose answer is to be lost has committed: on a loaded machine
        the client can give up before the sandbox got that far, and a write still in flight
        is another scenario (slow_provider_in_flight) than a lost answer."""
        deadline = time.monotonic() + patience_s
        while time.monotonic() < deadline and not any(
                r.request_hash == request_hash for r in self.sandbox.state.objects()):
            time.sleep(0.01)

    def _reconcile(self, operation_id: str) -> list[Verdict]:
        """Probe rounds until a verdict other than indeterminate, at most ROUNDS of them."""
        verdicts: list[Verdict] = []
        for round_number in range(ROUNDS):
            if round_number:
                time.sleep(ROUND_WAIT_S)
            verdicts.append(self._round(operation_id).decision.verdict)
            if verdicts[-1] is not Verdict.INDETERMINATE:
                break
        return verdicts

    def _round(self, operation_id: str) -> Judgement:
        judgement = self.sweeper.reconcile(operation_id)
        if judgement is None:
            raise RuntimeError(f"{operation_id}: another sweeper holds the probe lease")
        return judgement


def evidence_summary(facts: Facts) -> str:
    """What the probes found, in a few words: "receipt lookup + 1 search match"."""
    parts: list[str] = []
    lookups = facts.of(Receipt)
    if lookups:
        bound = all(r.request_hash == facts.intent.request_hash for r in lookups)
        parts.append("receipt lookup" if bound else "receipt lookup (other hash)")
    by_probe: dict[str, list[Observation]] = {}
    for observation in facts.of(Observation):
        by_probe.setdefault(observation.probe, []).append(observation)
    for probe, observations in by_probe.items():
        kind = probe.rsplit(".", 1)[-1].replace("_", " ")
        refs = {m.provider_ref for o in observations for m in o.matches}
        if refs:
            parts.append(f"{len(refs)} {kind} match{'es' if len(refs) > 1 else ''}")
        elif observations[-1].authority is Authority.UNAVAILABLE:
            parts.append(f"{kind} unavailable")
        else:
            parts.append(f"{kind}: nothing ({observations[-1].authority.value})")
    return " + ".join(parts) or "none"


@contextmanager
def demo_world() -> Iterator[Demo]:
    """A fresh sandbox, ledger and HTTP client, torn down on exit."""
    with tempfile.TemporaryDirectory(prefix="reconciler-demo-") as tmp, \
            running_sandbox("127.0.0.1", 0) as sandbox, \
            httpx.Client(trust_env=False) as http:
        # trust_env=False: a proxy from the environment must not see (or reroute) the calls.
        store = open_store(f"sqlite:///{Path(tmp) / 'receipts.db'}")
        try:
            yield Demo(sandbox, store, http)
        finally:
            store.close()


def play_all(scenarios: tuple[Scenario, ...] = SCENARIOS,
             progress: Callable[[str], None] = lambda _: None) -> list[Played]:
    """Play every scenario in order, reporting each as it finishes."""
    played: list[Played] = []
    with demo_world() as demo:
        for number, scenario in enumerate(scenarios, 1):
            started = time.monotonic()
            result = demo.play(scenario)
            played.append(result)
            mark = "ok" if result.as_expected else "DIFFERS"
            progress(f"[{number:2}/{len(scenarios)}] {scenario.name}: {' > '.join(result.path)}"
                     f" ({mark}, {time.monotonic() - started:.1f}s; {scenario.about};"
                     f" findings: {', '.join(result.findings)})")
    return played


def table_rows(played: list[Played]) -> list[list[str]]:
    """The scenario table, its header first: a cell holds a few short lines (a verdict path
    one step a line), so the table fits a 100-column terminal without cutting a name."""
    header = ["scenario", "fault, wire", "verdicts", "evidence", ""]
    return [header] + [
        [f"{p.scenario.name}\n{p.scenario.provider}", f"{p.scenario.fault or '-'}\n{p.wire}",
         "\n> ".join(p.path), p.evidence,
         "ok" if p.as_expected else "DIFFERS, expected\n" + "\n> ".join(p.expected)]
        for p in played]


def closing_line(played: list[Played]) -> str:
    return f"{len(played)} scenarios, {sum(p.as_expected for p in played)} as expected"
