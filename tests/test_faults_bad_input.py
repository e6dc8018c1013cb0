"""Bad input never crashes anything and never gets a 5xx: NDJSON lines whose values sit at the
edges of what can be computed with, times anywhere in RFC 3339's range, every operation of the
HTTP API fuzzed against an operation with a history, and requests that are not HTTP at all.

(test_replay.py fuzzes the shapes of NDJSON lines, test_service_schema.py the API's conformance
to its OpenAPI document; these push the values and the wire instead.) `--fault-scale N` runs N
times the examples.
"""

from __future__ import annotations

import json
import socket
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.schemas import APIOperation
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.cli.replay import replay
from reconciler.service import Settings, create_app

from fault_harness import HASH, PATIENCE_S, intent_body, scaled
from sidecar_client import Sidecar, assert_problem, running_sidecar

# Input must never reach the catch-all 500 (the fixture is in conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_internal_errors")]

FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck))


def rfc3339(at: datetime, offset_min: int) -> str:
    sign = "-" if offset_min < 0 else "+"
    hours, minutes = divmod(abs(offset_min), 60)
    return f"{at.isoformat(timespec='microseconds')}{sign}{hours:02}:{minutes:02}"


YEAR_ONE_EAST = "0001-01-01T00:00:00+01:00"  # valid RFC 3339, before year 1 in UTC
#: Any RFC 3339 time (years 1 to 9999, any offset up to a day), today's, and the edges, which
#: are drawn often: a plain draw over the whole range would rarely land on them.
times = st.just("2026-01-01T00:00:00Z") | st.builds(
    rfc3339, st.datetimes(min_value=datetime(1, 1, 1),
                          max_value=datetime(9999, 12, 31, 23, 59, 59)),
    st.integers(-1439, 1439)) | st.sampled_from(
    [YEAR_ONE_EAST, "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "9999-12-31T23:59:59-01:00"])

# --- NDJSON ----------------------------------------------------------------------------------

counts = st.sampled_from([2 ** 63 - 1, 2 ** 63, -(2 ** 63) - 1, 10 ** 30]) | st.integers(1, 5)
durations = st.sampled_from([1e300, float("inf"), 2 ** 63, 1e12]) | st.floats(0, 1e6)
provider_lines = st.fixed_dictionaries({"type": st.just("provider"), "name": st.just("p")},
                                       optional={"visibility_lag_s": durations,
                                                 "reconcile_deadline_s": durations,
                                                 "key_retention_s": durations,
                                                 "max_attempts": counts})
intent_lines = st.fixed_dictionaries({
    "type": st.just("intent"), "operation_id": st.just("op"), "request_hash": st.just("h"),
    "provider": st.just("p"), "action": st.just("a"),
    "effect": st.sampled_from(["read_only", "idempotent_write", "non_idempotent"]),
    "at": times})
later_lines = st.one_of(
    st.fixed_dictionaries({
        "type": st.just("attempt"), "operation_id": st.just("op"), "attempt": counts,
        "request_hash": st.just("h"), "at": times,
        "outcome": st.sampled_from(["timeout", "response", "not_sent"])},
        optional={"status": st.integers(100, 599) | counts}),
    st.fixed_dictionaries({
        "type": st.just("probe"), "operation_id": st.just("op"), "at": times,
        "probe": st.just("q"),
        "authority": st.sampled_from(["authoritative", "lagging", "weak", "unavailable"]),
        "matches": st.lists(st.fixed_dictionaries({"provider_ref": st.just("r")}), max_size=1)}),
    st.fixed_dictionaries({"type": st.just("receipt"), "operation_id": st.just("op"),
                           "at": times, "provider_ref": st.just("r")}),
    st.fixed_dictionaries({"type": st.just("expect"), "operation_id": st.just("op"),
                           "verdict": st.just("indeterminate")}, optional={"at": times}),
    intent_lines,
)
#: Provider lines, then an intent (so that the lines after it reach the ledger and the engine).
files = st.tuples(st.lists(provider_lines, max_size=2), intent_lines,
                  st.lists(later_lines, max_size=6)).map(
    lambda parts: [json.dumps(line) for line in [*parts[0], parts[1], *parts[2]]])


def intent_at(at: str) -> str:
    return json.dumps({"type": "intent", "operation_id": "op", "request_hash": "h",
                       "provider": "p", "action": "a", "effect": "read_only", "at": at})


def test_ndjson_values_at_any_edge_are_line_errors_never_crashes(
        pytestconfig: pytest.Config) -> None:
    @settings(FUZZ, max_examples=scaled(pytestconfig, 200))
    @given(files)
    @example([intent_at(YEAR_ONE_EAST)])
    @example([intent_at("2026-01-01T00:00:00Z"), json.dumps(
        {"type": "attempt", "operation_id": "op", "attempt": 2 ** 63, "request_hash": "h",
         "at": "2026-01-01T00:00:01Z", "outcome": "timeout"})])
    @example(['{"type": "provider", "name": "p", "visibility_lag_s": 1e300}',
              intent_at("2026-01-01T00:00:00Z"), json.dumps(
                  {"type": "attempt", "operation_id": "op", "attempt": 1, "request_hash": "h",
                   "at": "2026-01-01T00:00:01Z", "outcome": "timeout"})])
    def replayed(content: list[str]) -> None:
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "fuzz.ndjson"
            path.write_text("\n".join(content), encoding="utf-8")
            report = replay([path])  # raises nothing: every problem is in the report
        for error in report.errors:
            assert 1 <= error.line <= len(content)
            assert str(error).startswith(f"{path}:{error.line}: ")

    replayed()


def test_an_out_of_range_time_exits_2_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "case.ndjson"
    path.write_text(intent_at(YEAR_ONE_EAST) + "\n")
    result = CliRunner().invoke(app, ["replay", "--check", str(path)])
    assert result.exit_code == 2
    assert f"{path}:1: a time or number out of range" in result.stderr
    assert "Traceback" not in result.output + result.stderr


# --- the HTTP API ----------------------------------------------------------------------------

#: The operation generated data starts from: it exists, so requests get past the 404.
KNOWN_ID = "0"


@pytest.fixture(scope="module")
def busy_sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    """One sidecar for the module, whose known operation has a history: an intent, a timed-out
    attempt, an authoritative zero, and a retry granted to someone else, who holds the lease."""
    db = tmp_path_factory.mktemp("bad-input") / "reconciler.db"
    with running_sidecar(f"sqlite:///{db}") as running:
        running.post("/v1/operations", intent_body(KNOWN_ID))
        running.post(f"/v1/operations/{KNOWN_ID}/attempts", {
            "attempt": 1, "idempotency_key": KNOWN_ID, "request_hash": HASH,
            "outcome": "timeout"})
        running.zero(KNOWN_ID)
        granted = running.post(f"/v1/operations/{KNOWN_ID}/retry", {
            "idempotency_key": KNOWN_ID, "request_hash": HASH, "holder": "someone"}, 200)
        assert granted["allowed"]
        yield running


def test_a_time_before_year_one_in_utc_is_a_validation_problem(busy_sidecar: Sidecar) -> None:
    response = busy_sidecar.http.post(f"/v1/operations/{KNOWN_ID}/evidence", json={
        "kind": "receipt", "provider_ref": "r", "at": YEAR_ONE_EAST})
    problem = assert_problem(response, 422, "validation")
    assert problem["errors"][0]["loc"] == ["body", "at"]


TIMED_BODIES: dict[str, dict[str, Any]] = {
    "attempts": {"attempt": 2, "idempotency_key": KNOWN_ID, "request_hash": HASH,
                 "outcome": "timeout"},
    "evidence": {"kind": "observation", "probe": "p", "authority": "authoritative"},
}


@pytest.mark.parametrize("route", sorted(TIMED_BODIES))
def test_any_rfc3339_time_gets_an_answer_below_500(busy_sidecar: Sidecar, route: str,
                                                    pytestconfig: pytest.Config) -> None:
    @settings(FUZZ, max_examples=scaled(pytestconfig, 30))
    @given(times)
    def post(at: str) -> None:
        response = busy_sidecar.http.post(f"/v1/operations/{KNOWN_ID}/{route}",
                                     json={**TIMED_BODIES[route], "at": at})
        assert response.status_code < 500, response.text

    post()


# The document is the app's own; the calls go over HTTP to the live sidecar.
schema = schemathesis.openapi.from_dict(
    create_app(Settings(db="sqlite://", sweep_interval_s=0)).openapi())
Operation = APIOperation[Any, Any, Any, Any]
OPERATIONS: list[Operation] = [result.ok() for result in schema.get_all_operations()
                               if isinstance(result, Ok)]


@pytest.mark.parametrize("operation", OPERATIONS, ids=[o.label for o in OPERATIONS])
def test_generated_requests_never_get_a_5xx(busy_sidecar: Sidecar, operation: Operation,
                                            pytestconfig: pytest.Config) -> None:
    @settings(FUZZ, max_examples=scaled(pytestconfig, 10))
    @given(operation.as_strategy())
    def call(case: schemathesis.Case[Any]) -> None:
        response = case.call(base_url=busy_sidecar.url, timeout=10)
        case.validate_response(response, checks=[not_a_server_error])

    call()


NOT_HTTP = {
    "binary": b"\x00\xff\xfe\r\n\r\n",
    "negative_length": b"POST /v1/operations HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    "bad_chunking": b"POST /v1/operations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                    b"\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n{}\r\n0\r\n\r\n",
    "nul_in_header": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
    "huge_header": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 200_000 + b"\r\n\r\n",
    "short_body": b"POST /v1/operations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: 100\r\n\r\n{}",
    "http_0_9": b"GET /v1/operations\r\n\r\n",
}


@pytest.mark.parametrize("name", sorted(NOT_HTTP))
def test_a_request_that_is_not_http_gets_no_5xx_and_the_sidecar_serves_on(
        busy_sidecar: Sidecar, name: str) -> None:
    host, port = httpx.URL(busy_sidecar.url).host, httpx.URL(busy_sidecar.url).port
    with socket.create_connection((host, port or 80), timeout=PATIENCE_S) as conn:
        conn.sendall(NOT_HTTP[name])
        conn.shutdown(socket.SHUT_WR)  # the whole request is sent; the rest never comes
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    status = answer.split(b" ", 2)[1] if answer.startswith(b"HTTP/") else b"none"
    assert not status.startswith(b"5"), answer[:200]
    assert busy_sidecar.http.get("/healthz").status_code == 200
