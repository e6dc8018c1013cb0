"""Payments, Stripe-like, under /pay: charges with idempotency keys and a key lookup."""

from __future__ import annotations

import re
import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse

from reconciler.sandbox.faults import Faults, perform_write, requested_faults
from reconciler.sandbox.state import JSONObject, KeyRecord
from reconciler.sandbox.wire import State, read_json_body, reads_available

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
        "A request with this idempotency key is still being processed.",
        "request_in_flight",
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
    body = await read_json_body(request)
    if body is None:
        return _error(400, "invalid_request_error", "the body must be a JSON object")
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
            "request_hash": body.request_hash,
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
    return JSONResponse({"object": "search_result", "data": data})


@router.get("/v1/charges/{charge_id}")
async def get_charge(state: State, charge_id: str) -> JSONResponse:
    record = state.get(PROVIDER, charge_id)
    if record is None:
        return _missing(f"charge: {charge_id!r}")
    return JSONResponse(record.data)


@router.get("/v1/idempotency_keys/{key}")
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
