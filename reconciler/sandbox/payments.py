"""Payments, Stripe's wire format, under /pay: PaymentIntents and Charges with idempotency keys,
retrieved by id, listed (`created[gte]`, `limit`, `starting_after`, `has_more`) and searched
(lagging, like Stripe's index).

Bodies are form-encoded as Stripe takes them (`metadata[operation_id]=...`); a JSON body is
read too, for the sandbox's own callers. Objects show what Stripe shows (`status`, `livemode`,
`metadata` as given) and nothing Stripe lacks; errors are Stripe's error objects
(`resource_missing`, `parameter_missing`, `idempotency_key_in_use`, `card_declined`).
Idempotency keys are kept `key_retention_s` (24 hours, like Stripe), then forgotten.

Test payment methods, as Stripe's test mode names them: `pm_card_visa` succeeds,
`pm_card_chargeDeclined` is declined (402, and the PaymentIntent stays
`requires_payment_method`).
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse

from reconciler.sandbox.credentials import stripe_key
from reconciler.sandbox.faults import Faults, perform_write, requested_faults
from reconciler.sandbox.shapes import stripe_error
from reconciler.sandbox.state import JSONObject, KeyRecord
from reconciler.sandbox.stripe_search import SearchQueryError, parse
from reconciler.sandbox.wire import State, read_stripe_body, reads_available

PROVIDER = "pay"

router = APIRouter(prefix="/pay", tags=["payments"],
                   dependencies=[Depends(stripe_key), Depends(reads_available)])

_DECLINED = "pm_card_chargeDeclined"


@dataclass(frozen=True, slots=True)
class _Kind:
    """One Stripe object type: its name, id prefix and collection path."""

    name: str
    prefix: str
    path: str


    @property
    def resource(self) -> str:
        return self.path.removeprefix("/v1/")


CHARGE = _Kind("charge", "ch_", "/v1/charges")
PAYMENT_INTENT = _Kind("payment_intent", "pi_", "/v1/payment_intents")


def _error(status_code: int, type_: str, message: str, code: str | None = None,
           **extra: Any) -> JSONResponse:
    if code is not None:
        extra["code"] = code
    return stripe_error(status_code, message, type_, **extra).response()


def _invalid(body: JSONObject) -> JSONResponse | None:
    for name in ("amount", "currency"):
        if name not in body:
            return _error(400, "invalid_request_error", f"Missing required param: {name}.",
                          "parameter_missing", param=name)
    amount = body["amount"]
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
        return _error(400, "invalid_request_error", "Invalid positive integer",
                      "parameter_invalid_integer", param="amount")
    if not isinstance(body["currency"], str) or not body["currency"]:
        return _error(400, "invalid_request_error", "Invalid currency", "parameter_invalid_empty",
                      param="currency")
    if not isinstance(body.get("metadata", {}), dict):
        return _error(400, "invalid_request_error", "Invalid object", "parameter_invalid_object",
                      param="metadata")
    return None


def _api_error(status: int, message: str) -> JSONResponse:
    """Stripe's answer when its side failed: an `api_error` object."""
    return _error(status, "api_error", message)


def _missing(kind: str, ref: str) -> JSONResponse:
    return _error(404, "invalid_request_error", f"No such {kind}: '{ref}'", "resource_missing",
                  param="id")


def _in_flight() -> JSONResponse:
    return _error(
        409,
        "idempotency_error",
        "There is currently another in-progress request using this Stripe Idempotency Key. "
        "Please try again later.",
        "idempotency_key_in_use",
    )


def _answer_seen_key(seen: KeyRecord, request_hash: str) -> JSONResponse:
    if seen.request_hash != request_hash:
        return _error(
            400,
            "idempotency_error",
            "Keys for idempotent requests can only be used with the same parameters they were "
            "first used with.",
        )
    if seen.response is None:
        return _in_flight()
    return JSONResponse(seen.response, seen.status, headers={"Idempotent-Replayed": "true"})


