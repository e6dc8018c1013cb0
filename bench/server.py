"""The sidecar exactly as `reconciler serve` runs it (same app, middleware, uvicorn settings and
logging), with one more route: `POST /bench/noop`, which does nothing. Its throughput and
latency are the floor of the server stack, measured on the same process type as the real
routes, so that a ratio between them compares the product's work and nothing else. The no-op
pays what every hot route pays before its own work: the same middleware, the same route class
(`HotRoute`, service.hot_routes, as the operations router declares it), the same
authorization dependency (`Worker`, as the POST routes declare it), and a route lookup as
short as theirs (it is first in the table; appended last, its lookup walked every router the
service has, about 70 us of CPU a request that the hot routes, matched near the front, never
pay). It reads no body: parsing one is the route's work.

    python -m bench.server    # settings from RECONCILER_*, as python -m reconciler.service.server
"""

from __future__ import annotations

from fastapi import FastAPI

from reconciler.ledger import Ledger
from reconciler.service import server
from reconciler.service.app import create_app
from reconciler.service.auth import Worker
from reconciler.service.hot_routes import HotRoute
from reconciler.service.settings import Settings
from reconciler.sweep import ProbeLookup

NOOP_PATH = "/bench/noop"


async def noop(caller: Worker) -> dict[str, bool]:
    return {"ok": True}


def create_app_with_noop(settings: Settings, *, ledger: Ledger | None = None,
                         probes_for: ProbeLookup | None = None) -> FastAPI:
    app = create_app(settings, ledger=ledger, probes_for=probes_for)
    app.router.add_api_route(NOOP_PATH, noop, methods=["POST"], route_class_override=HotRoute)
    # Starlette's router tries `app.router.routes` in order on every request (starlette
    # routing.Router.app, FastAPI's APIRouter.app alike): moved to the front.
    app.router.routes.insert(0, app.router.routes.pop())
    return app


if __name__ == "__main__":
    # `serve` builds its app through this module global: swapping it reuses everything else
    # `reconciler serve` does, instead of a copy that could drift from it.
    vars(server)["create_app"] = create_app_with_noop
    server.main()
