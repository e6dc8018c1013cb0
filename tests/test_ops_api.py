"""The API an operator's tools read (issue 17): GET /v1/runs with filters and cursor paging,
`?escalated=true` meaning "a human must act" with the reason in each item, the OpenAPI's
bearer scheme, and /docs served from files on this machine or not at all."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from reconciler.core.runs.events import EventKind
from reconciler.service import Settings, create_app
from reconciler.service.settings import SettingsError, load_settings
from reconciler.store.journal import SqlJournal

from service_harness import serving
from sidecar_client import TOKEN, Sidecar, assert_problem, running_sidecar

pytestmark = pytest.mark.usefixtures("no_internal_errors")

AT = datetime(2026, 3, 1, tzinfo=UTC)


def runs_of(sidecar: Sidecar) -> None:
    """r1 queued (ticket-1), r2 awaiting approval (ticket-1), r3 queued with a false success."""
    journal = SqlJournal(sidecar.store)
    journal.create("r1", {"input": "a", "correlation_id": "ticket-1"}, AT)
    r2 = journal.create("r2", {"input": "b", "correlation_id": "ticket-1"}, AT)
    r2 = journal.append(r2, EventKind.STARTED, {}, AT)
    journal.append(r2, EventKind.APPROVAL_REQUESTED,
                   {"tool_call_id": "t1", "resume_token": "tok", "payload": {}}, AT)
    journal.create("r3", {"input": "c"}, AT)
    sidecar.post("/v1/operations", {
        "operation_id": "r3:t1", "request_hash": "sha256:" + "a" * 64, "provider": "pay",
        "idempotency_key": "k", "action": "charge", "effect": "non_idempotent",
        "run_id": "r3", "tool_call_id": "t1"})
    sidecar.post("/v1/operations/r3:t1/attempts", {
        "attempt": 1, "idempotency_key": "k", "request_hash": "sha256:" + "a" * 64,
        "outcome": "response", "status": 200})
    assert sidecar.zero("r3:t1")["verdict"] == "false_success"


def run_ids(sidecar: Sidecar, query: str) -> list[str]:
    return [r["run_id"] for r in sidecar.get("/v1/runs?" + query)["items"]]


def test_runs_are_listed_by_state_correlation_and_health(sidecar: Sidecar) -> None:
    runs_of(sidecar)
    assert run_ids(sidecar, "") == ["r1", "r2", "r3"]
    assert run_ids(sidecar, "state=awaiting_approval") == ["r2"]
    assert run_ids(sidecar, "correlation_id=ticket-1") == ["r1", "r2"]
    assert run_ids(sidecar, "unhealthy=true") == ["r3"]
    assert run_ids(sidecar, "unhealthy=false&state=queued") == ["r1"]
    [r3] = sidecar.get("/v1/runs?unhealthy=true")["items"]
    assert (r3["state"], r3["unhealthy"], r3["turn"]) == ("queued", True, 0)


def test_runs_are_paged_by_cursor(sidecar: Sidecar) -> None:
    runs_of(sidecar)
    first = sidecar.get("/v1/runs?limit=2")
    assert [r["run_id"] for r in first["items"]] == ["r1", "r2"]
    assert first["next_cursor"] == "r2"
    rest = sidecar.get("/v1/runs?limit=2&after=r2")
    assert [r["run_id"] for r in rest["items"]] == ["r3"] and rest["next_cursor"] is None


@pytest.mark.parametrize("query", ["state=sleeping", "limit=0", "stat=queued",
                                   "unhealthy=perhaps", "after=r%00", "correlation_id=c%00"])
def test_a_bad_runs_query_is_a_problem(sidecar: Sidecar, query: str) -> None:
    assert_problem(sidecar.http.get("/v1/runs?" + query), 422, "validation")


def test_escalated_lists_what_a_human_must_act_on_with_the_reason(sidecar: Sidecar) -> None:
    # "slow" has a deadline of 0: once dispatched nothing can prove it, so a human decides.
    sidecar.intent("late", "slow")
    sidecar.attempt("late")
    sidecar.intent("open")
    sidecar.attempt("open")
    [late] = sidecar.get("/v1/operations?escalated=true")["items"]
    assert (late["operation_id"], late["next_action"], late["reason"]) == (
        "late", "escalate_to_human", "escalate_to_human")
    [still_open] = sidecar.get("/v1/operations?escalated=false")["items"]
    assert (still_open["operation_id"], still_open["reason"]) == ("open", None)
    sidecar.post("/v1/operations/late/resolution", {
        "verdict": "verified_applied", "actor": "ops", "note": "seen in the dashboard"})
    assert sidecar.get("/v1/operations?escalated=true")["items"] == []


def test_operations_are_filtered_by_provider(sidecar: Sidecar) -> None:
    sidecar.intent("a", "slow")
    sidecar.intent("b")
    ids = [o["operation_id"] for o in sidecar.get("/v1/operations?provider=slow")["items"]]
    assert ids == ["a"]


def test_a_token_protected_openapi_declares_its_bearer_scheme(store_url: str) -> None:
    with running_sidecar(store_url, token=TOKEN) as sidecar:
        schema = sidecar.get("/openapi.json")
    assert schema["components"]["securitySchemes"]["bearer"] == {"type": "http",
                                                                 "scheme": "bearer"}
    runs = schema["paths"]["/v1/runs"]["get"]
    assert runs["security"] == [{"bearer": []}]
    assert "security" not in schema["paths"]["/healthz"]["get"]


def test_docs_are_off_without_local_assets(sidecar: Sidecar) -> None:
    assert sidecar.http.get("/docs").status_code == 404
    assert sidecar.http.get("/redoc").status_code == 404


def test_docs_serve_swagger_ui_from_the_local_directory(tmp_path: Path) -> None:
    assets = tmp_path / "swagger"
    assets.mkdir()
    (assets / "swagger-ui-bundle.js").write_text("window.SwaggerUIBundle = 1;")
    (assets / "swagger-ui.css").write_text("body {}")
    app = create_app(Settings(db=f"sqlite:///{tmp_path / 'r.db'}", sweep_interval_s=0,
                              docs_assets=assets))
    with serving(app) as url:
        page = httpx.get(url + "/docs")
        script = httpx.get(url + "/docs/assets/swagger-ui-bundle.js")
    assert page.status_code == 200
    assert "/docs/assets/swagger-ui-bundle.js" in page.text and "cdn" not in page.text.lower()
    assert script.text == "window.SwaggerUIBundle = 1;"


def test_docs_assets_without_swagger_ui_are_refused_saying_what_lacks(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"lacks swagger-ui-bundle\.js, swagger-ui\.css"):
        load_settings({"docs_assets": str(tmp_path)}, env={})
