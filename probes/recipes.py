"""Built-in recipes: presets of the `http_json` probe for the four provider shapes the sandbox
serves (docs/sandbox-api.md), shaped like Stripe, Postmark, Slack and GitHub.

A recipe fixes what to read and how to parse it; the configuration supplies only where the
provider is and how to log in (`SETTABLE`). Each recipe also knows the most its endpoint can
prove: the configuration may lower a recipe's authority (say, `weak` for a chat history behind
a cache) but never raise it, since a zero from a read that cannot prove absence would open a
retry that duplicates the effect.

Correlation refs the recipes read: `charge_id` (stripe_like.charge), `message_id`
(postmark_like.by_id), `channel` (slack_like.history), `owner` and `repo` (github_like.*).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from probes.base import utc_now
from probes.errors import ProbeConfigError
from probes.http_json import HttpJsonProbe, http_json
from reconciler.domain import Authority

#: Options a recipe takes from the configuration; the rest of its shape is fixed.
SETTABLE = frozenset({"base_url", "token_env", "auth_header", "headers", "authority", "tries",
                      "backoff_s", "timeout_s", "deadline_s", "max_bytes"})

_STRENGTH: dict[str, int] = {Authority.WEAK: 0, Authority.LAGGING: 1, Authority.AUTHORITATIVE: 2}

_OP_IN_METADATA = {"metadata.operation_id": "{operation_id}"}
_ISSUE_MARKER = {"body": "<!-- reconciler:op={operation_id} -->"}
_GH_REPO = "{correlation[owner]}/{correlation[repo]}"
_POSTMARK_AUTH = "X-Postmark-Server-Token"


@dataclass(frozen=True, slots=True)
class Recipe:
    """`preset`: `http_json` options, the default authority included; `strongest`: the cap."""

    preset: Mapping[str, Any]
    strongest: Authority


RECIPES: dict[str, Recipe] = {
    # Stripe's search index lags writes by design.
    "stripe_like.search": Recipe({
        "path": "/v1/charges/search",
        "params": {"query": "metadata['operation_id']:'{operation_id}'"},
        "items": "data", "ref": "id", "hash": "request_hash", "where": _OP_IN_METADATA,
        "authority": "lagging"}, Authority.LAGGING),
    # Needs the charge id from a response (correlation `charge_id`), which a timeout never gave.
    "stripe_like.charge": Recipe({
        "path": "/v1/charges/{correlation[charge_id]}",
        "item": "", "ref": "id", "hash": "request_hash", "where": _OP_IN_METADATA,
        "not_found": "zero", "not_found_where": {"error.code": "resource_missing"},
        "authority": "authoritative"}, Authority.AUTHORITATIVE),
    # The provider's own record of the key: found is a receipt bound (or not) by its hash.
    "stripe_like.idempotency_record": Recipe({
        "path": "/v1/idempotency_keys/{idempotency_key}",
        "item": "", "ref": "charge_id", "hash": "request_hash", "emit": "receipt",
        "where": {"key": "{idempotency_key}"},
        "not_found": "zero", "not_found_where": {"error.code": "resource_missing"},
        "authority": "authoritative"}, Authority.AUTHORITATIVE),
    "postmark_like.search": Recipe({
        "path": "/messages/outbound",
        "params": {"metadata_operation_id": "{operation_id}", "count": "100", "offset": "0"},
        "items": "Messages", "ref": "MessageID", "hash": "RequestHash",
        "where": {"Metadata.operation_id": "{operation_id}"}, "auth_header": _POSTMARK_AUTH,
        "authority": "lagging"}, Authority.LAGGING),
    "postmark_like.by_id": Recipe({
        "path": "/messages/outbound/{correlation[message_id]}/details",
        "item": "", "ref": "MessageID", "hash": "RequestHash",
        "where": {"Metadata.operation_id": "{operation_id}"}, "auth_header": _POSTMARK_AUTH,
        "not_found": "zero", "not_found_where": {"ErrorCode": 701},
        "authority": "authoritative"}, Authority.AUTHORITATIVE),
    # Newest first, so a fresh message is on the first page; a full page may hide older ones.
    "slack_like.history": Recipe({
        "path": "/api/conversations.history",
        "params": {"channel": "{correlation[channel]}", "include_all_metadata": "true",
                   "limit": "200"},
        "require": {"ok": True}, "items": "messages", "ref": "ts", "hash": "request_hash",
        "where": {"metadata.event_payload.operation_id": "{operation_id}"}, "page_size": 200,
        "authority": "authoritative"}, Authority.AUTHORITATIVE),
    "github_like.search": Recipe({
        "path": "/search/issues",
        "params": {"q": "reconciler:op={operation_id} repo:" + _GH_REPO},
        "items": "items", "ref": "number", "hash": "request_hash", "contains": _ISSUE_MARKER,
        "authority": "lagging"}, Authority.LAGGING),
    # One page of a list that may be cached: weak unless the operator knows better.
    "github_like.issue_list": Recipe({
        "path": "/repos/" + _GH_REPO + "/issues",
        "params": {"state": "all", "per_page": "100", "page": "1"},
        "items": "", "ref": "number", "hash": "request_hash", "contains": _ISSUE_MARKER,
        "page_size": 100, "authority": "weak"}, Authority.LAGGING),
}


def recipe_factory(recipe_name: str) -> Callable[..., HttpJsonProbe]:
    """The factory of one recipe: checks what the configuration may set, then builds."""
    recipe = RECIPES[recipe_name]

    def build(name: str, options: Mapping[str, Any], env: Mapping[str, str], *,
              transport: httpx.BaseTransport | None = None,
              clock: Callable[[], datetime] = utc_now) -> HttpJsonProbe:
        where = f"probe {name!r} ({recipe_name})"
        fixed = sorted(set(options) - SETTABLE)
        if fixed:
            raise ProbeConfigError(
                f"{where}: {', '.join(fixed)} fixed by the recipe; settable: "
                f"{', '.join(sorted(SETTABLE))} (for another shape, use 'http_json')")
        merged = {**recipe.preset, **options}
        claimed = merged["authority"]
        strength = _STRENGTH.get(claimed) if isinstance(claimed, str) else None
        if strength is not None and strength > _STRENGTH[recipe.strongest]:
            raise ProbeConfigError(
                f"{where}: this read proves at most {recipe.strongest.value!r}; "
                f"authority {claimed!r} would let a zero it cannot prove open a retry")
        return http_json(name, merged, env, transport=transport, clock=clock)

    return build
