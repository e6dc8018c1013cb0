"""`reconciler chaos --supervised`: nobody calls resume. A second replica, a real `reconciler
serve` process with the chaos agent, runs beside the killed workers on the same store; its
supervisor finds each orphaned run once the dead worker's short lease lapses, and finishes it.

    runner ── worker 1: creates run i, advances it ── ✕ SIGKILL at (point, n) ── run i+1 ...
                                         lease (LEASE_S) lapses │
    `reconciler serve --agent reconciler.chaos.agent:served` ◀──┘ supervisor: claim, advance
                                                                   (recovery, as the runtime does)
    then, once every run is at rest (bounded by SETTLE_S): count the sandbox's effects
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reconciler.chaos.agent import SANDBOX_ENV
from reconciler.core.ports import Journal
from reconciler.core.runs.states import RunState
from reconciler.demo.scenarios import CREDENTIALS
from reconciler.store.sealing import KEY_ENV

#: The run lease in this mode: a dead worker's run is orphaned this long after its last
#: renewal (the service's default is 30 s; short here so a hundred runs finish in minutes).
LEASE_S = 2.0
#: How often the second replica's supervisor looks for orphans.
SUPERVISE_INTERVAL_S = 0.5
#: How long the second replica may take to start, and the runs to come to rest at the end.
START_S = 60.0
SETTLE_S = 180.0
#: States in which a run still wants a worker.
_UNFINISHED = frozenset({RunState.QUEUED, RunState.RUNNING, RunState.AWAITING_TOOL})


def provider_toml(config: dict[str, Any]) -> str:
    """The probe configuration (`demo.scenarios.probe_config`'s shape: [providers.NAME] tables
    of scalars, each with an array of [[providers.NAME.probes]] tables) as a TOML file."""
    lines: list[str] = []
    for name, table in config["providers"].items():
        lines.append(f"[providers.{name}]")
        lines += [f"{key} = {_scalar(value)}" for key, value in table.items() if key != "probes"]
        for probe in table.get("probes", ()):
            lines.append(f"[[providers.{name}.probes]]")
            lines += [f"{key} = {_scalar(value)}" for key, value in probe.items()]
    return "\n".join(lines) + "\n"


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(value, list):  # a probe's `actions`
        return "[" + ", ".join(_scalar(item) for item in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


@contextmanager
def second_replica(db_url: str, sandbox_url: str, run_key: str, config: dict[str, Any],
                   workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A `reconciler serve` process on the chaos store with the chaos agent and its supervisor,
    started (bounded by START_S) before the block and stopped with SIGTERM after it."""
    config_file = workdir / "providers.toml"
    config_file.write_text(provider_toml(config), encoding="utf-8")
    log_file = workdir / "serve.log"
    # Its probes read the providers' credentials from the environment: the sandbox's.
    env = {**os.environ, **CREDENTIALS, KEY_ENV: run_key, SANDBOX_ENV: sandbox_url}
    command = [sys.executable, "-m", "reconciler", "serve", "--db", db_url, "--port", "0",
               "--config", str(config_file), "--agent", "reconciler.chaos.agent:served",
               "--run-lease-s", str(LEASE_S), "--supervise-interval-s",
               str(SUPERVISE_INTERVAL_S)]
    with log_file.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        _wait_serving(process, log_file)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(START_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_serving(process: subprocess.Popen[bytes], log_file: Path) -> None:
    stop = time.monotonic() + START_S
    while b"serving on" not in log_file.read_bytes():
        if process.poll() is not None or time.monotonic() > stop:
            tail = log_file.read_bytes()[-2000:].decode(errors="replace")
            raise RuntimeError(f"the second replica (reconciler serve) did not start:\n{tail}")
        time.sleep(0.1)


def settle(journal: Journal, run_ids: Sequence[str], replica: subprocess.Popen[bytes],
           timeout_s: float = SETTLE_S) -> set[str]:
    """Wait until no run of `run_ids` wants a worker any more (or `timeout_s` passed, or the
    replica died); the ids of those still unfinished."""
    stop = time.monotonic() + timeout_s
    pending = set(run_ids)
    while True:
        pending = {r for r in pending if journal.load(r).state in _UNFINISHED}
        if not pending or time.monotonic() > stop or replica.poll() is not None:
            return pending
        time.sleep(0.25)
