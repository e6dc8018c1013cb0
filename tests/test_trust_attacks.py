"""Issue 33's attacks on the JSON API, replayed over real HTTP on SQLite and PostgreSQL, each with
the safe answer: a problem (RFC 9457) that says what to do, never a 500, and nothing recorded
that was not answered as recorded.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import httpx
import pytest

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