def _status(kind: _Kind, body: JSONObject) -> str:
    if kind is CHARGE:
        return "failed" if body.get("source") == _DECLINED else "succeeded"
    method, confirm = body.get("payment_method"), str(body.get("confirm", "")).lower() == "true"
    if not method:
        return "requires_payment_method"
    if not confirm:
        return "requires_confirmation"
    return "requires_payment_method" if method == _DECLINED else "succeeded"


def _build(kind: _Kind, body: JSONObject, status: str, now: float) -> tuple[str, JSONObject]:
    ref = kind.prefix + uuid.uuid4().hex[:24]
    data: JSONObject = {
        "id": ref,
        "object": kind.name,
        "amount": body["amount"],
        "currency": body["currency"],
        "metadata": body.get("metadata", {}),
        "created": int(now),
        "status": status,
        "livemode": False,
    }
    if kind is CHARGE:
        data["paid"] = status == "succeeded"
    else:
        data["payment_method"] = body.get("payment_method")
        data["latest_charge"] = None if status != "succeeded" else "ch_" + uuid.uuid4().hex[:24]
    return ref, data


async def _create(kind: _Kind, request: Request, state: State, faults: Faults,
                  idempotency_key: str | None) -> JSONResponse:
    body = await read_stripe_body(request)
    if body is None:
        return _error(400, "invalid_request_error", "Invalid request body: not form-encoded "
                      "parameters")
    problem = _invalid(body.data)
    if problem is not None:
        return problem  # a request that fails validation saves no idempotent result
    if idempotency_key is not None:
        seen = state.claim_key(idempotency_key, body.request_hash)
        if seen is not None:
            return _answer_seen_key(seen, body.request_hash)
    status = _status(kind, body.data)

    def commit(copies: int) -> JSONResponse:
        made = state.commit(PROVIDER, body.request_hash,
                            lambda seq, now: _build(kind, body.data, status, now),
                            copies=copies, scope=kind.name)
        answer: JSONObject = made.data
        code = 200
        if _DECLINED in (body.data.get("source"), body.data.get("payment_method")):
            code, answer = 402, {"error": {
                "type": "card_error", "code": "card_declined", "decline_code": "generic_decline",
                "message": "Your card was declined.", kind.name: made.data}}
        if copies and idempotency_key is not None:
            # Stripe saves the endpoint's answer, an error included, and replays it.
            state.finish_key(idempotency_key, answer, code)
        return JSONResponse(answer, code)

    def save(failed: JSONResponse) -> None:
        # Stripe saves the answer of an endpoint that began executing, a 500 included.
        if idempotency_key is not None:
            state.finish_key(idempotency_key, json.loads(bytes(failed.body)), failed.status_code)

    try:
        return await perform_write(state, faults, commit, _api_error, save)
    finally:
        if idempotency_key is not None:
            state.release_key(idempotency_key)


def _search(kind: _Kind, state: State, query: str, limit: int,
            page: str | None) -> JSONResponse:
    """Stripe's search: lagging (`search_lag_s`), newest first, `next_page` an opaque token
    (https://docs.stripe.com/api/pagination/search)."""
    try:
        selects = parse(query, kind.resource)
    except SearchQueryError as refused:
        return _error(400, "invalid_request_error", str(refused), param="query")
    start = _page_offset(page)
    if start is None:
        return _error(400, "invalid_request_error", "Invalid page token.", param="page")
    data = [r.data for r in state.search(PROVIDER) if r.scope == kind.name and selects(r.data)]
    more = start + limit < len(data)
    return JSONResponse({"object": "search_result", "url": kind.path + "/search",
                         "has_more": more, "data": data[start:start + limit],
                         "next_page": _page_token(start + limit) if more else None})


def _page_token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode()


