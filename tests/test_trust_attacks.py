"""Issue 33's attacks on the JSON API, replayed over real HTTP on SQLite and PostgreSQL, each with
the safe answer: a problem (RFC 9457) that says what to do, never a 500, and nothing recorded
that was not answered as recorded.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from threading import Barrier
from urllib.parse import quote

import httpx
import pytest
from test_trust_bounded_inputs import runs_sidecar

from reconciler.ledger import Ledger
from reconciler.service import Settings, create_app
from reconciler.store.schema import make_engine, open_store
from reconciler.store.sql import SqlStore

from service_harness import serving
from sidecar_client import H, Sidecar, assert_problem

pytestmark = pytest.mark.usefixtures("no_internal_errors")

#: Intents and attempts posted at the same moment, pairwise: enough that on both stores some
#: attempts reach the insert before their intent commits (the issue measured over half).
RACES = 40


def _intent_body(op: str) -> dict[str, object]:
    return {"operation_id": op, "request_hash": H, "idempotency_key": f"key-{op}",
            "provider": "pay", "action": "charge", "effect": "non_idempotent"}


def _attempt_body(op: str) -> dict[str, object]:
    return {"attempt": 1, "idempotency_key": f"key-{op}", "request_hash": H,
            "outcome": "timeout"}


def test_an_attempt_racing_its_intent_is_404_or_recorded(sidecar: Sidecar) -> None:
    def race(n: int) -> tuple[httpx.Response, httpx.Response]:
        op = f"race-{n}"
        start = Barrier(2, timeout=30)

        def intent() -> httpx.Response:
            start.wait()
            return sidecar.http.post("/v1/operations", json=_intent_body(op))

        def attempt() -> httpx.Response:
            start.wait()
            return sidecar.http.post(f"/v1/operations/{op}/attempts", json=_attempt_body(op))

        with ThreadPoolExecutor(2) as pair:
            made, tried = pair.submit(intent), pair.submit(attempt)
            return made.result(timeout=60), tried.result(timeout=60)

    answers = [race(n) for n in range(RACES)]
    for n, (made, tried) in enumerate(answers):
        assert made.status_code == 201, made.text
        recorded = sidecar.get(f"/v1/operations/race-{n}")["attempts"]
        if tried.status_code == 201:
            assert len(recorded) == 1
        else:
            # Refused as an attempt for an operation not yet recorded: nothing of it kept.
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
