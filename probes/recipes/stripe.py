"""Stripe: PaymentIntents and Charges, by id, listed by `created` window, and searched.

    stripe.payment_intent          GET /v1/payment_intents/{id}         authoritative
    stripe.charge                  GET /v1/charges/{id}                 authoritative
    stripe.payment_intents.list    GET /v1/payment_intents?created[gte] authoritative
    stripe.charges.list            GET /v1/charges?created[gte]         authoritative
    stripe.payment_intents.search  GET /v1/payment_intents/search       lagging, 60 s
    stripe.charges.search          GET /v1/charges/search               lagging, 60 s

The agent tags the object with `metadata[operation_id]` (and `metadata[request_hash]`, which
binds a match to the request; Stripe returns metadata as it was given). Stripe has no
metadata filter on its lists, so a list probe pages through the window (from the intent's time
less five minutes) and keeps this operation's objects; a window with more than `max_pages`
pages of objects is a cut read, no zero.

Statuses (a failed or canceled object is not the effect): a PaymentIntent is the effect when
`succeeded`, `processing` or `requires_capture`, not when `canceled`, nor when it is back in
`requires_payment_method` with a `last_payment_error` (Stripe declined the confirm: the call's
effect did not apply, and the provider says so); any other status (`requires_action`, a
`requires_payment_method` never confirmed, ...) may still become a payment, so it decides
nothing. A Charge is the effect when `succeeded` or `pending`, not when `failed`.

A 404 `resource_missing` is also what Stripe answers for a key of the other mode or a missing
`Stripe-Account` header, so a by-id read counts it as a zero only when the configuration pins
the account and mode (`account = "acct_..."`, `livemode = true|false`) and two confirm reads
(`GET /v1/account`, `GET /v1/balance`) show the key reads exactly those; otherwise a 404 is
`unavailable`. For Connect, send `headers = {"Stripe-Account" = "acct_..."}`.

Sources: https://docs.stripe.com/search ("Don't use search for read-after-write flows ... data
is searchable in under 1 minute. Propagation ... could be delayed during an outage"; the API
reference: "up to an hour behind during outages"; "use the various list APIs" for
read-after-write), https://docs.stripe.com/api/pagination (has_more, starting_after),
https://docs.stripe.com/error-codes (resource_missing), stripe/openapi spec3.json.
"""

from __future__ import annotations

from typing import Any

from probes.errors import ProbeConfigError
from probes.recipes.recipe import Inflight, Recipe
from reconciler.core.domain import Authority

CITE = "https://docs.stripe.com/search; https://docs.stripe.com/api/pagination"

#: Stripe documents no bound on how long it may still apply a request; its own libraries wait
#: 80 s for the answer (stripe-python's HTTP clients, `timeout = 80`; stripe-node's `timeout`,
#: 80000 ms: https://github.com/stripe/stripe-node#configuration), so a request is taken to be
#: in flight that long.
INFLIGHT = Inflight(80.0, "https://github.com/stripe/stripe-node#configuration (timeout "
                          "80000 ms; stripe-python's clients: 80 s)")

#: Search: "Under normal operating conditions, data is searchable in less than a minute.
#: Occasionally, propagation of new or updated data can be up to an hour behind during
#: outages" (https://docs.stripe.com/api/payment_intents/search). The least lag is the
#: minute: it is the documented figure for normal operation, and what an outage delays is
#: made safe elsewhere: a zero read too early opens a retry only under the same idempotency
#: key within its retention (SPEC section 4), which Stripe answers with the first request's
#: result, not a second charge. Configure `visibility_lag_s = 3600` (or read the list
#: recipes, which are not indexed) where even a false `false_success` is too costly.
SEARCH_LAG_S = 60.0

