"""Jira Cloud: an admin webhook registered with a secret signs each delivery with
`X-Hub-Signature: sha256=<hex HMAC-SHA256 of the body>` (WebSub's method=signature form),
checked with a constant-time compare.
https://developer.atlassian.com/cloud/jira/platform/webhooks/#secure-admin-webhooks

Only admin webhooks (Jira settings > System > WebHooks, or `/rest/webhooks/1.0/webhook`) carry
a signature; webhooks an OAuth 2.0 or Connect app registers are signed otherwise (a JWT) or
not at all, and are refused here (401) like any delivery that does not verify.

The operation is a `jira:issue_created` event whose issue carries the label the recipes search
for, `reconciler-op-<operation id>` (probes/recipes/jira.py). The receipt's ref is the issue
key. The event does not carry entity properties, so the receipt holds no request hash.

Anyone who may edit an issue can add that label, and Jira signs every event of the site alike:
the signature proves Jira sent the event, not that the worker created the issue. So (SPEC
section 3) an issue is a receipt only when its creator, `issue.fields.creator.accountId`, is
RECONCILER_WEBHOOK_JIRA_ACCOUNT (the accountId the worker's API token acts as). Without it set,
no issue is a receipt. Either way the delivery is acknowledged (200) so Jira does not retry it.

Jira signs no timestamp and no delivery id (`X-Atlassian-Webhook-Identifier` is outside the
signature), so a delivery is known again by the SHA-256 of the body, kept for good, as for
GitHub (reconciler/service/webhooks/github.py).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from fastapi import Request

from probes.recipes.jira import LABEL
from reconciler.core.schemas import WebhookAck
from reconciler.service.problems import problem_responses

# Jira's X-Hub-Signature is GitHub's X-Hub-Signature-256 value: `sha256=` and the hex HMAC.
from reconciler.service.webhooks.github import hub_signed
from reconciler.service.webhooks.receiving import (
    EventReceipt,
    accept,
    body_digest,
    dig,
    event_receipt,
    json_event,
)
from reconciler.service.webhooks.routes import router
from reconciler.service.webhooks.signing import RawBody
from reconciler.service.wiring import Wired

log = logging.getLogger(__name__)

ACCOUNT_ENV = "RECONCILER_WEBHOOK_JIRA_ACCOUNT"
_PREFIX = LABEL.removesuffix("{operation_id}")


@router.post("/jira", response_model=WebhookAck, responses=problem_responses(400, 401, 404))
def jira_webhook(body: RawBody, request: Request, wiring: Wired) -> WebhookAck:
    """A Jira Cloud admin webhook's delivery (its secret in RECONCILER_WEBHOOK_SECRET_JIRA)."""
    hub_signed("jira", "X-Hub-Signature", body, request)
    event = json_event(body)
    kind = event.get("webhookEvent")
    named: EventReceipt | str = f"a {kind or 'unnamed'} event is not a receipt"
    if kind == "jira:issue_created":
        named = _issue_created(event)
    return accept(wiring, "jira", body_digest(body), None, named)


def _issue_created(event: dict[str, Any]) -> EventReceipt | str:
    """The operation a created issue's label names, or why it is ignored: the worker's own
    account must have created it before its label means anything."""
    account = os.environ.get(ACCOUNT_ENV, "").strip()
    creator = dig(event, "issue.fields.creator.accountId")
    if not account:
        why = (f"set {ACCOUNT_ENV} (the worker's accountId): without it no issue, which "
               "anyone may label, counts as a receipt")
    elif creator != account:
        why = f"the issue was created by {creator!r}, not by {ACCOUNT_ENV} {account!r}"
    else:
        labels = dig(event, "issue.fields.labels")
        ops = [label.removeprefix(_PREFIX) for label in labels or []
               if isinstance(label, str) and label.startswith(_PREFIX)] \
            if isinstance(labels, list) else []
        if len(ops) != 1:
            return "the issue carries no reconciler label" if not ops else \
                "the issue carries more than one reconciler label"
        return event_receipt(ops[0], dig(event, "issue.key"), None)
    log.info("jira issue ignored: %s", why)
    return "ignored: " + why
