"""Issue 33's attacks, replayed over real HTTP on SQLite and PostgreSQL, each with the safe
answer: a problem (RFC 9457) or a console page that says what to do, never a 500, and nothing
recorded that was not answered as recorded.

Here: an attempt or evidence racing its intent (404); NUL bytes in every query and path
parameter; /readyz while the store refuses writes; the access log's fields and query strings;
SQL parameters in tracebacks; --host beyond loopback without allowed_hosts, and a Host not
allowed; another worker reading a run's input; the console's first-send approval and
rejection (no "Not recorded", no "sent again"); a duplicate offered a retry and cleared by
erasing it; an old session of a removed credential after a restart.

Elsewhere, each on both stores or independent of the store: the console's inputs past the API's
limits (tests/test_console_inputs.py), its forms and queries fuzzed (test_console_fuzz.py),
`ops approve` / `ops reject` / `ops compensate` (test_ops_cli.py, test_console_compensation.py),
the health check against a token-protected sidecar (test_service_health_check.py), the
"no probe can see this action" hint (test_console_sight.py), the errors a user meets: a
mysql:// URL, enum reprs, the mcp extra, check-config (test_trust_messages.py), the approval
409's title (test_service_runs.py).
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from threading import Barrier
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError
from test_console_sessions import ALICE, BOB_CRED, after_restart, alice, session_of
from test_console_sessions import sidecar as session_sidecar
from test_trust_bounded_inputs import runs_sidecar

from reconciler.core.domain import Attempt, Compensation, Outcome, Resolution
from reconciler.core.runs.events import EventKind
from reconciler.infra.logs import JsonFormatter, TextFormatter
from reconciler.ledger import Ledger
from reconciler.runtime.agent import Agent
from reconciler.runtime.scripted import ScriptedModel, say
from reconciler.service import Settings, create_app
from reconciler.service.credentials import credential, new_token
from reconciler.service.ui.access import KEY_ENV
from reconciler.store import rows
from reconciler.store.attempts import INSERT_ATTEMPT
from reconciler.store.journal import SqlJournal
from reconciler.store.schema import make_engine, open_store
from reconciler.store.sql import SqlStore

from builders import OP, intent
from console_harness import console_sidecar, signed_in
from service_harness import serving, serving_process
from sidecar_client import TOKEN, H, Sidecar, assert_problem, post_as_a_client, running_sidecar

pytestmark = pytest.mark.usefixtures("no_internal_errors")

#: Intents and attempts posted at the same moment, pairwise: enough that on both stores some
#: attempts reach the insert before their intent commits (the issue measured over half).
RACES = 40


def _intent_body(op: str) -> dict[str, object]:
    return {"operation_id": op, "request_hash": H, "idempotency_key": f"key-{op}",
            "provider": "pay", "action": "charge", "effect": "non_idempotent"}


ZERO: dict[str, object] = {"kind": "observation", "probe": "lookup", "authority": "authoritative"}


def _attempt_body(op: str) -> dict[str, object]:
    return {"attempt": 1, "idempotency_key": f"key-{op}", "request_hash": H,
            "outcome": "timeout"}


def _race(sidecar: Sidecar, op: str, path: str, body: dict[str, object]
          ) -> tuple[httpx.Response, httpx.Response]:
    """The intent of `op` and a POST to its `path`, sent at the same moment."""
    start = Barrier(2, timeout=30)

    def post(url: str, json: dict[str, object]) -> httpx.Response:
        start.wait()
        # A 503 overloaded read nothing of the request: sent again, as the clients do.
        return post_as_a_client(sidecar.http, url, json)

    with ThreadPoolExecutor(2) as pair:
        made = pair.submit(post, "/v1/operations", _intent_body(op))
        tried = pair.submit(post, f"/v1/operations/{op}/{path}", body)
        return made.result(timeout=60), tried.result(timeout=60)


@pytest.mark.parametrize(("path", "listed"), [("attempts", "attempts"),
                                              ("evidence", "evidence")])
def test_a_fact_racing_its_intent_is_404_or_recorded(sidecar: Sidecar, path: str,
                                                     listed: str) -> None:
    for n in range(RACES):
        op = f"race-{n}"
        made, tried = _race(sidecar, op, path, _attempt_body(op) if path == "attempts" else ZERO)
        assert made.status_code == 201, made.text
        recorded = sidecar.get(f"/v1/operations/{op}")[listed]
        if tried.status_code == 201:
            assert len(recorded) == 1
        else:
            # Refused as a fact about an operation not yet recorded: nothing of it kept.
            assert_problem(tried, 404, "unknown-operation")
            assert recorded == []


#: Every query and path parameter of the JSON API a NUL can ride in (the issue's 500s on
#: PostgreSQL: `provider`, `after`, `id`, `state`), each request otherwise valid.
#: (method, path, query parameters, JSON body)
NulRequest = tuple[str, str, dict[str, str], object]
OPERATION_NULS: list[NulRequest] = [
    ("GET", "/v1/operations", {"provider": "pa\x00y"}, None),
    ("GET", "/v1/operations", {"after": "op\x00"}, None),
    ("GET", "/v1/operations", {"verdict": "verified\x00"}, None),
    ("GET", "/v1/operations/op%00", {}, None),
    ("POST", "/v1/operations/op%00/attempts", {}, _attempt_body("op")),
    ("POST", "/v1/operations/op%00/evidence", {},
     {"kind": "observation", "probe": "lookup", "authority": "authoritative"}),
    ("POST", "/v1/operations/op%00/retry", {}, {"idempotency_key": "key-op", "request_hash": H}),
    ("POST", "/v1/operations/op%00/reconcile", {}, None),
]
RUN_NULS: list[NulRequest] = [
    ("GET", "/v1/runs", {"state": "run\x00ning"}, None),
    ("GET", "/v1/runs", {"after": "run\x00"}, None),
    ("GET", "/v1/runs", {"correlation_id": "c\x00"}, None),
    ("GET", "/v1/runs/run%00", {}, None),
    ("GET", "/v1/runs/run%00/events", {}, None),
    ("POST", "/v1/runs/run%00/cancel", {}, None),
    ("POST", "/v1/runs/run%00/resume", {}, {}),
]


def _assert_refused(response: httpx.Response) -> None:
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize(("method", "path", "params", "body"), OPERATION_NULS)
def test_a_nul_in_an_operation_parameter_is_a_4xx(
        sidecar: Sidecar, method: str, path: str, params: dict[str, str], body: object) -> None:
    sidecar.intent("op")
    _assert_refused(sidecar.http.request(method, path, params=params, json=body))


@pytest.mark.parametrize(("method", "path", "params", "body"), RUN_NULS)
def test_a_nul_in_a_run_parameter_is_a_4xx(
        store_url: str, method: str, path: str, params: dict[str, str], body: object) -> None:
    with runs_sidecar(store_url) as http:
        _assert_refused(http.request(method, path, params=params, json=body))


def _read_only(url: str) -> str:
    """The same store, opened so that every write is refused (as on a full disk: reads answer,
    nothing commits)."""
    if url.startswith("sqlite:///"):
        return f"sqlite:///file:{url.removeprefix('sqlite:///')}?mode=ro&uri=true"
    return url.replace("options=", "options=" + quote("-cdefault_transaction_read_only=on "), 1)


def test_readyz_fails_while_the_store_refuses_writes(store_url: str) -> None:
    open_store(store_url).engine.dispose()  # created and migrated
    store = SqlStore(make_engine(_read_only(store_url)))
    app = create_app(Settings(db=store_url, sweep_interval_s=0), ledger=Ledger(store))
    try:
        with serving(app) as url, httpx.Client(base_url=url, timeout=30) as http:
            assert http.get("/v1/operations").status_code == 200  # reads answer
            refused = http.post("/v1/operations", json=_intent_body("op"))
            assert_problem(refused, 503, "store-unavailable")  # nothing recorded: try again
            problem = assert_problem(http.get("/readyz"), 503, "store-unavailable")
            assert "refuses writes" in problem["detail"]
    finally:
        store.engine.dispose()


def test_readyz_answers_ready_on_a_store_that_writes(sidecar: Sidecar) -> None:
    assert sidecar.get("/readyz") == {"status": "ready"}


def _json_log_of(store_url: str, requests: Callable[[httpx.Client], None]) -> list[Any]:
    """The JSON lines a real `serve` on `store_url` logs while `requests` are made."""
    env = {"RECONCILER_DB": store_url, "RECONCILER_LOG_FORMAT": "json",
           "RECONCILER_SWEEP_INTERVAL_S": "0"}
    with serving_process(env) as service, httpx.Client(base_url=service.url,
                                                       timeout=30) as http:
        requests(http)
        service.stop()
    return [json.loads(line) for line in service.output if line.startswith("{")]


def test_the_access_log_has_the_requests_fields_and_no_secret_from_the_query(
        store_url: str) -> None:
    answers: list[httpx.Response] = []

    def requests(http: httpx.Client) -> None:
        answers.append(http.get("/v1/operations", params={"verdict": "indeterminate",
                                                          "token": "abc-secret"},
                                headers={"X-Request-Id": "req-42"}))
        answers.append(http.get("/healthz", headers={"X-Request-Id": "not sane\x7f"}))

    lines = [r for r in _json_log_of(store_url, requests) if r["logger"] == "reconciler.access"]
    listed, health = answers
    assert listed.headers["X-Request-Id"] == "req-42"  # a sane incoming id is kept
    assert health.headers["X-Request-Id"] not in ("", "not sane\x7f")  # another is replaced
    # A query with a parameter the API does not take is refused (422): logged all the same.
    assert [(r["method"], r["path"], r["status"], r["request_id"]) for r in lines] == [
        ("GET", "/v1/operations", 422, "req-42"),
        ("GET", "/healthz", 200, health.headers["X-Request-Id"])]
    assert lines[0]["query"] == "verdict=indeterminate&token=***"
    assert all(isinstance(r["duration_ms"], float) for r in lines)
    assert not any("abc-secret" in json.dumps(r) for r in lines)


def _orphan_attempt(engine: sqlalchemy.Engine) -> IntegrityError:
    """The error a store raises for an attempt without its intent, secret key and all."""
    try:
        with engine.begin() as conn:
            conn.execute(INSERT_ATTEMPT, rows.attempt_values(Attempt(
                "op-orphan", 1, "key-SECRET-4711", H, datetime.now(UTC), Outcome.TIMEOUT)))
    except IntegrityError as exc:
        return exc
    raise AssertionError("the insert was not refused")


def test_no_log_line_carries_sql_parameters(store_url: str) -> None:
    open_store(store_url).engine.dispose()
    stores = make_engine(store_url)
    # An engine made elsewhere (an embedding application's) shows the parameters: the log
    # cuts them all the same.
    foreign = sqlalchemy.create_engine(store_url)
    if store_url.startswith("sqlite"):
        event.listen(foreign, "connect",
                     lambda conn, _: conn.execute("PRAGMA foreign_keys=ON"))
    try:
        hidden, shown = _orphan_attempt(stores), _orphan_attempt(foreign)
    finally:
        stores.dispose()
        foreign.dispose()
    assert "key-SECRET-4711" not in str(hidden)
    assert "key-SECRET-4711" in str(shown)  # what the log must cut
    for formatter in (JsonFormatter(), TextFormatter()):
        for error in (hidden, shown):
            try:
                raise RuntimeError("unexpected") from error
            except RuntimeError:
                record = logging.LogRecord("reconciler.service.problems", logging.ERROR, "", 0,
                                           "unexpected error: %s", (error,), sys.exc_info())
            line = formatter.format(record)
            assert "key-SECRET-4711" not in line
            assert "INSERT INTO attempts" in line  # the statement stays, without values


def test_serving_beyond_loopback_without_allowed_hosts_is_refused_at_start(
        tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "reconciler", "serve", "--host", "0.0.0.0", "--port", "0",
         "--behind-tls-proxy", "--db", f"sqlite:///{tmp_path / 'r.db'}"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "RECONCILER_TOKEN": TOKEN})
    assert result.returncode == 2
    assert "needs allowed_hosts" in result.stderr
    assert "serving on" not in result.stdout


def test_a_host_not_allowed_is_refused_on_a_wildcard_bind(store_url: str) -> None:
    with running_sidecar(store_url, host="0.0.0.0", token=TOKEN, behind_tls_proxy=True,
                         allowed_hosts=("sidecar.internal",)) as sidecar:
        rebound = sidecar.http.get("/v1/operations", headers={"Host": "attacker.example"})
        assert_problem(rebound, 421, "unknown-host")
        assert sidecar.http.get("/v1/operations",
                                headers={"Host": "sidecar.internal:8765"}).status_code == 200


RUN_TOKENS = {name: new_token() for name in ("worker-a", "worker-b", "ops-alice")}
RUN_CREDENTIALS = (credential("worker-a", ["worker"], RUN_TOKENS["worker-a"], "test"),
                   credential("worker-b", ["worker"], RUN_TOKENS["worker-b"], "test"),
                   credential("ops-alice", ["operator"], RUN_TOKENS["ops-alice"], "test"))


def test_a_runs_input_is_read_only_by_its_creator_and_operators(store_url: str) -> None:
    store = open_store(store_url)
    agent = Agent(ScriptedModel([say("done")]), [], {"max_tokens": 10_000})
    app = create_app(Settings(db=store_url, sweep_interval_s=0, credentials=RUN_CREDENTIALS),
                     ledger=Ledger(store), agent=agent)

    def as_(name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {RUN_TOKENS[name]}"}

    try:
        with serving(app) as url, httpx.Client(base_url=url, timeout=30) as http:
            created = http.post("/v1/runs", json={"input": "refund order 4711 to card 4242"},
                                headers=as_("worker-a"))
            assert created.status_code == 201, created.text
            run = f"/v1/runs/{created.json()['run_id']}"
            for reader in ("worker-a", "ops-alice"):
                read = http.get(run, headers=as_(reader))
                assert read.status_code == 200 and "card 4242" in read.text
            other = as_("worker-b")
            for response in (http.get(run, headers=other),
                             http.get(f"{run}/events", headers=other),
                             http.post(f"{run}/continue", headers=other,
                                       json={"type": "task_continue_response",
                                             "continue_request_id": "creq_x"})):
                # As if there were no such run: another caller's run ids are not theirs.
                assert_problem(response, 404, "unknown-run")
                assert "4242" not in response.text
    finally:
        store.engine.dispose()


# -- the console, on both stores (the browser tests drive the same pages on SQLite) ---------


def _offered(page: httpx.Response) -> list[str]:
    """The decisions a console page's decide form offers."""
    assert page.status_code == 200, page.text
    return re.findall(r'type="radio" name="action" value="([^"]+)"', page.text)


