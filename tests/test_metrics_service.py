"""Metrics that mean what they say (issue 17): verdict transitions, not reads; what waits on a
human, by reason and age; HTTP requests by route template; agent runs' steps; and a dashboard
whose every query names a metric the sidecar exports."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reconciler.core.domain import Effect, ProviderContract
from reconciler.core.runs.events import EventKind
from reconciler.core.runs.messages import ToolSpec
from reconciler.ledger import Ledger
from reconciler.runtime.agent import Agent
from reconciler.runtime.scripted import ScriptedModel, call, say, tool_use
from reconciler.runtime.tools import Tool, ToolCall, ToolOutput
from reconciler.service import Settings, create_app
from reconciler.store.journal import SqlJournal
from reconciler.store.schema import open_store
from reconciler.testing.patience import PATIENCE_S

from service_harness import serving
from sidecar_client import Sidecar, zero_probe

pytestmark = pytest.mark.usefixtures("no_internal_errors")

DASHBOARD = Path(__file__).parent.parent / "dashboards" / "reconciler.json"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(sidecar: Sidecar) -> Samples:
    response = sidecar.http.get("/metrics")
    assert response.status_code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text)
            for s in family.samples}


def verdicts(samples: Samples) -> dict[str, float]:
    return {dict(labels)["verdict"]: value for (name, labels), value in samples.items()
            if name == "reconciler_verdicts_total"}


def test_reads_do_not_change_the_verdicts_counted(sidecar: Sidecar) -> None:
    sidecar.not_applied("op-1")
    before = verdicts(scrape(sidecar))
    for _ in range(5):
        sidecar.get("/v1/operations/op-1")
    sidecar.get("/v1/operations")
    assert sidecar.retry("op-1").status_code == 200
    assert verdicts(scrape(sidecar)) == before


def test_each_verdict_an_operation_enters_is_counted_once(sidecar: Sidecar) -> None:
    before = verdicts(scrape(sidecar))
    sidecar.not_applied("op-1")  # indeterminate (new), then verified_not_applied
    sidecar.get("/v1/operations/op-1")
    after = verdicts(scrape(sidecar))
    assert after.get("indeterminate", 0) - before.get("indeterminate", 0) == 1
    assert after["verified_not_applied"] - before.get("verified_not_applied", 0) == 1


def test_what_waits_on_a_human_is_gauged_by_reason_and_age(sidecar: Sidecar) -> None:
    sidecar.intent("late", "slow")  # a deadline of 0: a human decides at once
    sidecar.attempt("late")
    journal = SqlJournal(sidecar.store)
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    run = journal.append(journal.create("r1", {"input": "x"}, long_ago), EventKind.STARTED, {},
                         long_ago)
    journal.append(run, EventKind.APPROVAL_REQUESTED,
                   {"tool_call_id": "t1", "resume_token": "tok", "payload": {}}, long_ago)
    samples = scrape(sidecar)
    op = (("kind", "operation"), ("reason", "escalate_to_human"))
    waiting_run = (("kind", "run"), ("reason", "awaiting_approval"))
    assert samples[("reconciler_waiting_on_human", op)] == 1
    assert samples[("reconciler_waiting_on_human", (("kind", "operation"),
                                                     ("reason", "escalated")))] == 0
    assert samples[("reconciler_waiting_on_human", waiting_run)] == 1
    assert samples[("reconciler_waiting_on_human_oldest_seconds", waiting_run)] >= 3600
    assert samples[("reconciler_runs", (("state", "awaiting_approval"),))] == 1
    sidecar.post("/v1/operations/late/resolution", {"verdict": "verified_applied",
                                                   "actor": "ops", "note": "seen"})
    assert scrape(sidecar)[("reconciler_waiting_on_human", op)] == 0


def test_http_requests_are_counted_by_route_template_and_status(sidecar: Sidecar) -> None:
    sidecar.intent("op-1")
    sidecar.get("/v1/operations/op-1")
    sidecar.http.get("/no/such/route")
    samples = scrape(sidecar)
    routes = {dict(labels)["route"] for (name, labels) in samples
              if name == "reconciler_http_requests_total"}
    assert "/v1/operations/{operation_id:readable_id}" in routes
    assert not any("op-1" in route for route in routes)
    key = ("reconciler_http_requests_total", (("method", "GET"), ("route", "<unmatched>"),
                                              ("status", "404")))
    assert samples[key] >= 1
    assert samples[("reconciler_http_request_duration_seconds_count",
                    (("method", "POST"), ("route", "/v1/operations")))] >= 1


def test_agent_runs_count_their_turns_and_tool_calls(tmp_path: Path) -> None:
    async def lookup(tool_call: ToolCall) -> ToolOutput:
        return ToolOutput("found")

    tool = Tool(ToolSpec("lookup", "look up", {"type": "object"}), Effect.READ_ONLY, lookup)
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    store.put_contract(ProviderContract("chat"))
    agent = Agent(ScriptedModel([call(tool_use("lookup", {})), say("done")]), [tool], {})
    app = create_app(Settings(sweep_interval_s=0), ledger=Ledger(store), agent=agent)
    with serving(app) as url, httpx.Client(base_url=url, timeout=PATIENCE_S) as http:
        def counts() -> tuple[float, float]:
            text = http.get("/metrics").text
            found = {s.name: s.value for f in text_string_to_metric_families(text)
                     for s in f.samples}
            return found["reconciler_run_turns_total"], found[
                "reconciler_run_tool_calls_total"]
        turns, tools = counts()
        assert http.post("/v1/runs", json={"input": "go"}).json()["state"] == "completed"
        after = counts()
    assert after == (turns + 2, tools + 1)


def dashboard_metrics() -> set[str]:
    panels = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    exprs = [t["expr"] for p in panels for t in p.get("targets", [])]
    assert exprs, "the dashboard has queries"
    return {name for expr in exprs for name in re.findall(r"\breconciler_[a-z_]+", expr)}


def test_every_dashboard_query_names_an_exported_metric(sidecar: Sidecar) -> None:
    # Exercise what only shows once used: labelled series appear with their first value.
    sidecar.probes["pay"] = [zero_probe()]
    sidecar.intent("op-1")
    sidecar.attempt("op-1")
    sidecar.post("/v1/operations/op-1/reconcile", None, 200)
    sidecar.retry("op-1")
    exported = {name for name, _ in scrape(sidecar)}
    missing = sorted(dashboard_metrics() - exported)
    assert not missing, f"dashboard queries name metrics /metrics does not export: {missing}"
    assert {"reconciler_waiting_on_human", "reconciler_http_requests_total",
            "reconciler_runs"} <= dashboard_metrics()
