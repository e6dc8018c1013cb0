"""One FastAPI app serving the five fake providers and the sandbox's own endpoints."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from reconciler.sandbox import admin, calendar, chat, issues, jira, mail, payments, sms
from reconciler.sandbox.state import SandboxState
from reconciler.sandbox.wire import ProviderError


def create_app(state: SandboxState | None = None) -> FastAPI:
    """The sandbox app over `state` (a fresh one when None; reachable as app.state.sandbox)."""
    app = FastAPI(
        title="Reconciler sandbox provider",
        description="Fake Stripe, Postmark, Slack, GitHub and Twilio APIs with fault injection.",
    )
    app.state.sandbox = state or SandboxState()
    for module in (payments, chat, issues, sms, calendar, jira, admin):
        app.include_router(module.router)
    app.include_router(mail.router, prefix="/mail")
    app.include_router(mail.router, include_in_schema=False)

    @app.exception_handler(ProviderError)
    async def provider_error(request: Request, exc: ProviderError) -> JSONResponse:
        return exc.response()

    return app
