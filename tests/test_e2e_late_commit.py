"""Issue 31's first measured failure, end to end: a zero read while the provider is still
applying the request. The sandbox provider commits a charge `DELAY_S` after the call (3 s; the
trial's was 1.5 s; the fault `delay=...`, armed with POST /_sandbox/faults), the client gives up
at 1.0 s, and the model (the
caller) asks for the same charge again; the reconciler's probes read the sandbox
(examples/reconciler.toml's). In the field trial the probe's read at 1.2 s was an authoritative
zero, the verdict verified_not_applied and the retry granted: two charges. Here, through
`@effect` and each framework adapter (kill_harness.py's workers running the examples' agents)
and through `reconciler mcp-proxy` (an embedded store, or `--sidecar`):

  (a) a keyless, untagged charge (no key, no operation id: nothing a probe can find it by) is
      never sent again: every repeat is refused, verdict indeterminate (the probes' reads are
      blind to it, recorded unavailable: probe_blind), before the commit and after it; a human
      decides;
  (b) a keyed, tagged charge whose provider's requests are in flight `inflight_s` = 5 s: no
      retry grant before the settle time (dispatch + 5 s: the zero read before it is
      zero_not_conclusive), and after it the probes find the late charge, verified_applied, so
      it is not sent again.

And the trial's second half (the verdict unchanged 43 s later: nothing read it again): with no
caller asking, the sidecar's sweep reads a keyed charge again after its settle time.

Counted at the sandbox, reset before each case: exactly one PaymentIntent. The sandbox would
deduplicate a keyed resend by its key, so the sends are counted too (the worker's gate log, the
proxy's recorded attempts): one.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx
import mcp.types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment

from reconciler.core.schemas import OperationOut
from reconciler.effect.backends import EmbeddedBackend
from reconciler.integrations.tool_calls import tool_operation
from reconciler.sandbox import RunningSandbox
from reconciler.sandbox.credentials import SANDBOX_ENV
from reconciler.service.app import create_app
from reconciler.service.settings import Settings
from reconciler.service.views import operation_out
from reconciler.testing.patience import PATIENCE_S

from kill_harness import Job, Logged, Zygote, gate_log, sandbox_config
from service_harness import serving

# The probes read the providers' credentials from the environment (the sandbox checks them).
pytestmark = pytest.mark.usefixtures("sandbox_credentials")

#: The sandbox commits the held charge this long after the call; every client gives up at 1 s.
#: Two seconds between the two, for the worker's early ask to come before the commit on a
#: loaded machine (0.5 s was missed by two test runs side by side).
DELAY_S = 3.0
TIMEOUT_S = 1.0
#: (b)'s provider contract: a timed-out request may still be applied this long after dispatch.
INFLIGHT_S = 5.0
#: (a)'s provider contract: an operation still in doubt this long after its intent goes to a
#: human (the sweep's deadline); as long as the held charge takes to commit.
DEADLINE_S = DELAY_S
#: Past a commit or a settle time by this much, on a loaded machine.
MARGIN_S = 0.5

slow = pytest.mark.slow
ADAPTERS = [pytest.param("effect"), pytest.param("openai-agents"),
            pytest.param("langgraph", marks=slow), pytest.param("pydantic-ai", marks=slow),
            pytest.param("anthropic", marks=slow)]


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    forking = Zygote()
    yield forking
    forking.close()


@pytest.fixture
def provider(sandbox: RunningSandbox) -> RunningSandbox:
    """The module's sandbox, emptied, its next charge held `DELAY_S` before it commits."""
    with httpx.Client(base_url=sandbox.url, timeout=PATIENCE_S) as http:
        http.post("/_sandbox/reset").raise_for_status()
        http.post("/_sandbox/faults", json={"provider": "pay", "fault": f"delay={DELAY_S}"}
                  ).raise_for_status()
    return sandbox


def payment_intents(sandbox: RunningSandbox) -> list[str]:
    return [r.ref for r in sandbox.state.objects()
            if r.provider == "pay" and r.ref.startswith("pi_")]


def wait_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()))


def run(zygote: Zygote, job: Job) -> tuple[list[str], list[Logged]]:
    """One worker's run to its end: what its tool calls answered, and its gate log."""
    assert zygote.run(job) == 0
    return json.loads(job.out.read_text()), gate_log(job)


def calls(log: list[Logged], name: str) -> list[Logged]:
    return [entry for entry in log if entry["call"] == name]


def contract(keyless: bool) -> dict[str, float]:
    """(a)'s provider settles at once, so only the probes' sight keeps its zero from counting;
    (b)'s may still be applying a request `INFLIGHT_S` after its caller stopped waiting."""
    if keyless:
        return {"inflight_s": 0.0, "reconcile_deadline_s": DEADLINE_S}
    return {"inflight_s": INFLIGHT_S}


def decided_s(keyless: bool) -> float:
    """How long after the dispatch the model asks again, in its second run (in the proxy's
    session, its third call): past the commit and the deadline (a), the settle time (b)."""
    return (max(DELAY_S, DEADLINE_S) if keyless else INFLIGHT_S) + MARGIN_S


