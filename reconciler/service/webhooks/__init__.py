"""Provider webhooks: a receipt the provider pushes instead of one a probe pulls, believed only
when the provider's own signature checks out (SPEC section 6, Trust; docs/webhooks.md).

These routes take no bearer token (a provider cannot send one): the signature is the
credential, and `is_signed_path` tells the bearer middleware which paths those are.
"""

from __future__ import annotations

import re

from reconciler.service.problems import ProblemError, ProblemType, problem_responses

# The provider modules add their routes to `router` as they are imported, before the catch-all.
from reconciler.service.webhooks import (  # noqa: F401
    github,
    jira,
    postmark,
    slack,
    standard,
    stripe,
    twilio,
)
from reconciler.service.webhooks.routes import router

ROUTES = ("stripe", "github", "slack", "postmark", "twilio", "jira")
_SIGNED = re.compile(rf"/v1/webhooks/(?:{'|'.join(ROUTES)}|standard/[^/]+)")

__all__ = ["is_signed_path", "router"]

GONE = ProblemType("webhook-route-gone", 410, "Unsigned webhook route removed")


def is_signed_path(path: str) -> bool:
    """True for the webhook routes, which authenticate by the provider's signature."""
    return _SIGNED.fullmatch(path) is not None


@router.post("/{provider}", status_code=410, responses=problem_responses(410),
             include_in_schema=False)
def unsigned_callback(provider: str) -> None:
    """The old route took the project's own body behind the bearer token: no provider sends
    that, and nothing proved who did. Say where deliveries go now."""
    raise ProblemError(GONE, f"POST /v1/webhooks/{{provider}} no longer records evidence; "
                       f"point the provider at /v1/webhooks/{' or /'.join(ROUTES)} or "
                       "/v1/webhooks/standard/<provider>, which check its signature "
                       "(docs/webhooks.md)")
