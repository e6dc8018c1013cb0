"""Running the service under uvicorn, with a graceful shutdown.

On SIGTERM (or SIGINT) uvicorn stops accepting connections and lets the requests in flight
finish (at most `shutdown_timeout_s`); then the app's lifespan waits for a running sweep and
releases this replica's probe leases.

It holds under abuse: requests are parsed by h11, which bounds the request line and headers
(`max_header_bytes`; httptools, uvicorn's other parser, has no such bound: one endless header
would grow its buffer for good); a connection that has not sent a whole request head within
`request_read_timeout_s` is closed (a slow-loris holds nothing); `max_concurrency` requests in
flight are served and more get 503 + Retry-After (service.admission); TLS when configured.

    connect ── request head ─────────────▶ handled ── response ── keep-alive ──▶ next head
            |<- request_read_timeout_s ->|                               |<- the same ->|

`python -m reconciler.service.server` serves with settings from the environment
(`RECONCILER_*`, `RECONCILER_CONFIG` for the TOML file); the `reconciler` CLI wires flags in.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Mapping
from typing import TextIO

import h11
import uvicorn
from fastapi import FastAPI
from sqlalchemy.exc import SQLAlchemyError
from uvicorn.config import LOGGING_CONFIG
from uvicorn.protocols.http.h11_impl import H11Protocol

from reconciler.core.errors import ReconcilerError
from reconciler.infra.logs import configure
from reconciler.infra.serving import base_url, bind
from reconciler.service.app import create_app
from reconciler.service.settings import Settings, load_settings, render_settings

#: Exit status when the configuration or the store stops the service from starting.
EXIT_CANNOT_START = 2


def serve(settings: Settings, *, out: TextIO | None = None) -> None:
    """Print the effective settings (secrets masked), open and migrate the store, configure the
    providers from `settings.config`, and serve until SIGTERM or SIGINT. The periodic sweep
    runs with the app (see runtime.lifespan)."""
    out = out or sys.stdout
    configure(settings.log_level, settings.log_format)
    print(render_settings(settings), file=out, flush=True)
    app = create_app(settings)
    sock = bind(settings.host, settings.port)
    url = base_url(sock)
    if settings.tls_cert is not None:
        url = url.replace("http://", "https://", 1)
    print(f"serving on {url}", file=out, flush=True)
    settle_heap()
    uvicorn.Server(uvicorn_config(app, settings, log_level=settings.log_level,
                                  own_logging=False)).run(sockets=[sock])


def settle_heap() -> None:
    """Move everything built so far (the modules, the app, the store's engine: about 165,000
    objects) out of the garbage collector's reach for good. Requests allocate enough that
    uvicorn's in-flight ones get promoted to the oldest generation, and each full collection
    then walked the whole startup heap again: about 0.1 s every ~2,000 intents recorded
    (measured with gc.callbacks under the http benchmark); frozen, the hot routes cost 30-95 us
    less CPU per request (bench/README.md, http). What is frozen
    was built once and lives for the process (gc.freeze, docs.python.org/3/library/gc.html:
    "ignore them in all the future collections"); collect first so that no garbage is kept."""
    gc.collect()
    gc.freeze()


def uvicorn_config(app: FastAPI, settings: Settings, *, log_level: str = "info",
                   own_logging: bool = True) -> uvicorn.Config:
    """uvicorn's configuration for the service: h11 with the header bound and the head
    deadline, TLS when configured. (Options as documented at uvicorn.org/settings.) Without
    `own_logging` uvicorn installs no handlers of its own (log_config=None): its lines go to
    the root logger, in the format `reconciler.infra.logs` set. uvicorn's access line is off: the
    app logs its own (service.request_log), with the request's fields and id."""
    return uvicorn.Config(
        app, lifespan="on", log_level=log_level,
        log_config=LOGGING_CONFIG if own_logging else None, access_log=False,
        http=head_deadline_protocol(settings.request_read_timeout_s),
        h11_max_incomplete_event_size=settings.max_header_bytes,
        timeout_keep_alive=5,
        # A backstop behind the admission cap, which answers with Retry-After: connections
        # beyond this get uvicorn's own 503.
        limit_concurrency=max(1024, settings.max_concurrency * 4),
        ssl_certfile=settings.tls_cert, ssl_keyfile=settings.tls_key,
        timeout_graceful_shutdown=max(1, round(settings.shutdown_timeout_s)))


def head_deadline_protocol(timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection whose request head (line and headers) is
    not complete `timeout_s` after the connection opened or its previous response ended."""

    class HeadDeadline(H11Protocol):
        deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state is not h11.IDLE:
                self._disarm()  # the head is in: the app's body reads have their own timeout

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self.deadline = self.loop.call_later(timeout_s, self._expire)

        def _disarm(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None

        def _expire(self) -> None:
            self.deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeadDeadline


def main(flags: Mapping[str, object] | None = None) -> None:
    """Serve with `flags` (CLI values by setting name) over the environment and the file;
    a configuration or store that stops the service from starting exits 2, without a
    traceback."""
    try:
        serve(load_settings(flags))
    except (ReconcilerError, SQLAlchemyError, OSError) as exc:
        print(f"error: cannot start: {exc}", file=sys.stderr)
        sys.exit(EXIT_CANNOT_START)


if __name__ == "__main__":
    main()