def worker_job(adapter: str, provider: RunningSandbox, folder: Path, *,
               keyless: bool) -> Job:
    run_id = f"{adapter}-{uuid.uuid4().hex[:6]}"
    return Job(adapter, run_id, None, f"sqlite:///{folder / 'r.db'}",
               sandbox_config(provider, folder, **contract(keyless)), provider.url,
               folder / f"{run_id}.json", keyless=keyless)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_keyless_call_timed_out_while_the_provider_held_it_is_never_sent_again(
        adapter: str, provider: RunningSandbox, zygote: Zygote, tmp_path: Path) -> None:
    """Even with a provider that settles at once (inflight_s 0): its probes cannot see it.
    Past the deadline it is a human's to decide."""
    job = worker_job(adapter, provider, tmp_path, keyless=True)
    first, log = run(zygote, job)
    [dispatch] = calls(log, "record_attempt")
    asked = calls(log, "ask_retry")
    assert len(calls(log, "send")) == 1 and dispatch["outcome"] == "timeout", log
    assert asked and asked[0]["at"] < dispatch["at"] + DELAY_S, log  # the trial's early read
    wait_until(dispatch["at"] + decided_s(keyless=True))
    again, later = run(zygote, job)  # the model asks again, in a new run
    assert not calls(later, "send"), later
    for answer in [*asked, *calls(later, "ask_retry")]:
        assert not answer["allowed"] and answer["verdict"] == "indeterminate", answer
        assert "probe_blind" in answer["findings"], answer  # its reads find nothing by it
    assert all("refused: verdict indeterminate" in told for told in [*first[1:], *again]), (
        first, again)
    assert all(r["escalated"] for r in calls(later, "reconcile")), later
    assert len(payment_intents(provider)) == 1


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_keyed_call_gets_no_retry_before_the_settle_time_and_is_found_applied_after(
        adapter: str, provider: RunningSandbox, zygote: Zygote, tmp_path: Path) -> None:
    job = worker_job(adapter, provider, tmp_path, keyless=False)
    first, log = run(zygote, job)
    [dispatch] = calls(log, "record_attempt")
    settles = dispatch["at"] + INFLIGHT_S
    asked = calls(log, "ask_retry")
    assert len(calls(log, "send")) == 1 and dispatch["outcome"] == "timeout", log
    assert asked and all(answer["at"] < settles for answer in asked), log
    for answer in asked:
        assert not answer["allowed"] and answer["verdict"] == "indeterminate", answer
        assert "zero_not_conclusive" in answer["findings"], answer
    assert "refused: verdict indeterminate" in first[1], first
    wait_until(dispatch["at"] + decided_s(keyless=False))
    again, later = run(zygote, job)
    assert not calls(later, "send"), later
    assert [r["verdict"] for r in calls(later, "reconcile")] == ["verified_applied"] * 2, later
    [charge] = payment_intents(provider)
    assert all(charge in told for told in again), again


# `reconciler mcp-proxy` as a client starts it, in front of tests/mcp_sandbox_upstream.py.
UPSTREAM = Path(__file__).with_name("mcp_sandbox_upstream.py")
ARGUMENTS = {"order": "A-17", "amount": 1200}
PROXY = '''[mcp_proxy]
provider = "stripe"
call_timeout_s = {timeout}
scope = "{scope}"
[mcp_proxy.tools.charge]
correlate = ["order"]
sends_key = {sends}
sends_operation_id = {sends}

'''


def text(answer: types.CallToolResult) -> str:
    return " ".join(c.text for c in answer.content if isinstance(c, types.TextContent))


def ask(server: StdioServerParameters, later_s: float | None = None) -> list[tuple[float, str]]:
    """`charge`'s answers, with when each came: called twice at once, then (unless `later_s`
    is None) once more `later_s` after the first answer."""
    async def main() -> list[tuple[float, str]]:
        with anyio.fail_after(60):
            async with Client(server) as client:
                told: list[tuple[float, str]] = []
                for n in range(2 if later_s is None else 3):
                    if n == 2 and later_s is not None:
                        await anyio.sleep(max(0.0, told[0][0] + later_s - time.time()))
                    said = text(await client.call_tool("charge", ARGUMENTS))
                    told.append((time.time(), said))
                return told
    return anyio.run(main)


def recorded(db: str, sidecar: str | None, operation_id: str) -> OperationOut:
    """The operation as recorded (judged, not probed again)."""
    if sidecar is not None:
        with httpx.Client(base_url=sidecar, timeout=PATIENCE_S, trust_env=False) as http:
            return OperationOut.model_validate(http.get(f"/v1/operations/{operation_id}")
                                               .raise_for_status().json())
    with EmbeddedBackend(db) as store:
        judgement = store.ledger.judge(operation_id)
        return operation_out(judgement, judgement.escalated)


