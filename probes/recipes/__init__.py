"""Built-in recipes: presets of the `http_json` probe that speak the providers' real APIs
(Stripe, Slack, GitHub, Postmark, Twilio, Jira, Google Calendar), one module per provider.

A recipe fixes the shape of its provider's answer and ships, as its defaults, what the
provider documents: the authority its endpoint earns (SPEC section 3) and, for a lagging read,
the least `visibility_lag_s` worth configuring (`least_lag_s`; set it lower only for a
provider you measured, or the sandbox). The configuration may set any
option (`params` and `headers` merge key by key with the recipe's), may lower the authority
(say, `weak` for a read behind a cache) but never raise it past `strongest`: a zero from a
read that cannot prove absence would open a retry that duplicates the effect.

docs/probes.md has the table of every recipe, its endpoint, authority, lag and citation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import httpx

from probes.base import utc_now
from probes.errors import ProbeConfigError
from probes.http_json import HttpJsonProbe, http_json
from probes.recipes import github, google_calendar, jira, postmark, slack, stripe, twilio
from probes.recipes.recipe import Recipe
from reconciler.core.domain import Authority

__all__ = ["RECIPES", "RENAMED", "Recipe", "merge", "recipe_factory"]

_STRENGTH: dict[str, int] = {Authority.WEAK: 0, Authority.LAGGING: 1, Authority.AUTHORITATIVE: 2}

#: Option tables that merge with the recipe's key by key instead of replacing them.
_MERGED = frozenset({"params", "headers", "where", "contains", "pagination"})

RECIPES: dict[str, Recipe] = {**stripe.RECIPES, **slack.RECIPES, **github.RECIPES,
                              **postmark.RECIPES, **twilio.RECIPES, **jira.RECIPES,
                              **google_calendar.RECIPES}


#: The names of the sandbox-shaped recipes this project shipped before, and what replaced them.
RENAMED: dict[str, str] = {
    "stripe_like.search": "stripe.payment_intents.search (or stripe.charges.search)",
    "stripe_like.charge": "stripe.charge (or stripe.payment_intent)",
    "stripe_like.idempotency_record": "stripe.payment_intents.list (Stripe has no "
                                      "idempotency-key lookup; the list by `created` window is "
                                      "the consistent read)",
    "postmark_like.search": "postmark.outbound",
    "postmark_like.by_id": "postmark.details",
    "slack_like.history": "slack.history",
    "github_like.search": "github.search",
    "github_like.issue_list": "github.issues.list",
}


def merge(preset: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` over `preset`, the tables in `_MERGED` key by key."""
    merged = {**preset, **options}
    for key in _MERGED & preset.keys() & options.keys():
        if isinstance(preset[key], Mapping) and isinstance(options[key], Mapping):
            merged[key] = {**preset[key], **options[key]}
    return merged


def recipe_factory(recipe_name: str) -> Callable[..., HttpJsonProbe]:
    """The factory of one recipe: adapts its own options, caps the authority, then builds."""
    recipe = RECIPES[recipe_name]

    def build(name: str, options: Mapping[str, Any], env: Mapping[str, str], *,
              transport: httpx.BaseTransport | None = None,
              clock: Callable[[], datetime] = utc_now) -> HttpJsonProbe:
        where = f"probe {name!r} ({recipe_name})"
        given = dict(options)
        least_lag_s = given.pop("least_lag_s", recipe.least_lag_s)
        if isinstance(least_lag_s, bool) or not isinstance(least_lag_s, int | float) \
                or least_lag_s < 0:
            raise ProbeConfigError(f"{where}: 'least_lag_s' must be a number of seconds >= 0")
        merged = merge(recipe.preset, recipe.adapt(given, where) if recipe.adapt else given)
        claimed = merged["authority"]
        strength = _STRENGTH.get(claimed) if isinstance(claimed, str) else None
        if strength is not None and strength > _STRENGTH[recipe.strongest]:
            raise ProbeConfigError(
                f"{where}: this read proves at most {recipe.strongest.value!r}; "
                f"authority {claimed!r} would let a zero it cannot prove open a retry")
        probe = http_json(name, merged, env, transport=transport, clock=clock)
        probe.least_lag_s = float(least_lag_s) if probe.spec.authority is Authority.LAGGING \
            else 0.0
        probe.inflight_s = recipe.inflight.seconds
        return probe

    return build