def _what_next(confirmation: httpx.Response) -> str:
    found = re.search(r'<p id="what-next">(.*?)</p>', confirmation.text, re.S)
    assert confirmation.status_code == 200 and found, confirmation.text[:500]
    return html.unescape(found.group(1))


def _decided(store: SqlStore, run_id: str) -> list[tuple[object, object]]:
    return [(e.data["decision"], e.data["actor"]) for e in SqlJournal(store).events(run_id)
            if e.kind is EventKind.APPROVAL_DECIDED]


@pytest.mark.parametrize(("run_id", "decision", "sent"), [("r2", "approve", ["ch_r2"]),
                                                         ("r3", "reject", [])])
def test_a_first_send_is_approved_or_rejected_in_the_console_and_sent_at_most_once(
        store_url: str, tmp_path: Path, run_id: str, decision: str, sent: list[str]) -> None:
    """Was: 3 of the 4 choices ended in "Not recorded", and the confirmation said the call
    would be sent again when it had never been sent."""
    with console_sidecar(tmp_path, first_sends=(run_id,), db=store_url) as console, \
            signed_in(console.url) as (http, csrf):
        queued = http.get("/ui/queue").text
        assert "waiting for approval before its first send" in queued
        assert f'href="/ui/run?id={run_id}"' in queued
        page = http.get("/ui/run", params={"id": run_id})
        assert _offered(page) == ["approve", "reject"]
        token = re.search(r'name="resume_token" value="([^"]+)"', page.text)
        assert token
        form = {"csrf": csrf, "id": run_id, "resume_token": token.group(1), "note": "checked"}
        for decision_of_a_sent_call in ("applied", "not_applied", "approve_retry"):
            refused = http.post("/ui/run/confirm",
                                data={**form, "action": decision_of_a_sent_call})
            assert refused.status_code == 422 and "choose one of: approve, reject" in refused.text
        what_next = _what_next(http.post("/ui/run/decide", data={**form, "action": decision}))
        assert "again" not in what_next
        assert ("sent for the first time" if decision == "approve" else "not run") in what_next
        confirmed = http.post("/ui/run/confirm", data={**form, "action": decision})
        assert confirmed.status_code == 303, confirmed.text
        assert console.refund.sent == sent
        assert _decided(console.store, run_id) == [(decision, "admin")]
        # The queue's link to the run (a bare "r3" can stand inside the page's CSRF token).
        assert f'href="/ui/run?id={run_id}"' not in http.get("/ui/queue").text


