"""One FastAPI app serving the five fake providers and the sandbox's own endpoints."""

from __future__ import annotations

from fastapi import FastAPI

from reconciler.sandbox import admin, calendar, chat, issues, jira, mail, payments, shapes, sms
from reconciler.sandbox.state import SandboxState


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
    shapes.install(app)
    return app
