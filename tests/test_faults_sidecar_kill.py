"""SIGKILL the sidecar in the middle of a load of intent writes, on SQLite and on PostgreSQL:
after a restart on the same store every acknowledged intent is there, whole, and the database
passes its own integrity checks.

Each test gets a fresh store; `--fault-scale N` kills N times (each kill with its own restart).
"""

from __future__ import annotations

import httpx
import pytest

from fault_harness import (
    WHOLE,
    IntentLoad,
    half_written,
    recorded_ids,
    scaled,
    sqlite_checks,
)
from service_harness import serving_process

pytestmark = pytest.mark.slow

#: Acknowledged writes to wait for before each kill: enough that the load is in full flow.
ACKS_BEFORE_KILL = 20


def test_every_acknowledged_intent_survives_a_sigkill_under_load(
        store_url: str, pytestconfig: pytest.Config) -> None:
    env = {"RECONCILER_DB": store_url, "RECONCILER_SWEEP_INTERVAL_S": "0"}
    acknowledged: list[str] = []
    unanswered: list[str] = []
    for kill in range(scaled(pytestconfig, 1)):
        with serving_process(env) as service, IntentLoad(service.url, prefix=f"k{kill}") as load:
            assert load.await_acks(ACKS_BEFORE_KILL)
            service.process.kill()
            service.process.wait(10)
            # Writers still writing when the process died: the kill came under load.
            assert load.await_answers(None, 1)
            load.stop()
        assert {a.status for a in load.answers} <= {201, None}
        acknowledged += load.acknowledged
        unanswered += [a.operation_id for a in load.answers if a.status is None]

    with serving_process(env) as service, httpx.Client(base_url=service.url,
                                                       timeout=10) as http:
        assert http.get("/readyz").status_code == 200
        lost = [op for op in acknowledged if http.get(f"/v1/operations/{op}").status_code != 200]
    assert lost == []
    # A write cut off by the kill may or may not have committed; either way it is whole.
    assert recorded_ids(store_url) - set(acknowledged) <= set(unanswered)
    assert half_written(store_url) == WHOLE
    if store_url.startswith("sqlite"):
        assert sqlite_checks(store_url) == (["ok"], [])
