"""Payments, Stripe's wire format, under /pay: charges with idempotency keys, retrieved by id,
listed (`created[gte]`, `limit`, `starting_after`, `has_more`) and searched (lagging).

Bodies are form-encoded as Stripe takes them (`metadata[operation_id]=...`); a JSON body is
read too, for the sandbox's own callers. Objects show what Stripe shows (`status`, `livemode`,
`metadata` as given) and nothing Stripe lacks; errors are Stripe's error objects
(`resource_missing`, `idempotency_key_in_use`, `parameter_missing`).
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse

from reconciler.sandbox.faults import Faults, perform_write, requested_faults
from reconciler.sandbox.state import JSONObject, KeyRecord
from reconciler.sandbox.wire import State, read_stripe_body, reads_available

PROVIDER = "pay"

router = APIRouter(prefix="/pay", tags=["payments"], dependencies=[Depends(reads_available)])

# Stripe's search grammar is large; probes only ever need one metadata equality.
_METADATA_QUERY = re.compile(r"""metadata\[(['"])(?P<key>[^'"]+)\1\]:(['"])(?P<value>[^'"]*)\3""")


def _error(status_code: int, type_: str, message: str, code: str | None = None) -> JSONResponse:
    error: JSONObject = {"type": type_, "message": message}
    if code is not None:
        error["code"] = code
    return JSONResponse({"error": error}, status_code)


def _invalid_charge(body: JSONObject) -> str | None:
    amount = body.get("amount")
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
        return "amount must be a positive integer (in the currency's smallest unit)"
    currency = body.get("currency")
    if not isinstance(currency, str) or not currency:
        return "currency is required"
    if not isinstance(body.get("metadata", {}), dict):
        return "metadata must be an object"
    return None


def _missing(what: str) -> JSONResponse:
    return _error(404, "invalid_request_error", f"No such {what}", "resource_missing")


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
    return JSONResponse(seen.response, headers={"Idempotent-Replayed": "true"})


@router.post("/v1/charges")
async def create_charge(
    request: Request,
    state: State,
    faults: Annotated[Faults, Depends(requested_faults)],
    idempotency_key: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    body = await read_stripe_body(request)
    if body is None:
        return _error(400, "invalid_request_error", "the body must be form-encoded parameters")
    problem = _invalid_charge(body.data)
    if problem is not None:
        return _error(400, "invalid_request_error", problem)
    if idempotency_key is not None:
        seen = state.claim_key(idempotency_key, body.request_hash)
        if seen is not None:
            return _answer_seen_key(seen, body.request_hash)

    def build(seq: int, now: float) -> tuple[str, JSONObject]:
        charge_id = "ch_" + uuid.uuid4().hex[:24]
        return charge_id, {
            "id": charge_id,
            "object": "charge",
            "amount": body.data["amount"],
            "currency": body.data["currency"],
            "metadata": body.data.get("metadata", {}),
            "created": int(now),
            "status": "succeeded",
            "paid": True,
            "livemode": False,
        }

    def commit(copies: int) -> JSONResponse:
        charge = state.commit(PROVIDER, body.request_hash, build, copies=copies)
        if copies and idempotency_key is not None:
            state.finish_key(idempotency_key, charge.data)
        return JSONResponse(charge.data)

    try:
        return await perform_write(state, faults, commit)
    finally:
        if idempotency_key is not None:
            state.release_key(idempotency_key)


@router.get("/v1/charges/search")
async def search_charges(state: State, query: str) -> JSONResponse:
    match = _METADATA_QUERY.fullmatch(query.strip())
    if match is None:
        return _error(
            400, "invalid_request_error", "only metadata['<key>']:'<value>' queries are supported"
        )
    key, value = match["key"], match["value"]
    data = [r.data for r in state.search(PROVIDER) if r.data["metadata"].get(key) == value]
    return JSONResponse({"object": "search_result", "url": "/v1/charges/search",
                         "has_more": False, "next_page": None, "data": data})


@router.get("/v1/charges")
async def list_charges(
    state: State,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
    starting_after: str | None = None,
) -> JSONResponse:
    """Newest first, like Stripe; `created[gte]` bounds the window."""
    gte = request.query_params.get("created[gte]")
    records = state.listing(PROVIDER)
    if gte is not None:
        if not gte.isdigit():
            return _error(400, "invalid_request_error", "Invalid integer: created[gte]")
        records = [r for r in records if r.data["created"] >= int(gte)]
    if starting_after is not None:
        ids = [r.ref for r in records]
        if starting_after not in ids:
            return _missing(f"charge: {starting_after!r}")
        records = records[ids.index(starting_after) + 1:]
    page = records[:limit]
    return JSONResponse({"object": "list", "url": "/v1/charges",
                         "has_more": len(records) > limit, "data": [r.data for r in page]})


@router.get("/v1/charges/{charge_id}")
async def get_charge(state: State, charge_id: str) -> JSONResponse:
    record = state.get(PROVIDER, charge_id)
    if record is None:
        return _missing(f"charge: {charge_id!r}")
    return JSONResponse(record.data)


# Not Stripe's: Stripe has no key lookup. The sandbox's own view of a key, for benchmarks.
@router.get("/_sandbox/idempotency_keys/{key}")
async def get_idempotency_key(state: State, key: str) -> JSONResponse:
    seen = state.key_record(key)
    if seen is None:
        return _missing(f"idempotency key: {key!r}")
    if seen.response is None:
        # Neither a receipt nor an absence: the first request may still commit or fail.
        return _in_flight()
    record: JSONObject = {
        "key": seen.key,
        "charge_id": seen.response["id"],
        "request_hash": seen.request_hash,
        "created": int(seen.created_at),
    }
    return JSONResponse(record)
