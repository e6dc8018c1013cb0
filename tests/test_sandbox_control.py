"""The sandbox's own endpoints (/_sandbox/reset, /_sandbox/config), and running it
(docs/sandbox-api.md).
"""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from reconciler.sandbox import SandboxState, running_sandbox
from reconciler.testing import ManualClock

from sandbox_harness import JSON, PAY, configure, stored, wait_until, write


def test_reset_clears_objects_and_config(client: httpx.Client) -> None:
    configure(client, search_lag_s=5, read_unavailable=True)
    write(client, PAY, key="k-1")

    client.post("/_sandbox/reset").raise_for_status()

    assert stored(client, "pay") == []
    assert client.get("/pay/_sandbox/idempotency_keys/k-1").status_code == 404
    defaults = client.post("/_sandbox/config", json={}).json()
    assert defaults == {
        "check_credentials": True,
        "search_lag_s": 0,
        "cached_list": False,
        "read_unavailable": False,
        "rate_limited_s": 0,
        "hold_s": 30,
        "key_retention_s": 86400,
    }


@pytest.mark.parametrize("fields", [{"search_lag": 1}, {"search_lag_s": -1}, {"hold_s": "x"}])
def test_config_rejects_unknown_fields_and_bad_values(client: httpx.Client, fields: JSON) -> None:
    assert client.post("/_sandbox/config", json=fields).status_code == 422


def test_running_sandbox_serves_on_an_ephemeral_loopback_port_until_exit() -> None:
    with running_sandbox() as running:
        assert running.url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{running.url}/healthz", timeout=5.0).json() == {"ok": True}

    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{running.url}/healthz", timeout=1.0)


def test_stopping_the_server_ends_a_held_lose_response_at_once() -> None:
    state = SandboxState(clock=ManualClock())
    state.configure(hold_s=30)

    def held_write(url: str) -> httpx.Response:
        with httpx.Client(base_url=url, timeout=10.0) as http:
            return write(http, PAY, fault="lose_response")

    with ThreadPoolExecutor(max_workers=1) as pool:
        with running_sandbox(state=state) as running:
            held = pool.submit(held_write, running.url)
            wait_until(lambda: len(state.objects()) == 1)
            stopping = time.monotonic()

        assert time.monotonic() - stopping < 5.0
        assert held.result(timeout=5.0).status_code == 504


def test_running_sandbox_raises_in_the_caller_when_the_port_is_taken() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]

        with pytest.raises(OSError), running_sandbox(port=port):
            pass
