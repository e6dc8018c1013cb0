"""GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`, checked as GitHub's docs
do it (a constant-time compare). GitHub signs no timestamp, so a replay is known only by its
`X-GitHub-Delivery` id (a redelivery keeps it), and those ids are kept for good.

The operation is an `issues` event with action `opened` whose issue body holds the marker the
recipes search for, `<!-- reconciler:op=<operation id> -->`, optionally with
` request_hash=sha256:<hex>` before the `-->`. The receipt's ref is the issue number.
https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
"""

from __future__ import annotations

import hashlib
import hmac
import re

from fastapi import Request

from reconciler.schemas import WebhookAck
from reconciler.service.problems import problem_responses
from reconciler.service.webhooks.receiving import (
    Found,
    accept,
    dig,
    found,
    json_event,
    rejected,
    webhook_secret,
)
from reconciler.service.webhooks.routes import router
from reconciler.service.webhooks.signing import RawBody
from reconciler.service.wiring import Wired

MARKER = re.compile(r"<!-- reconciler:op=(?P<op>\S+?)(?: request_hash=(?P<hash>\S+))? -->")


def signature(secret: str, body: bytes) -> str:
    """The X-Hub-Signature-256 value GitHub sends for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@router.post("/github", response_model=WebhookAck, responses=problem_responses(400, 401, 404))
def github_webhook(body: RawBody, request: Request, wiring: Wired) -> WebhookAck:
    """A GitHub delivery (the webhook's secret in RECONCILER_WEBHOOK_SECRET_GITHUB; content
    type application/json)."""
    secret = webhook_secret("github")
    presented = request.headers.get("x-hub-signature-256", "")
    if not hmac.compare_digest(signature(secret, body).encode(), presented.encode()):
        raise rejected("github", "X-Hub-Signature-256 does not verify with the webhook secret")
    event = json_event(body)
    kind = request.headers.get("x-github-event", "")
    named: Found | str = f"a {kind or 'unnamed'} event is not a receipt"
    if kind == "issues" and event.get("action") == "opened":
        issue_body = dig(event, "issue.body")
        marker = MARKER.search(issue_body) if isinstance(issue_body, str) else None
        named = (found(marker["op"], dig(event, "issue.number"), marker["hash"]) if marker
                 else "the issue body carries no reconciler marker")
    return accept(wiring, "github", request.headers.get("x-github-delivery", ""), None, named)
