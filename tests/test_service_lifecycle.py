"""The sidecar's lifecycle, on SQLite and on PostgreSQL: a graceful shutdown in a thread, and
the served process with its config file, stopped by SIGTERM.

Each test gets a fresh store (a new SQLite file, or a new PostgreSQL schema) and its own server
on an ephemeral loopback port.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import httpx
import pytest

from reconciler.store.schema import open_store
from reconciler.testing.patience import PATIENCE_S

from service_harness import serving_process
from sidecar_client import TOKEN, Sidecar, running_sidecar, zero_probe

# Input must never reach the catch-all 500 (the fixture is in conftest.py).
pytestmark = pytest.mark.usefixtures("no_internal_errors")


def test_shutdown_finishes_requests_in_flight(store_url: str) -> None:
    answers: list[int] = []
    probe = zero_probe(delay_s=0.5)
    with running_sidecar(store_url) as sidecar:
        sidecar.probes["pay"] = [probe]
        sidecar.intent("op-1")
        sidecar.attempt("op-1")
        slow = threading.Thread(target=lambda: answers.append(
            httpx.post(sidecar.url + "/v1/operations/op-1/reconcile", timeout=30).status_code))
        slow.start()
        # Shut down only once the reconcile is waiting on its probe: a fixed sleep here was
        # sometimes over before a loaded machine had even sent the request.
        assert probe.wait_for_call(30)
    slow.join(30)
    assert answers == [200]


def test_served_process_applies_its_config_and_stops_on_sigterm(store_url: str,
                                                               tmp_path: Path) -> None:
    config = tmp_path / "reconciler.toml"
    config.write_text('[service]\nsweep_interval_s = 0\ntoken_env = "SIDECAR_TOKEN"\n\n'
                      '[providers.pay]\nidempotency_keys = true\nvisibility_lag_s = 0\n'
                      'inflight_s = 0\n')
    env = {"RECONCILER_DB": store_url, "RECONCILER_CONFIG": str(config), "SIDECAR_TOKEN": TOKEN}
    with serving_process(env, cwd=tmp_path) as service, httpx.Client(
            base_url=service.url, headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=PATIENCE_S) as http:
        client = Sidecar(service.url, http, open_store(store_url))
        try:
            # Retries are allowed only because the file says the provider has idempotency keys.
            assert client.not_applied("op-1")["retry_allowed"] is True
        finally:
            client.store.engine.dispose()
        # uvicorn re-raises the signal once it has shut down, so the status says SIGTERM.
        assert service.stop() == -signal.SIGTERM
    output = "".join(service.output)
    assert "Application shutdown complete" in output
    assert "***set***" in output and TOKEN not in output
