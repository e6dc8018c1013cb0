"""The /v1/operations routes (SPEC section 6): record facts, read verdicts, gate retries.

The hot routes (recording an intent or an attempt, the retry check, reading an operation) are
coroutines that make their ledger call through `Wiring.call`: on SQLite in a greenlet on the
event loop, its writes handed to the group committer's thread, so a request costs no hop to a
worker thread (FastAPI runs a plain `def` route, and validates its response, on its thread
pool: fastapi/routing.py, run_endpoint_function and serialize_response). Being of the shapes
`HotRoute` plans for (service.hot_routes), they are also answered without FastAPI's
per-request dependency solving, their bodies parsed and validated in one pass. The others stay
plain `def`s on that thread pool, so a reconcile that waits on probes, or a list that reads a page,
holds a worker thread, never the event loop. Operation ids may contain
`/`, hence the `:path` converters; each route ends in its own literal segment, and the GET
route's converter leaves those to them, so no two routes claim one path.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Annotated, TypeVar

from fastapi import APIRouter, Path, Query, Request, Response
from starlette.convertors import Convertor, register_url_convertor

from reconciler.core.domain import (
    Approval,
    Attempt,
    Compensation,
    Intent,
    Match,
    Observation,
    Receipt,
    Resolution,
    Verdict,
)
from reconciler.core.errors import IntentConflictError, RetryNotGrantedError
from reconciler.core.schemas import (
    IDENT_PATTERN,
    ApprovalIn,
    AttemptIn,
    CompensationIn,
    EvidenceIn,
    IntentIn,
    MatchIn,
    ObservationIn,
    OperationListOut,
    OperationOut,
    OperationQueryIn,
    ResolutionIn,
    RetryIn,
    RetryOut,
)
from reconciler.infra.metrics import ATTEMPTS, INTENTS, RETRY_DECISIONS
from reconciler.ledger import Recorded
from reconciler.ledger.gate import GateResult, RetryRequest
from reconciler.service.auth import EvidenceGiver, Operator, Reader, Worker
from reconciler.service.hot_routes import HotRoute
from reconciler.service.problems import (
    RECONCILE_IN_PROGRESS,
    RETRY_IN_PROGRESS,
    RETRY_MISMATCH,
    RETRY_NOT_GRANTED,
    VALIDATION,
    ProblemError,
    ProblemType,
    problem_responses,
)
from reconciler.service.views import retry_out, summary_out
from reconciler.service.wiring import Wired, Wiring

Fact = TypeVar("Fact")

#: The routes under an operation: an id ending in `/<action>` could not be read back.
ACTIONS = ("attempts", "evidence", "retry", "reconcile", "resolution", "approval",
           "compensation")


class _ReadableId(Convertor[str]):
    """The id in GET /v1/operations/{id}: any path but one ending in an action, so that
    `/v1/operations/x/retry` belongs only to the retry route (and its 405 lists only POST)."""

    regex = rf"(?!.*/(?:{'|'.join(ACTIONS)})$).+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("readable_id", _ReadableId())

router = APIRouter(prefix="/v1/operations", tags=["operations"], route_class=HotRoute)

OperationId = Annotated[str, Path(min_length=1, max_length=200, pattern=IDENT_PATTERN)]

def _match(match: MatchIn | None) -> Match | None:
    return Match(match.provider_ref, match.request_hash) if match else None


@router.post("", status_code=201, response_model=OperationOut,
             responses={200: {"model": OperationOut, "description": "identical repeat"},
                        **problem_responses(409)})
async def record_intent(body: IntentIn, wiring: Wired, response: Response,
                        caller: Worker) -> OperationOut:
    """Record an intent before dispatch (the time is the server's)."""
    if body.operation_id.rpartition("/")[2] in ACTIONS and "/" in body.operation_id:
        raise ProblemError(VALIDATION, "an operation id cannot end in /" + "|".join(ACTIONS),
                           extensions={"errors": [{"loc": ["body", "operation_id"],
                                                   "msg": "ends in an action name",
                                                   "type": "ambiguous_id"}]})
    intent = Intent(body.operation_id, body.request_hash, body.idempotency_key, body.provider,
                    body.action, body.effect, wiring.ledger.clock(), body.run_id, body.tool_call_id,
                    dict(body.correlation),
                    None if body.carries is None else frozenset(body.carries))
    try:
        created, out = await wiring.call(_recorded, wiring, wiring.ledger.record_intent, intent)
    except IntentConflictError:
        INTENTS.labels(result="conflict").inc()
        raise
    INTENTS.labels(result="created" if created else "repeat").inc()
    if created:
        wiring.providers.note_intent(intent.provider)
    else:
        response.status_code = 200
    return out


def _recorded(wiring: Wiring, record: Callable[[Fact], Recorded], fact: Fact
              ) -> tuple[bool, OperationOut]:
    """`record(fact)`, and the operation as a client gets it (its facts may be read then)."""
    recorded = record(fact)
    return recorded.created, wiring.operation_out(recorded.judgement)


def _judged(wiring: Wiring, operation_id: str) -> OperationOut:
    return wiring.operation_out(wiring.ledger.judge(operation_id))


@router.get("", response_model=OperationListOut)
def list_operations(wiring: Wired, query: Annotated[OperationQueryIn, Query()],
                    request: Request, caller: Reader) -> OperationListOut:
    """Operations in id order, filtered by cached verdict, provider and whether a human must
    act (`escalated`); each item says why a human should look at it."""
    params = request.query_params
    repeated = sorted({name for name in params if len(params.getlist(name)) > 1})
    if repeated:
        # FastAPI would silently keep the last value: `after=a&after=b` is a caller's bug.
        raise ProblemError(VALIDATION, f"given more than once: {', '.join(repeated)}",
                           extensions={"errors": [
                               {"loc": ["query", name], "msg": "given more than once",
                                "type": "repeated"} for name in repeated]})
    page = wiring.store.list_operations(
        verdict=query.verdict.value if query.verdict else None, escalated=query.escalated,
        provider=query.provider, after=query.after, limit=query.limit + 1)
    items = [summary_out(s) for s in page[:query.limit]]
    more = len(page) > query.limit
    return OperationListOut(items=items, next_cursor=items[-1].operation_id if more else None)


@router.get("/{operation_id:readable_id}", response_model=OperationOut,
            responses=problem_responses(404))
async def get_operation(operation_id: OperationId, wiring: Wired,
                        caller: Reader) -> OperationOut:
    """Intent, attempts, evidence timeline, verdict, findings and next action, decided now."""
    return await wiring.call(_judged, wiring, operation_id)


@router.post("/{operation_id:path}/attempts", status_code=201, response_model=OperationOut,
             responses={200: {"model": OperationOut, "description": "identical repeat"},
                        **problem_responses(404, 409)})
async def record_attempt(operation_id: OperationId, body: AttemptIn, wiring: Wired,
                         response: Response, caller: Worker) -> OperationOut:
    """Record one dispatch and what the caller saw of it. Two phases: `dispatching` before the
    first byte leaves, then the same attempt with its outcome. Opening attempt n>=2 presents
    its retry grant's `holder` and `grant` token, and is refused with 409 `retry-not-granted`
    (do not send) without the live grant: none asked, expired, another's, or its verdict
    changed since. An attempt n>=2 reported whole after it was sent is recorded all the same
    (`ungranted` unless sent under the grant). An identical repeat is 200. Any other report
    of a recorded attempt (a late answer after a timeout, two reports racing) is kept beside
    it, 201: never refused, since a 2xx in any report is a success claim (SPEC section 4)."""
    attempt = Attempt(operation_id, body.attempt, body.idempotency_key, body.request_hash,
                      wiring.ledger.time_of(body.at, ahead_ok=True), body.outcome, body.status,
                      _match(body.receipt))
    # Over HTTP a token is always checked: none presented is a wrong one, never the holder
    # name alone (which a caller chooses, and another may guess).
    record = functools.partial(wiring.gate.record_attempt, holder=body.holder,
                               token=body.grant or "", stamped=body.at is None)
    try:
        created, out = await wiring.call(_recorded, wiring, record, attempt)
    except RetryNotGrantedError as exc:
        raise ProblemError(RETRY_NOT_GRANTED, str(exc), operation_id=operation_id) from None
    if created:
        ATTEMPTS.labels(outcome=attempt.outcome.value).inc()
    else:
        response.status_code = 200
    return out


@router.post("/{operation_id:path}/evidence", status_code=201, response_model=OperationOut,
             responses=problem_responses(404))
def record_evidence(operation_id: OperationId, body: EvidenceIn, wiring: Wired,
                    caller: EvidenceGiver) -> OperationOut:
    """Record a receipt or an observation made outside the sidecar's own probes (provider
    evidence: the `evidence` role)."""
    at = wiring.ledger.time_of(body.at)
    evidence = (Observation(operation_id, at, body.probe, body.authority,
                            tuple(Match(m.provider_ref, m.request_hash) for m in body.matches),
                            body.error)
                if isinstance(body, ObservationIn) else
                Receipt(operation_id, at, body.provider_ref, body.request_hash, body.source))
    return wiring.operation_out(wiring.ledger.record_evidence(evidence))


@router.post("/{operation_id:path}/retry", response_model=RetryOut,
             responses=problem_responses(404, 409, 422))
async def ask_retry(operation_id: OperationId, body: RetryIn, wiring: Wired,
                    caller: Worker) -> RetryOut:
    """Ask before a retry. 200 with `allowed` true (you hold the lease) or false; 409 while
    another caller holds the lease; 422 when the key or hash is not the intent's."""
    holder = body.holder or f"holder-{uuid.uuid4().hex}"
    answer = await wiring.call(wiring.gate.ask, RetryRequest(
        operation_id, body.idempotency_key, body.request_hash, holder))
    RETRY_DECISIONS.labels(result=answer.result.value).inc()
    out = retry_out(answer, holder)
    kind = {GateResult.IN_PROGRESS: RETRY_IN_PROGRESS,
            GateResult.MISMATCH: RETRY_MISMATCH}.get(answer.result)
    if kind is not None:
        raise ProblemError(kind, answer.reason, operation_id=operation_id,
                           extensions=out.model_dump(mode="json"))
    return out


@router.post("/{operation_id:path}/reconcile", response_model=OperationOut,
             responses=problem_responses(404, 409))
def reconcile(operation_id: OperationId, wiring: Wired, caller: Worker) -> OperationOut:
    """Run the operation's probes now (each bounded by the probe timeout) and decide again."""
    judgement = wiring.sweeper.reconcile(operation_id)
    if judgement is None:
        wiring.store.facts(operation_id)  # an unknown operation has no lease to lose: 404 it
        raise ProblemError(RECONCILE_IN_PROGRESS, "another sweeper is probing this operation; "
                           "read it again shortly", operation_id=operation_id)
    return wiring.operation_out(judgement)


@router.post("/{operation_id:path}/resolution", status_code=201, response_model=OperationOut,
             responses=problem_responses(404))
def record_resolution(operation_id: OperationId, body: ResolutionIn, wiring: Wired,
                      caller: Operator) -> OperationOut:
    """A human's decision; it stands until newer evidence arrives. The actor recorded is the
    credential's name (`actor` in the body is ignored when a credential is used)."""
    return wiring.operation_out(wiring.ledger.record_evidence(Resolution(
        operation_id, wiring.ledger.clock(), body.verdict, caller.actor(body.actor),
        body.note)))


@router.post("/{operation_id:path}/approval", status_code=201, response_model=OperationOut,
             responses=problem_responses(404))
def record_approval(operation_id: OperationId, body: ApprovalIn, wiring: Wired,
                    caller: Operator) -> OperationOut:
    """A human approves the next retry of an action that cannot be compensated. The actor
    recorded is the credential's name (`actor` in the body is ignored when a credential is
    used)."""
    return wiring.operation_out(wiring.ledger.record_evidence(Approval(
        operation_id, wiring.ledger.clock(), caller.actor(body.actor), body.note)))


#: A compensation is recorded only against a duplicate's effects
#: (reconciler.core.domain.Compensation).
NOT_A_DUPLICATE = ProblemType("not-a-duplicate", 409, "Only a duplicate effect is compensated")


@router.post("/{operation_id:path}/compensation", status_code=201, response_model=OperationOut,
             responses=problem_responses(404, 409))
def record_compensation(operation_id: OperationId, body: CompensationIn, wiring: Wired,
                        caller: Operator) -> OperationOut:
    """A human records that a duplicate's extra effect was compensated, with the
    compensation's reference at the provider: the verdict stays duplicate_effect, the next
    action becomes `compensated` and the operation leaves the human queue (until a further
    effect appears). 409 when the operation is not a duplicate_effect. The actor recorded is
    the credential's name."""
    verdict = wiring.ledger.judge(operation_id).decision.verdict
    if verdict is not Verdict.DUPLICATE_EFFECT:
        raise ProblemError(NOT_A_DUPLICATE, f"the verdict is {verdict.value}: there is no "
                           "extra effect to compensate", operation_id=operation_id)
    return wiring.operation_out(wiring.ledger.record_evidence(Compensation(
        operation_id, wiring.ledger.clock(), caller.actor(body.actor), body.note,
        body.reference)))
