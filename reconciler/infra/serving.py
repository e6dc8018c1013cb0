"""Serving an ASGI app with uvicorn on a socket bound here: for the sidecar, the sandbox and the
tests, blocking or on a background thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); port 0 picks a free one.

    Bound here rather than by uvicorn so that a bind error surfaces in the caller's thread and
    the real port is known before the server starts; listening at once lets early clients
    queue instead of being refused.
    """
    family, type_, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)[0]
    # An explicit IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets that declare
    # it, and without it every answer waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, type_, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@contextmanager
def in_thread(server: uvicorn.Server, sock: socket.socket, *, startup_timeout_s: float = 10.0,
              shutdown_timeout_s: float = 10.0) -> Iterator[str]:
    """Run `server` on `sock` in a daemon thread for the `with` block; yields its base URL.

    On exit the server stops as on SIGTERM: requests in flight finish, then the app's lifespan
    shutdown runs. RuntimeError if it does not start, or stop, within the timeouts.
    """
    url = base_url(sock)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                              name=f"uvicorn {url}")
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server at {url} did not start")
            time.sleep(0.01)
        yield url
    finally:
        server.should_exit = True
        thread.join(shutdown_timeout_s)
        sock.close()
    if thread.is_alive():
        raise RuntimeError(f"the server at {url} did not stop within {shutdown_timeout_s:g}s")
