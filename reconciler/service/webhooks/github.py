"""GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`, checked as GitHub's docs
do it (a constant-time compare).

The operation is an `issues` event with action `opened` whose issue body holds the marker the
recipes search for, `<!-- reconciler:op=<operation id> -->`, optionally with
` request_hash=sha256:<hex>` before the `-->`. The receipt's ref is the issue number.

Anyone who can open an issue on a watched repository can write that marker, and GitHub signs
every event of the repository alike: the signature proves GitHub sent the event, not that the
worker wrote the issue. So (SPEC section 3) an issue is a receipt only when it is in the
repository RECONCILER_WEBHOOK_GITHUB_REPOSITORY names (`owner/repo`, comma-separated for
several) and its author, `issue.user.login`, is RECONCILER_WEBHOOK_GITHUB_ACCOUNT, the worker's
own login. Without both set, no issue is a receipt. Either way the delivery is acknowledged
(200) so GitHub does not keep it for redelivery.

GitHub signs no timestamp and no delivery id (`X-GitHub-Delivery` is unsigned: a copy re-sent
under a new one must not count twice), so a delivery is known again by the SHA-256 of the body
its signature covers, kept for good: a captured delivery verifies forever.
https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
https://docs.github.com/en/webhooks/webhook-events-and-payloads#issues
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
from typing import Any

from fastapi import Request

from reconciler.core.schemas import WebhookAck
from reconciler.service.problems import problem_responses
from reconciler.service.webhooks.receiving import (
    EventReceipt,
    accept,
    body_digest,
    dig,
    event_receipt,
    json_event,
    rejected,
    webhook_secret,
)
from reconciler.service.webhooks.routes import router
from reconciler.service.webhooks.signing import RawBody
from reconciler.service.wiring import Wired

log = logging.getLogger(__name__)

MARKER = re.compile(r"<!-- reconciler:op=(?P<op>\S+?)(?: request_hash=(?P<hash>\S+))? -->")
REPOSITORY_ENV = "RECONCILER_WEBHOOK_GITHUB_REPOSITORY"
ACCOUNT_ENV = "RECONCILER_WEBHOOK_GITHUB_ACCOUNT"


def signature(secret: str, body: bytes) -> str:
    """The X-Hub-Signature-256 value GitHub sends for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def hub_signed(provider: str, header: str, body: bytes, request: Request) -> None:
    """Refuse a delivery whose `header` is not `signature` of its body with `provider`'s
    webhook secret (GitHub's X-Hub-Signature-256; Jira's X-Hub-Signature, the same value)."""
    presented = request.headers.get(header, "")
    if not hmac.compare_digest(signature(webhook_secret(provider), body).encode(),
                               presented.encode()):
        raise rejected(provider, f"{header} does not verify with the webhook secret")


@router.post("/github", response_model=WebhookAck, responses=problem_responses(400, 401, 404))
def github_webhook(body: RawBody, request: Request, wiring: Wired) -> WebhookAck:
    """A GitHub delivery (the webhook's secret in RECONCILER_WEBHOOK_SECRET_GITHUB; content
    type application/json)."""
    hub_signed("github", "X-Hub-Signature-256", body, request)
    event = json_event(body)
    kind = request.headers.get("x-github-event", "")
    named: EventReceipt | str = f"a {kind or 'unnamed'} event is not a receipt"
    if kind == "issues" and event.get("action") == "opened":
        named = _issue_opened(event)
    return accept(wiring, "github", body_digest(body), None, named)


def _issue_opened(event: dict[str, Any]) -> EventReceipt | str:
    """The operation an opened issue names, or why it is ignored: it must be in a configured
    repository and written by the configured account before its marker means anything."""
    if (ignored := _not_the_workers(event)) is not None:
        log.info("github issue ignored: %s", ignored)
        return "ignored: " + ignored
    issue_body = dig(event, "issue.body")
    marker = MARKER.search(issue_body) if isinstance(issue_body, str) else None
    if not marker:
        return "the issue body carries no reconciler marker"
    return event_receipt(marker["op"], dig(event, "issue.number"), marker["hash"])


def _not_the_workers(event: dict[str, Any]) -> str | None:
    """Why the issue is not the worker's own (None when it is). Logins and repository names
    are compared as GitHub does, without regard to case."""
    repositories = {r.strip().casefold()
                    for r in os.environ.get(REPOSITORY_ENV, "").split(",") if r.strip()}
    account = os.environ.get(ACCOUNT_ENV, "").strip()
    if not repositories or not account:
        return (f"set {REPOSITORY_ENV} (owner/repo) and {ACCOUNT_ENV} (the worker's login): "
                "without them no issue, which anyone may open, counts as a receipt")
    repository, author = dig(event, "repository.full_name"), dig(event, "issue.user.login")
    if not isinstance(repository, str) or repository.casefold() not in repositories:
        return f"the issue is in repository {repository!r}, not one {REPOSITORY_ENV} names"
    if not isinstance(author, str) or author.casefold() != account.casefold():
        return f"the issue was opened by {author!r}, not by {ACCOUNT_ENV} {account!r}"
    return None
