"""Running the sandbox: blocking for the CLI, or on a background thread for tests and demos."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn

from reconciler.sandbox.app import create_app
from reconciler.sandbox.state import SandboxState

DEFAULT_PORT = 8765

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
    # Bound here rather than by uvicorn: a bind error then surfaces in the caller's thread, and
    # the real port of port 0 is known before the server starts.
    sock = _bind(host, port)
    server = _server(state, host, port, quiet=True)
    thread = threading.Thread(
        target=server.run, args=([sock],), name="reconciler-sandbox", daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"sandbox did not start on {host}:{port}")
            time.sleep(0.01)
        yield RunningSandbox(_base_url(sock), state)
    finally:
        server.should_exit = True
        thread.join(shutdown_timeout_s)
        sock.close()
        if thread.is_alive():
            raise RuntimeError(f"sandbox did not stop within {shutdown_timeout_s} s")


def _bind(host: str, port: int) -> socket.socket:
    family, type_, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )[0]
    # An explicit IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets that declare it,
    # and without it every answer waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, type_, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def _base_url(sock: socket.socket) -> str:
    bound_host, bound_port = sock.getsockname()[:2]
    if ":" in bound_host:
        bound_host = f"[{bound_host}]"
    return f"http://{bound_host}:{bound_port}"
