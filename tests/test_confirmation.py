"""Confirmation after success (SPEC section 4), end to end over HTTP against the sandbox: a
provider that double-processed a charge, or acknowledged one it never made, is caught by the
sweep on its own once the visibility window has passed, and the run that made the call is
marked unhealthy although it completed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from probes.config import parse_config
from reconciler.core.runs.messages import ToolSpec
from reconciler.demo.agent import SHAPES, receipt_of
from reconciler.demo.scenarios import CREDENTIALS, VISIBILITY_LAG_S, probe_config
from reconciler.ledger import Ledger
from reconciler.runtime.agent import Agent
from reconciler.runtime.scripted import ScriptedModel, call, say, tool_use
from reconciler.runtime.tools import Tool, ToolCall, ToolOutput
from reconciler.sandbox import running_sandbox
from reconciler.service import Settings, create_app
from reconciler.store.schema import open_store
from reconciler.testing.patience import PATIENCE_S

from service_harness import serving

pytestmark = pytest.mark.usefixtures("no_internal_errors")

PAYMENTS = SHAPES["payments"]
#: Bounds the wait for the sweep, which runs every SWEEP_S: the verdict must change by itself.
SWEEP_S, WAIT_S = 0.2, 60.0


def charge_tool(sandbox_url: str, fault: str | None) -> Tool:
    """Charges at the sandbox with `fault`: the provider answers 200 either way."""

    async def charge(tool_call: ToolCall) -> ToolOutput:
        assert tool_call.operation_id is not None
        headers, body = PAYMENTS.request(tool_call.operation_id)
        headers = {**headers, "Idempotency-Key": tool_call.idempotency_key or ""}
        if fault is not None:
            headers["X-Sandbox-Fault"] = fault
        async with httpx.AsyncClient(timeout=5) as http:
            response = await http.post(sandbox_url + PAYMENTS.root + PAYMENTS.path,
                                       headers=headers, content=body)
        return ToolOutput(response.text, is_error=not response.is_success,
                          status=response.status_code, receipt=receipt_of(PAYMENTS, response))

    return Tool(ToolSpec("charge", "charge the deposit", {"type": "object"}), PAYMENTS.effect,
                charge, provider=PAYMENTS.provider, action=PAYMENTS.action,
                request=lambda c: PAYMENTS.params(c.operation_id or ""), uses_key=True,
                tagged=True)  # the body's metadata.operation_id


@contextmanager
def sidecar_charging(tmp_path: Path, fault: str | None) -> Iterator[httpx.Client]:
    """The sidecar sweeping every SWEEP_S with the sandbox's probes, and an agent that charges
    once (with `fault`) and says it is done."""
    with running_sandbox() as sandbox:
        providers = parse_config(probe_config(sandbox.url), env=CREDENTIALS)
        store = open_store(f"sqlite:///{tmp_path / 'r.db'}")
        for setup in providers.values():
            store.put_contract(setup.contract)
        agent = Agent(ScriptedModel([call(tool_use("charge", {"amount": 1250})), say("Charged.")]),
                      [charge_tool(sandbox.url, fault)])
        app = create_app(Settings(sweep_interval_s=SWEEP_S), ledger=Ledger(store),
                         agent=agent,
                         probes_for=lambda p: providers[p].probes if p in providers else ())
        with serving(app) as url, httpx.Client(base_url=url, timeout=PATIENCE_S) as http:
            yield http


def settled_by_itself(http: httpx.Client, operation_id: str, verdict: str) -> dict[str, Any]:
    """The operation as the sweep leaves it, read until it shows `verdict` (or WAIT_S passed)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        body: dict[str, Any] = http.get(f"/v1/operations/{operation_id}").json()
        if body["verdict"] == verdict or time.monotonic() > deadline:
            return body
        time.sleep(SWEEP_S)


@pytest.mark.parametrize(("fault", "verdict"), [("duplicate", "duplicate_effect"),
                                                ("ack_no_effect", "false_success")])
def test_a_success_the_provider_contradicts_is_caught_and_the_run_marked_unhealthy(
        tmp_path: Path, fault: str, verdict: str) -> None:
    with sidecar_charging(tmp_path, fault) as http:
        run = http.post("/v1/runs", json={"input": "Charge the deposit."}).json()
        assert run["state"] == "completed", run
        [charge] = run["calls"]
        operation_id = charge["operation_id"]

        operation = settled_by_itself(http, operation_id, verdict)
        assert operation["verdict"] == verdict, operation
        assert "success_claim" in operation["findings"]
        assert operation["retry_allowed"] is False

        health = http.get(f"/v1/runs/{run['run_id']}").json()["health"]
        assert health["healthy"] is False
        assert [(c["operation_id"], c["verdict"]) for c in health["unhealthy_calls"]] == [
            (operation_id, verdict)]


def test_a_success_the_provider_confirms_stays_and_probing_stops(tmp_path: Path) -> None:
    with sidecar_charging(tmp_path, None) as http:
        run = http.post("/v1/runs", json={"input": "Charge the deposit."}).json()
        [charge] = run["calls"]
        operation_id = charge["operation_id"]
        settled = settled_by_itself(http, operation_id, "verified_applied")
        assert settled["verdict"] == "verified_applied", settled
        # The confirmation round, if one is owed, comes once the window has passed; after it
        # nothing is due, and ten more sweeps read nothing more.
        time.sleep(VISIBILITY_LAG_S + SWEEP_S * 10)
        seen = http.get(f"/v1/operations/{operation_id}").json()
        time.sleep(SWEEP_S * 10)
        later = http.get(f"/v1/operations/{operation_id}").json()
        assert later["verdict"] == "verified_applied"
        assert len(later["evidence"]) == len(seen["evidence"])
        assert http.get(f"/v1/runs/{run['run_id']}").json()["health"]["healthy"] is True
