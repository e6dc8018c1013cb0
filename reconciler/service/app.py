"""`create_app`: the sidecar's HTTP service (SPEC section 6) as an ASGI app."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fastapi import FastAPI

from reconciler.ledger import Ledger
from reconciler.runtime.agent import Agent, load_agent
from reconciler.service import health, operations, run_list, runs, webhooks
from reconciler.service.http_metrics import HttpMetrics
from reconciler.service.intake import BodyIntake
from reconciler.service.openapi import install_docs, install_openapi
from reconciler.service.problems import (
    COMMON_PROBLEMS,
    SafetyNet,
    install_problem_handlers,
    problem_responses,
)
from reconciler.service.settings import Settings
from reconciler.service.ui.access import CONSOLE_PREFIX, BearerExceptConsole
from reconciler.service.ui.routes import install_console
from reconciler.service.wiring import build_wiring, lifespan
from reconciler.sweep import ProbeLookup


def _version() -> str:
    try:
        return version("effect-reconciler")
    except PackageNotFoundError:
        return "0+unknown"


def create_app(settings: Settings, *, ledger: Ledger | None = None,
               probes_for: ProbeLookup | None = None, agent: Agent | None = None) -> FastAPI:
    """The service. Without `ledger` it opens (and migrates) the store at `settings.db`;
    without `probes_for` no operation has probes, and verdicts come from posted evidence.
    The runs API runs `agent`, else the one `settings.agent` names; without either its routes
    answer a no-agent problem."""
    app = FastAPI(title="Effect-receipt reconciler", version=_version(), lifespan=lifespan,
                  docs_url=None, redoc_url=None,
                  description="Records intents before dispatch, asks providers what happened, "
                  "and gates every retry on evidence.",
                  responses=problem_responses(*COMMON_PROBLEMS))
    app.state.wiring = build_wiring(settings, ledger, probes_for)
    agent = agent or (load_agent(settings.agent) if settings.agent else None)
    app.state.runs = runs.build_runs(app.state.wiring, agent) if agent else None
    routers = (operations.router, run_list.router, runs.router, webhooks.router, health.router)
    for router in routers:
        app.include_router(router)
    install_problem_handlers(app, [route for router in routers for route in router.routes])
    runs.install_run_problems(app)
    install_openapi(app, bearer=settings.token is not None)
    install_docs(app, settings.docs_assets)
    install_console(app, settings.token)
    # Added innermost first: the safety net wraps everything, auth runs before any body is read.
    app.add_middleware(BodyIntake, max_body_bytes=settings.max_body_bytes,
                       forms_under=CONSOLE_PREFIX + "/")
    if settings.token is not None:
        # The console (/ui) signs operators in with the same credential and keeps a session.
        app.add_middleware(BearerExceptConsole, token=settings.token)
    app.add_middleware(SafetyNet)
    app.add_middleware(HttpMetrics)
    return app