_OP = {"metadata.operation_id": "{operation_id}"}
_HASH = "metadata.request_hash"
_PI_STATUS = {"status": "status",
              "effect_status": ["succeeded", "processing", "requires_capture"],
              "no_effect_status": ["canceled"],
              # A confirm Stripe declined: "If the payment attempt fails (for example due to a
              # decline), the PaymentIntent's status returns to requires_payment_method" and
              # last_payment_error says why (https://docs.stripe.com/payments/paymentintents/
              # lifecycle; https://docs.stripe.com/api/payment_intents/object
              # #payment_intent_object-last_payment_error). Without last_payment_error the
              # intent was never confirmed, which decides nothing.
              "no_effect_status_with": {"requires_payment_method": "last_payment_error"}}
_CHARGE_STATUS = {"status": "status", "effect_status": ["succeeded", "pending"],
                  "no_effect_status": ["failed"]}
_WINDOW = {"created[gte]": "{intent_at:unix-300}", "limit": "100"}
_AFTER_LAST = {"style": "after_last", "param": "starting_after", "more": "has_more"}
_SEARCH_PAGES = {"style": "cursor", "next": "next_page", "param": "page", "more": "has_more"}
_SEARCH = {"query": "metadata['operation_id']:'{operation_id}'", "limit": "100"}


def _by_id(options: dict[str, Any], where: str) -> dict[str, Any]:
    """`account` and `livemode` pin what a 404 must be read against before it is a zero."""
    account, livemode = options.pop("account", None), options.pop("livemode", None)
    if account is None and livemode is None:
        return options
    if not (isinstance(account, str) and account.startswith("acct_")
            and isinstance(livemode, bool)):
        raise ProbeConfigError(f"{where}: a 404 counts as a zero only with both 'account' "
                               "(acct_...) and 'livemode' (true or false)")
    return {"not_found": "zero", "not_found_where": {"error.code": "resource_missing"},
            "confirm": [{"path": "/v1/account", "where": {"id": account}},
                        {"path": "/v1/balance", "where": {"livemode": livemode}}],
            **options}


_AUTH = {"token_env": "STRIPE_SECRET_KEY"}


def _one(path: str, status: dict[str, Any]) -> Recipe:
    return Recipe({"path": path, **_AUTH, "item": "", "ref": "id", "hash": _HASH, "where": _OP,
                   **status, "authority": "authoritative"},
                  Authority.AUTHORITATIVE, CITE, adapt=_by_id, inflight=INFLIGHT)


def _listed(path: str, status: dict[str, Any]) -> Recipe:
    # List endpoints are Stripe's documented read-after-write path.
    return Recipe({"path": path, **_AUTH, "params": _WINDOW, "items": "data", "ref": "id",
                   "hash": _HASH, "where": _OP, **status, "pagination": _AFTER_LAST,
                   "authority": "authoritative"}, Authority.AUTHORITATIVE, CITE,
                  inflight=INFLIGHT)


def _searched(path: str, status: dict[str, Any]) -> Recipe:
    return Recipe({"path": path, **_AUTH, "params": _SEARCH, "items": "data", "ref": "id",
                   "hash": _HASH, "where": _OP, **status, "pagination": _SEARCH_PAGES,
                   "authority": "lagging"}, Authority.LAGGING, CITE, least_lag_s=SEARCH_LAG_S,
                  inflight=INFLIGHT)


RECIPES: dict[str, Recipe] = {
    "stripe.payment_intent": _one("/v1/payment_intents/{correlation[payment_intent]}",
                                  _PI_STATUS),
    "stripe.charge": _one("/v1/charges/{correlation[charge]}", _CHARGE_STATUS),
    "stripe.payment_intents.list": _listed("/v1/payment_intents", _PI_STATUS),
    "stripe.charges.list": _listed("/v1/charges", _CHARGE_STATUS),
    "stripe.payment_intents.search": _searched("/v1/payment_intents/search", _PI_STATUS),
    "stripe.charges.search": _searched("/v1/charges/search", _CHARGE_STATUS),
}
