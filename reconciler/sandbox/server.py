"""Running the sandbox: blocking for the CLI, or on a background thread for tests and demos."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn

from reconciler.infra.serving import bind, in_thread
from reconciler.sandbox.app import create_app
from reconciler.sandbox.state import SandboxState

DEFAULT_PORT = 8081

# Backstop for requests still inside an injected `delay` when the server stops; held
# `lose_response` requests end at once (see `_SandboxServer.shutdown`).
_GRACEFUL_SHUTDOWN_S = 2


class _SandboxServer(uvicorn.Server):
    """A uvicorn server that ends `lose_response` holds when it stops, instead of waiting
    `hold_s` for them to finish."""

    def __init__(self, config: uvicorn.Config, state: SandboxState) -> None:
        super().__init__(config)
        self._state = state

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._state.holds.open()
        await super().startup(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._state.holds.close()
        await super().shutdown(sockets)


def _server(state: SandboxState, host: str, port: int, *, quiet: bool) -> _SandboxServer:
    config = uvicorn.Config(
        create_app(state),
        host=host,
        port=port,
        log_level="warning" if quiet else "info",
        access_log=not quiet,
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S,
    )
    return _SandboxServer(config, state)


def serve(host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> None:
    """Serve a fresh sandbox until interrupted (Ctrl+C)."""
    state = SandboxState()
    _server(state, host, port, quiet=False).run()


@dataclass(frozen=True, slots=True)
class RunningSandbox:
    """A sandbox serving on a background thread: its base URL and its live state."""

    url: str
    state: SandboxState


@contextmanager
def running_sandbox(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    state: SandboxState | None = None,
    startup_timeout_s: float = 10.0,
    shutdown_timeout_s: float = 10.0,
) -> Iterator[RunningSandbox]:
    """Run a sandbox on a background thread (port 0: an ephemeral one) for the `with` block.

    Raises OSError when the address cannot be bound, RuntimeError when the server does not come
    up, or does not stop, within the timeouts.
    """
    state = state or SandboxState()
    sock = bind(host, port)
    server = _server(state, host, port, quiet=True)
    with in_thread(server, sock, startup_timeout_s=startup_timeout_s,
                   shutdown_timeout_s=shutdown_timeout_s) as url:
        yield RunningSandbox(url, state)