def _page_offset(token: str | None) -> int | None:
    if token is None:
        return 0
    try:
        kind, _, number = base64.urlsafe_b64decode(token).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return int(number) if kind == "offset" and number.isdigit() else None


def _list(kind: _Kind, state: State, request: Request, limit: int,
          starting_after: str | None) -> JSONResponse:
    """Newest first, like Stripe; `created[gte]` (and the other bounds) narrow the window."""
    records = [r for r in state.listing(PROVIDER) if r.scope == kind.name]
    for op, keep in (("gte", int.__ge__), ("gt", int.__gt__), ("lte", int.__le__),
                     ("lt", int.__lt__)):
        bound = request.query_params.get(f"created[{op}]")
        if bound is None:
            continue
        if not bound.isdigit():
            return _error(400, "invalid_request_error", "Invalid integer",
                          "parameter_invalid_integer", param=f"created[{op}]")
        records = [r for r in records if keep(r.data["created"], int(bound))]
    if starting_after is not None:
        ids = [r.ref for r in records]
        if starting_after not in ids:
            return _missing(kind.name, starting_after)
        records = records[ids.index(starting_after) + 1:]
    return JSONResponse({"object": "list", "url": kind.path, "has_more": len(records) > limit,
                         "data": [r.data for r in records[:limit]]})


def _get(kind: _Kind, state: State, ref: str) -> JSONResponse:
    record = state.get(PROVIDER, ref)
    if record is None or record.scope != kind.name:
        return _missing(kind.name, ref)
    return JSONResponse(record.data)


Limit = Annotated[int, Query(ge=1, le=100)]
Key = Annotated[str | None, Header()]
Faulty = Annotated[Faults, Depends(requested_faults)]


def _routes(kind: _Kind) -> None:
    # FastAPI reads these signatures' (string) annotations in this module's namespace.
    async def create(request: Request, state: State, faults: Faulty,
                     idempotency_key: Key = None) -> JSONResponse:
        return await _create(kind, request, state, faults, idempotency_key)

    async def search(state: State, query: str, limit: Limit = 10,
                     page: str | None = None) -> JSONResponse:
        return _search(kind, state, query, limit, page)

    async def listing(state: State, request: Request, limit: Limit = 10,
                      starting_after: str | None = None) -> JSONResponse:
        return _list(kind, state, request, limit, starting_after)

    async def retrieve(state: State, ref: str) -> JSONResponse:
        return _get(kind, state, ref)

    router.add_api_route(kind.path, create, methods=["POST"], name=f"create_{kind.name}")
    router.add_api_route(kind.path + "/search", search, methods=["GET"],
                         name=f"search_{kind.name}")
    router.add_api_route(kind.path, listing, methods=["GET"], name=f"list_{kind.name}")
    router.add_api_route(kind.path + "/{ref}", retrieve, methods=["GET"],
                         name=f"get_{kind.name}")


_routes(PAYMENT_INTENT)
_routes(CHARGE)


@router.get("/v1/account")
async def account() -> JSONObject:
    """The account the key reads: one test-mode account."""
    return {"id": "acct_sandbox", "object": "account", "type": "standard"}


@router.get("/v1/balance")
async def balance() -> JSONObject:
    return {"object": "balance", "livemode": False, "available": [], "pending": []}


# Not Stripe's: Stripe has no key lookup. The sandbox's own view of a key, for benchmarks.
@router.get("/_sandbox/idempotency_keys/{key}")
async def get_idempotency_key(state: State, key: str) -> JSONResponse:
    seen = state.key_record(key)
    if seen is None:
        return _missing("idempotency key", key)
    if seen.response is None:
        # Neither a receipt nor an absence: the first request may still commit or fail.
        return _in_flight()
    record: JSONObject = {
        "key": seen.key,
        "charge_id": seen.response.get("id") if seen.status == 200 else None,
        "request_hash": seen.request_hash,
        "created": int(seen.created_at),
    }
    return JSONResponse(record)
