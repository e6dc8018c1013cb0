"""Running the sidecar for tests over real HTTP: in a thread (`serving`), in its own process
(`serving_process`, for shutdown and multi-replica tests), on SQLite or a fresh PostgreSQL schema
(`database`).

Every server binds 127.0.0.1 on a port the OS picks; every wait has a deadline.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from reconciler.infra.serving import bind, in_thread
from reconciler.service.app import create_app
from reconciler.service.settings import Settings
from reconciler.testing.patience import PATIENCE_S

from databases import pg_schema

LOOPBACK = "127.0.0.1"


@contextmanager
def serving(app: FastAPI, *, timeout_s: float = PATIENCE_S) -> Iterator[str]:
    """Serve `app` under uvicorn on a background thread; yields the base URL. On exit uvicorn
    shuts down as on SIGTERM: in-flight requests finish, then the lifespan shutdown runs."""
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning",
                                           timeout_graceful_shutdown=5))
    with in_thread(server, bind(LOOPBACK, 0), startup_timeout_s=timeout_s,
                   shutdown_timeout_s=timeout_s) as url:
        yield url


@contextmanager
def configured_sidecar(config_toml: str, folder: Path, *,
                       timeout_s: float = PATIENCE_S) -> Iterator[httpx.Client]:
    """The sidecar in a thread, on a SQLite file in `folder`, its providers and probes from
    `config_toml` (a reconciler.toml's text), no sweep: a client on its loopback URL."""
    config = folder / "reconciler.toml"
    config.write_text(config_toml)
    settings = Settings(db=f"sqlite:///{folder / 'r.db'}", sweep_interval_s=0, config=config)
    with serving(create_app(settings)) as url, httpx.Client(
            base_url=url, timeout=timeout_s, trust_env=False) as http:
        yield http


def answered(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    """The JSON object of a response that must have `status`."""
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


@dataclass
class ServiceProcess:
    url: str
    process: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)

    def stop(self, timeout_s: float = PATIENCE_S) -> int:
        """SIGTERM, then the exit status once it has shut down (killed after `timeout_s`)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout_s)
            raise


@contextmanager
def serving_process(env: Mapping[str, str], *, timeout_s: float = PATIENCE_S,
                    cwd: Path | None = None) -> Iterator[ServiceProcess]:
    """`python -m reconciler.service.server` with `RECONCILER_*` settings in `env` (port 0 and
    loopback unless given); yields once it prints where it serves."""
    full_env = {**os.environ, "RECONCILER_HOST": LOOPBACK, "RECONCILER_PORT": "0", **env}
    process = subprocess.Popen(
        [sys.executable, "-m", "reconciler.service.server"], env=full_env, cwd=cwd,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()
    output: list[str] = []

    def drain() -> None:  # keeps the pipe from filling up while the process logs
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line)
            lines.put(line)

    threading.Thread(target=drain, daemon=True).start()
    service = ServiceProcess("", process, output)
    try:
        deadline = time.monotonic() + timeout_s
        while not service.url:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"no 'serving on' line within {timeout_s:g}s: "
                                   f"{''.join(output)}") from None
            if line.startswith("serving on "):
                service.url = line.removeprefix("serving on ").strip()
        yield service
    finally:
        service.stop(timeout_s)


@contextmanager
def database(kind: str, directory: Path) -> Iterator[str]:
    """A fresh, empty store URL: a SQLite file in `directory`, or a new PostgreSQL schema."""
    if kind == "sqlite":
        yield f"sqlite:///{directory / 'reconciler.db'}"
        return
    with pg_schema() as url:
        yield url