def test_a_duplicate_offers_no_retry_and_its_compensation_keeps_both_effects(
        store_url: str, tmp_path: Path) -> None:
    """Was: "Approve a retry" offered for a duplicate, and clearing it meant resolving it
    verified_applied, which erased that two effects happened."""
    with console_sidecar(tmp_path, duplicates=("dup",), db=store_url) as console, \
            signed_in(console.url) as (http, csrf):
        page = http.get("/ui/operation", params={"id": "dup"})
        assert _offered(page) == ["compensate"]
        assert re.search(r"<code>dup_1</code> <strong class=\"received\">", page.text)
        assert not re.search(r"<code>dup_2</code> <strong", page.text)
        form = {"csrf": csrf, "id": "dup", "note": "refunded the second charge"}
        for not_for_a_duplicate in ("approve_retry", "resolve_applied", "resolve_not_applied"):
            refused = http.post("/ui/operation/confirm",
                                data={**form, "action": not_for_a_duplicate})
            assert refused.status_code == 422 and "choose one of: compensate" in refused.text
        confirmed = http.post("/ui/operation/confirm", data={
            **form, "action": "compensate", "reference": "re_dup_2"})
        assert confirmed.status_code == 303, confirmed.text
        now = console.api.get("/v1/operations/dup").json()
        assert (now["verdict"], now["next_action"]) == ("duplicate_effect", "compensated")
        assert "dup" not in {s.operation_id for s in console.store.list_operations(
            attention=True)}
        assert [(c.actor, c.reference) for c in console.store.facts("dup").of(Compensation)
                ] == [("admin", "re_dup_2")]


def test_an_old_session_of_a_removed_credential_opens_nothing_after_a_restart(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: after a restart without ops-alice but with the same console key, her cookie still
    opened the queue and recorded a resolution in her name."""
    monkeypatch.setenv(KEY_ENV, "the-same-console-key-" + "k" * 20)
    store = open_store(store_url)
    store.record_intent(intent())
    try:
        with session_sidecar(store, alice(), BOB_CRED) as url:
            cookie, csrf = session_of(url, ALICE)
        with session_sidecar(store, BOB_CRED) as url:
            assert after_restart(url, cookie, csrf) == (303, 403)
        assert not store.facts(OP).of(Resolution)
    finally:
        store.engine.dispose()
