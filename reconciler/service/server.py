"""Running the service under uvicorn, with a graceful shutdown.

On SIGTERM (or SIGINT) uvicorn stops accepting connections and lets the requests in flight
finish (at most `shutdown_timeout_s`); then the app's lifespan waits for a running sweep and
releases this replica's probe leases.

`python -m reconciler.service.server` serves with settings from the environment
(`RECONCILER_*`, `RECONCILER_CONFIG` for the TOML file); the `reconciler` CLI wires flags in.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import TextIO

import uvicorn
from sqlalchemy.exc import SQLAlchemyError

from reconciler.errors import ReconcilerError
from reconciler.service.app import create_app
from reconciler.service.settings import Settings, load_settings, render_settings
from reconciler.serving import base_url, bind

#: Exit status when the configuration or the store stops the service from starting.
EXIT_CANNOT_START = 2


def serve(settings: Settings, *, out: TextIO | None = None) -> None:
    """Print the effective settings (secrets masked), open and migrate the store, configure the
    providers from `settings.config`, and serve until SIGTERM or SIGINT. The periodic sweep
    runs with the app (see runtime.lifespan)."""
    out = out or sys.stdout
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # A line per sweep (every few seconds) would drown the log; sweep failures still show.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    print(render_settings(settings), file=out, flush=True)
    app = create_app(settings)
    sock = bind(settings.host, settings.port)
    print(f"serving on {base_url(sock)}", file=out, flush=True)
    config = uvicorn.Config(app, lifespan="on", log_level="info",
                            timeout_graceful_shutdown=max(1, round(settings.shutdown_timeout_s)))
    uvicorn.Server(config).run(sockets=[sock])


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
