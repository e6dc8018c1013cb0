"""Four `reconciler serve` processes started together on an empty PostgreSQL schema all come up:
each waits for the others' migration (the advisory lock in store.schema) instead of crashing on
it, and all four answer /readyz. Ten tries, each on a fresh schema."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from urllib.parse import quote

import httpx
import pytest

from reconciler.testing.patience import PATIENCE_S

from databases import pg_schema, pg_unreachable
from service_harness import LOOPBACK

REPLICAS, TRIES = 4, 10
#: Each replica's pool is opened at start (settings.db_pool_size, 16 by default): four of them
#: beside the other test worker's PostgreSQL tests come near the server's 100 connections, and
#: the race under test is the migration's, not the pool's.
POOL_SIZE = 2
#: Every wait is bounded: a replica stuck on the lock (the race's other symptom) fails the try.
DEADLINE_S = PATIENCE_S


def start_replica(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "reconciler", "serve", "--db", url, "--host", LOOPBACK,
         "--port", "0", "--sweep-interval-s", "0", "--log-level", "warning"],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("RECONCILER_")
                or k == "RECONCILER_RUN_KEY"}, "RECONCILER_DB_POOL_SIZE": str(POOL_SIZE)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def served_url(process: subprocess.Popen[str], deadline: float) -> str:
    """The URL from the replica's `serving on` line; fails with its output if it exits."""
    assert process.stdout is not None
    seen: list[str] = []
    for line in process.stdout:  # the replica prints its settings, then where it serves
        seen.append(line)
        if line.startswith("serving on "):
            return line.removeprefix("serving on ").strip()
        if time.monotonic() > deadline:
            break
    process.wait(5)
    pytest.fail(f"replica exited {process.returncode} before serving:\n{''.join(seen)}")


def wait_ready(url: str, deadline: float) -> None:
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"{url} not ready within {DEADLINE_S:g}s"
        time.sleep(0.05)


@pytest.mark.slow
def test_four_serve_processes_started_together_on_an_empty_postgresql_all_come_up() -> None:
    if reason := pg_unreachable():
        pytest.skip(reason)
    for _ in range(TRIES):
        with pg_schema() as schema_url:
            url = schema_url + quote(" -clock_timeout=30s")
            replicas = [start_replica(url) for _ in range(REPLICAS)]
            try:
                deadline = time.monotonic() + DEADLINE_S
                for replica in replicas:
                    wait_ready(served_url(replica, deadline), deadline)
                assert [r.poll() for r in replicas] == [None] * REPLICAS
            finally:
                # Coming up is what is tested: a kill saves the graceful shutdown's time.
                for replica in replicas:
                    replica.kill()
                for replica in replicas:
                    replica.wait(10)
