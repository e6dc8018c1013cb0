"""`create_app`: the sidecar's HTTP service (SPEC section 6) as an ASGI app."""

from __future__ import annotations

from fastapi import FastAPI

from reconciler.infra import tracing
from reconciler.infra.release import release
from reconciler.ledger import Ledger
from reconciler.ledger.sweep import ProbeLookup
from reconciler.runtime.agent import Agent, load_agent
from reconciler.service import health, operations, webhooks
from reconciler.service.admission import Admission, HotQueue
from reconciler.service.auth import CONSOLE_PREFIX, BearerAuth
from reconciler.service.credentials import Credential, Keyring, Role, digest
from reconciler.service.http_metrics import HttpMetrics
from reconciler.service.intake import BodyIntake
from reconciler.service.openapi import install_docs, install_openapi
from reconciler.service.problems import (
    COMMON_PROBLEMS,
    SafetyNet,
    install_problem_handlers,
    problem_responses,
)
from reconciler.service.request_log import RequestLog
from reconciler.service.runs import listing as run_listing
from reconciler.service.runs import problems as run_problems
from reconciler.service.runs import routes as run_routes
from reconciler.service.settings import Settings
from reconciler.service.trace_context import TraceContext
from reconciler.service.ui.routes import install_console
from reconciler.service.wiring import build_wiring, lifespan


def create_app(settings: Settings, *, ledger: Ledger | None = None,
               probes_for: ProbeLookup | None = None, agent: Agent | None = None) -> FastAPI:
    """The service. Without `ledger` it opens (and migrates) the store at `settings.db`;
    without `probes_for` no operation has probes, and verdicts come from posted evidence.
    The runs API runs `agent`, else the one `settings.agent` names; without either its routes
    answer a no-agent problem. With an agent, the supervisor (runtime.supervisor) runs with the
    app and advances queued runs and runs whose worker died."""
    app = FastAPI(title="Effect-receipt reconciler", version=release(), lifespan=lifespan,
                  docs_url=None, redoc_url=None,
                  description="Records intents before dispatch, asks providers what happened, "
                  "and gates every retry on evidence.",
                  responses=problem_responses(*COMMON_PROBLEMS))
    app.state.wiring = build_wiring(settings, ledger, probes_for)
    app.state.hot_queue = HotQueue(settings.hot_queue_max, settings.hot_queue_wait_s)
    agent = agent or (load_agent(settings.agent) if settings.agent else None)
    app.state.runs = run_routes.build_runs(app.state.wiring, agent) if agent else None
    app.state.supervisor = run_routes.supervisor_of(settings, app.state.runs)
    routers = (operations.router, run_listing.router, run_routes.router, webhooks.router,
               health.router)
    for router in routers:
        # The webhook routes authenticate by the provider's signature (their own check).
        app.include_router(router)
    install_problem_handlers(app, [route for router in routers for route in router.routes])
    run_problems.install_run_problems(app)
    keys = keyring(settings)
    install_openapi(app, bearer=bool(keys))
    install_docs(app, settings.docs_assets)
    install_console(app, keys)
    # Added innermost first: the request's id and access line wrap everything, then the
    # metrics, then the safety net; Host and the in-flight cap are
    # checked before the credential, and the credential before any body is read. The console
    # (/ui) signs operators in with their credential and keeps a session.
    app.add_middleware(BodyIntake, max_body_bytes=settings.max_body_bytes,
                       read_timeout_s=settings.request_read_timeout_s,
                       forms_under=(CONSOLE_PREFIX + "/", "/v1/webhooks/twilio"))
    app.add_middleware(BearerAuth, keyring=keys)
    app.add_middleware(Admission, hosts=settings.served_hosts(),
                       max_headers=settings.max_headers,
                       max_concurrency=settings.max_concurrency)
    app.add_middleware(SafetyNet)
    app.add_middleware(HttpMetrics)
    app.add_middleware(RequestLog, enabled=settings.access_log)
    # Outermost: each operation call a span in the caller's trace, only when OTEL_* says so
    # (otherwise no layer at all on every request's way).
    if tracing.configure_from_env():
        app.add_middleware(TraceContext)
    return app


def keyring(settings: Settings) -> Keyring:
    """Every credential the service accepts: the single token (as one `admin`), the
    RECONCILER_CREDENTIAL_* ones and the credentials file's."""
    single = [] if settings.token is None else [
        Credential("admin", frozenset({Role.ADMIN}), digest(settings.token.get_secret_value()))]
    return Keyring([*single, *settings.credentials, *settings.file_credentials()])
