"""The sandbox provider: five fake provider APIs (Stripe, Postmark, Slack, GitHub, Twilio) over
real HTTP, each in its provider's wire format, with fault injection.

See docs/sandbox-api.md for the wire contract.
"""

from reconciler.infra.clock import Clock, SystemClock
from reconciler.sandbox.app import create_app
from reconciler.sandbox.server import RunningSandbox, running_sandbox, serve
from reconciler.sandbox.state import SandboxConfig, SandboxState

__all__ = [
    "Clock",
    "RunningSandbox",
    "SandboxConfig",
    "SandboxState",
    "SystemClock",
    "create_app",
    "running_sandbox",
    "serve",
]