@dataclass(frozen=True)
class Proxied:
    """A proxy's configuration in `folder`: the sidecar's (`providers`), the proxy's own
    (`config`: its table, and the providers for an embedded store), and its run (`scope`)."""

    folder: Path
    provider: RunningSandbox
    keyless: bool
    scope: str = field(default_factory=lambda: f"run-{uuid.uuid4().hex[:6]}")

    @property
    def db(self) -> str:
        return f"sqlite:///{self.folder / 'r.db'}"

    @property
    def providers(self) -> Path:
        return sandbox_config(self.provider, self.folder, **contract(self.keyless))

    @property
    def operation_id(self) -> str:
        return tool_operation(self.scope, "charge", ARGUMENTS)

    def server(self, sidecar: str | None) -> StdioServerParameters:
        """`reconciler mcp-proxy` in front of the upstream, on `sidecar` or an embedded store."""
        config = self.folder / "proxy.toml"
        sends = str(not self.keyless).lower()
        config.write_text(PROXY.format(timeout=TIMEOUT_S, scope=self.scope, sends=sends)
                          + self.providers.read_text().partition("[service]")[2]
                          .partition("\n\n")[2])
        store = ["--sidecar", sidecar] if sidecar else ["--db", self.db]
        # The proxy's probes read Stripe's key from its environment (MCP passes a bare one).
        return StdioServerParameters(command=sys.executable, args=[
            "-m", "reconciler", "mcp-proxy", *store, "--config", str(config), "--",
            sys.executable, str(UPSTREAM), self.provider.url],
            env={**get_default_environment(), **SANDBOX_ENV})

    def sidecar(self, sweep_interval_s: float = 0.0) -> AbstractContextManager[str]:
        return serving(create_app(Settings(db=self.db, sweep_interval_s=sweep_interval_s,
                                           config=self.providers)))


@pytest.mark.parametrize("backend", [pytest.param("embedded", marks=slow),
                                     pytest.param("sidecar", marks=slow)])
@pytest.mark.parametrize("keyless", [pytest.param(True, id="keyless"),
                                     pytest.param(False, id="keyed")])
def test_the_mcp_proxy_sends_a_charge_held_past_its_timeout_once(
        backend: str, keyless: bool, provider: RunningSandbox, tmp_path: Path) -> None:
    """(a) keyless: not retried, whatever is read; (b) keyed, inflight_s 3: refused before
    the settle time, found done after it."""
    proxied = Proxied(tmp_path, provider, keyless)
    with ExitStack() as stack:
        sidecar = stack.enter_context(proxied.sidecar()) if backend == "sidecar" else None
        # The first answer comes at least TIMEOUT_S after the dispatch.
        told = ask(proxied.server(sidecar), decided_s(keyless) - TIMEOUT_S)
        operation = recorded(proxied.db, sidecar, proxied.operation_id)
    (_, first), (second_at, second), (_, third) = told
    assert operation.attempts_made == 1, operation
    # Refused before the commit (a) or the settle time (b).
    dispatched = operation.attempts[0].at.timestamp()
    assert second_at < dispatched + (DELAY_S if keyless else INFLIGHT_S), (dispatched, told)
    if keyless:
        assert "a human decides" in first and "Do not call charge again" in first, told
        assert all("not retried: the effect may have happened; a human decides" in said
                   for said in (second, third)), told
        assert operation.verdict.value == "indeterminate", operation
        assert "probe_blind" in operation.findings and operation.escalated, operation
    else:
        assert "refused: verdict indeterminate" in second, told
        assert operation.verdict.value == "verified_applied", operation
        assert "zero_not_conclusive" in operation.findings, operation
    [charge] = payment_intents(provider)
    assert (charge in third) is not keyless, told


@slow
def test_the_sidecars_sweep_reads_a_held_charge_again_after_its_settle_time_unasked(
        provider: RunningSandbox, tmp_path: Path) -> None:
    """The trial's second half: its verdict was still verified_not_applied 43 s later, the
    charge at the provider, because nothing read it again. With no caller asking, the sweep
    comes back after the settle time and finds the charge."""
    proxied = Proxied(tmp_path, provider, keyless=False)
    with proxied.sidecar(sweep_interval_s=0.2) as sidecar:
        (_, first), (_, second) = ask(proxied.server(sidecar))
        dispatched = recorded(proxied.db, sidecar, proxied.operation_id
                              ).attempts[0].at.timestamp()
        wait_until(dispatched + decided_s(keyless=False))
        operation = recorded(proxied.db, sidecar, proxied.operation_id)
        while operation.verdict.value != "verified_applied" and (
                time.time() < dispatched + INFLIGHT_S + 5.0):  # a sweep round or two
            time.sleep(0.1)
            operation = recorded(proxied.db, sidecar, proxied.operation_id)
    assert "refused: verdict indeterminate" in second, (first, second)
    [charge] = payment_intents(provider)
    assert operation.verdict.value == "verified_applied" and operation.attempts_made == 1, (
        operation)
    assert charge in [m.provider_ref for e in operation.evidence for m in e.matches]
