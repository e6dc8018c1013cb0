"""`@effect`: record, classify and gate any side-effecting call, sync or async.

    @effect(provider="payments", action="charge", key=lambda order: f"charge-{order['id']}")
    def charge(order: dict[str, Any]) -> stripe.Charge:
        return client.v1.charges.create(params=..., options={"idempotency_key": ...})

One call of `charge` is one operation (its id: `operation_id`, else the key):

    first call ── intent ── send ── attempt 1 + outcome ──▶ the call's result or exception
    same id again ── reconcile ── ask the gate ─┬─ granted: send, attempt n+1 ──▶ result
                                                ├─ verified_applied: nothing sent ──▶ Applied
                                                └─ refused: nothing sent ──▶ RetryRefusedError

A repeat may come from a loop that caught the first call's timeout, or from a worker restarted
after a crash between the send and its record: either way only the gate can say whether a
second send is safe, and it says so from the provider's evidence. See docs/effect.md.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any, Generic, ParamSpec, TypeAlias, TypeVar, overload

from reconciler.client.effects import Recorder, default_holder
from reconciler.client.http import ReconcilerClient
from reconciler.core.domain import Carried, Effect, Outcome, Verdict
from reconciler.core.errors import RetryRefusedError, ServiceError
from reconciler.core.hashing import request_hash
from reconciler.core.outcomes import outcome_of, read_result, status_of
from reconciler.core.schemas import AttemptIn, IntentIn, MatchIn, OperationOut, RetryIn
from reconciler.effect.answers import NEXT_STEP, Applied, refs_of, refusal
from reconciler.effect.backends import EmbeddedBackend
from reconciler.infra import tracing

P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R")

Classifier = Callable[[BaseException], Outcome | None]
ReceiptReader = Callable[[Any], MatchIn | None]
#: A value, or a function of the decorated call's arguments that gives it.
Given: TypeAlias = T | Callable[..., T]

log = logging.getLogger(__name__)

_default: Recorder | None = None
_current: contextvars.ContextVar[EffectCall | None] = contextvars.ContextVar(
    "reconciler_effect_call", default=None)


def current_call() -> EffectCall | None:
    """The operation whose send is running now (in this thread or task), if any: how a
    wrapped function reads what it must send, the idempotency key (`.intent.idempotency_key`,
    None when the call declared none) and the operation id to attach where the provider keeps
    metadata (`.operation_id`, e.g. Stripe's `metadata[operation_id]`)."""
    return _current.get()


def carried(key: str | None, tagged: bool) -> frozenset[Carried]:
    """What a call's request carries to the provider that a probe can find its effect by
    (SPEC section 3): the idempotency key when one is sent, the operation id when the call
    attaches it to the provider's metadata."""
    return frozenset(what for what, sent in ((Carried.IDEMPOTENCY_KEY, bool(key)),
                                             (Carried.OPERATION_ID, tagged)) if sent)


@functools.cache  # once per process and (provider, action)
def warn_unverifiable(provider: str, action: str) -> None:
    """The calls of `action` carry nothing a probe can find them by, so no read of the
    provider ever proves one was not applied."""
    log.warning(
        "%s.%s sends the provider neither an idempotency key nor the operation id (declare "
        "them: key= and tagged=, or ToolEffects keyed/tagged): no probe can verify its "
        "effects, and a call whose answer is lost is never retried; it goes to a human",
        provider, action)


def use_backend(backend: Recorder | None) -> None:
    """Set the backend of every `@effect` that names none (None: back to the default, a
    `ReconcilerClient` on $RECONCILER_URL)."""
    global _default
    _default = backend


def default_backend() -> Recorder:
    global _default
    if _default is None:
        _default = ReconcilerClient()
    return _default


class EffectCall:
    """One operation: its intent recorded on entry, then each `run` one gated attempt."""

    def __init__(self, site: EffectSite[Any], intent: IntentIn) -> None:
        self.site = site
        self.intent = intent
        # Client spans, and the trace context sent to a sidecar, when tracing is configured.
        self.backend = tracing.traced(site.backend or default_backend())
        self.holder = site.holder or default_holder()
        self.attempts = 0
        self.resumed = False
        self.standing: OperationOut | None = None
        #: The outcome of this call's latest attempt, once it has made one.
        self.last_outcome: Outcome | None = None
        #: The token of the retry grant the next send goes under (None: no grant), presented
        #: with its report, or the attempt is recorded as sent without one (SPEC rule 6).
        self.grant: str | None = None

    @property
    def operation_id(self) -> str:
        return self.intent.operation_id

    def begin(self) -> None:
        recorded = self.backend.record_intent(self.intent)
        self.standing = recorded.value
        self.attempts = recorded.value.attempts_made
        self.resumed = not recorded.created

    def gate(self) -> Applied | None:
        """Before a send: None to go ahead; Applied when it is done already; raises when the
        gate refuses. A first send of a new intent needs no grant."""
        self.grant = None
        if self.attempts == 0 and not self.resumed:
            return None
        try:
            self.standing = self.backend.reconcile(self.operation_id)
        except ServiceError as exc:  # 409: another sweeper is probing it; the gate still knows
            if exc.status != 409:
                raise
        answer = self.backend.ask_retry(self.operation_id, RetryIn(
            idempotency_key=self.intent.idempotency_key, request_hash=self.intent.request_hash,
            holder=self.holder))
        if answer.allowed:
            if answer.lease_expires_at is not None and answer.lease_expires_at <= _now():
                raise RetryRefusedError(self.operation_id, answer.verdict.value,
                                        "the retry lease expired before dispatch; ask again",
                                        answer.findings)
            self.grant = answer.grant
            return None
        if answer.verdict is Verdict.VERIFIED_APPLIED:
            refs = refs_of(self.standing) if self.standing else []
            return Applied(self.operation_id, refs[0] if refs else None)
        raise refusal(self.operation_id, answer)

    def attempt(self, at: datetime, result: object = None,
                error: BaseException | None = None) -> AttemptIn:
        """The attempt a send made, read from what it returned or raised."""
        self.attempts += 1
        status: int | None = None
        receipt: MatchIn | None = None
        if error is None:
            reading = read_result(result)
            status, receipt = reading.status, reading.receipt
            if self.site.receipt is not None:
                receipt = _safely(self.site.receipt, result)
            outcome = Outcome.RESPONSE
        else:
            outcome = (self.site.classify(error) if self.site.classify else None
                       ) or outcome_of(error) or Outcome.CONNECTION_ERROR
            status = status_of(error) if outcome is Outcome.CONNECTION_ERROR else None
            if status is not None:  # an SDK's error for a 4xx/5xx: the provider answered
                outcome = Outcome.RESPONSE
        self.last_outcome = outcome
        return AttemptIn(attempt=self.attempts, idempotency_key=self.intent.idempotency_key,
                         request_hash=self.intent.request_hash, at=at, outcome=outcome,
                         status=status, receipt=receipt, holder=self.holder, grant=self.grant)

    def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T | Applied:
        """Send once through `fn` (asking the gate first on a repeat); record what happened."""
        done = self.gate()
        if done is not None:
            return done
        at = _now()
        token = _current.set(self)
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            self.backend.record_attempt(self.operation_id, self.attempt(at, error=exc))
            raise
        finally:
            _current.reset(token)
        self.backend.record_attempt(self.operation_id, self.attempt(at, result))
        return result

    async def arun(self, fn: Callable[P, Awaitable[T]], /, *args: P.args,
                   **kwargs: P.kwargs) -> T | Applied:
        """`run` for a coroutine function; the bookkeeping runs on a worker thread."""
        done = await asyncio.to_thread(self.gate)
        if done is not None:
            return done
        at = _now()
        token = _current.set(self)
        try:
            result = await fn(*args, **kwargs)
        except (Exception, asyncio.CancelledError) as exc:
            # Cancelled while waiting for the provider is a timeout: it may have been sent.
            attempt = self.attempt(at, error=exc if isinstance(exc, Exception) else
                                   TimeoutError("cancelled while waiting"))
            await asyncio.shield(asyncio.to_thread(self.backend.record_attempt,
                                                   self.operation_id, attempt))
            raise
        finally:
            _current.reset(token)
        await asyncio.to_thread(self.backend.record_attempt, self.operation_id,
                                self.attempt(at, result))
        return result


def _safely(read: ReceiptReader, result: object) -> MatchIn | None:
    try:
        return read(result)
    except Exception:  # a reader that fails must not cost the attempt its record
        return None


def _now() -> datetime:
    return datetime.now(UTC)


def _value(given: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return given(*args, **kwargs) if callable(given) else given


class EffectSite(Generic[R]):
    """A configured effect: a decorator for a function, or a context manager for one call."""

    def __init__(self, *, provider: str, action: str, effect: Effect | str,
                 operation_id: Given[str] | None, key: Given[str | None],
                 params: Given[Any], backend: Recorder | None,
                 classify: Classifier | None, receipt: ReceiptReader | None,
                 replay: Callable[[Applied], R] | None, holder: str | None,
                 run_id: Given[str | None], tool_call_id: Given[str | None],
                 correlation: Given[Mapping[str, str]] | None, tagged: bool = False) -> None:
        self.provider, self.action, self.effect = provider, action, Effect(effect)
        self.operation_id, self.key, self.params = operation_id, key, params
        self.tagged = tagged
        self.backend, self.classify, self.receipt = backend, classify, receipt
        self.replay, self.holder = replay, holder
        self.run_id, self.tool_call_id, self.correlation = run_id, tool_call_id, correlation

    def intent(self, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
               fn: Callable[..., Any] | None = None) -> IntentIn:
        """The intent of one call: its id, key and hash from the configured values (or the
        call's arguments); by default the hash covers every argument of the call. It says
        what the request carries (`carried`); a call that carries nothing a probe can find is
        warned about once (`warn_unverifiable`)."""
        kw = kwargs or {}
        key = _value(self.key, args, kw)
        operation_id = _value(self.operation_id, args, kw) if self.operation_id else key
        if not operation_id:
            raise ValueError(f"@effect({self.provider}.{self.action}): give an operation_id "
                             "or a key; a repeat call is recognised by it")
        if self.params is not None:
            params = _value(self.params, args, kw)
        elif fn is not None:
            bound = inspect.signature(fn).bind(*args, **kw)
            bound.apply_defaults()
            params = dict(bound.arguments)
        else:
            raise ValueError("effect(...) as a context manager needs params=, the body to hash")
        carries = carried(key, self.tagged)
        if not carries:
            warn_unverifiable(self.provider, self.action)
        return IntentIn(operation_id=operation_id, request_hash=request_hash(params),
                        idempotency_key=key, provider=self.provider, action=self.action,
                        effect=self.effect, run_id=_value(self.run_id, args, kw),
                        tool_call_id=_value(self.tool_call_id, args, kw),
                        correlation=dict(_value(self.correlation, args, kw) or {}),
                        carries=sorted(carries))

    def _replayed(self, result: Any) -> Any:
        return self.replay(result) if isinstance(result, Applied) and self.replay else result

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, T]]
                 ) -> Callable[P, Coroutine[Any, Any, T | R]]: ...

    @overload
    def __call__(self, fn: Callable[P, T]) -> Callable[P, T | R]: ...

    def __call__(self, fn: Callable[P, Any]) -> Callable[P, Any]:
        if self.effect is Effect.READ_ONLY:
            return fn  # a read is repeated freely: nothing to record, nothing to gate

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def run_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                call = EffectCall(self, self.intent(args, kwargs, fn))
                with tracing.traced_call(call):  # the GenAI tool span, when tracing is on
                    await asyncio.to_thread(call.begin)
                    return self._replayed(await call.arun(fn, *args, **kwargs))
            return run_async

        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> Any:
            call = EffectCall(self, self.intent(args, kwargs, fn))
            with tracing.traced_call(call):  # the GenAI tool span, when tracing is on
                call.begin()
                return self._replayed(call.run(fn, *args, **kwargs))
        return run

    def __enter__(self) -> EffectCall:
        call = EffectCall(self, self.intent())
        call.begin()
        return call

    def __exit__(self, *exc: object) -> None:
        return None

    async def __aenter__(self) -> EffectCall:
        call = EffectCall(self, self.intent())
        await asyncio.to_thread(call.begin)
        return call

    async def __aexit__(self, *exc: object) -> None:
        return None


@overload
def effect(*, provider: str, action: str, effect: Effect | str = ...,
           operation_id: Given[str] | None = ..., key: Given[str | None] = ...,
           params: Given[Any] = ..., backend: Recorder | None = ...,
           classify: Classifier | None = ..., receipt: ReceiptReader | None = ...,
           replay: None = ..., holder: str | None = ..., run_id: Given[str | None] = ...,
           tool_call_id: Given[str | None] = ...,
           correlation: Given[Mapping[str, str]] | None = ...,
           tagged: bool = ...) -> EffectSite[Applied]: ...


@overload
def effect(*, provider: str, action: str, effect: Effect | str = ...,
           operation_id: Given[str] | None = ..., key: Given[str | None] = ...,
           params: Given[Any] = ..., backend: Recorder | None = ...,
           classify: Classifier | None = ..., receipt: ReceiptReader | None = ...,
           replay: Callable[[Applied], R], holder: str | None = ...,
           run_id: Given[str | None] = ..., tool_call_id: Given[str | None] = ...,
           correlation: Given[Mapping[str, str]] | None = ...,
           tagged: bool = ...) -> EffectSite[R]: ...


def effect(*, provider: str, action: str, effect: Effect | str = Effect.NON_IDEMPOTENT,
           operation_id: Given[str] | None = None, key: Given[str | None] = None,
           params: Given[Any] = None, backend: Recorder | None = None,
           classify: Classifier | None = None, receipt: ReceiptReader | None = None,
           replay: Callable[[Applied], Any] | None = None, holder: str | None = None,
           run_id: Given[str | None] = None, tool_call_id: Given[str | None] = None,
           correlation: Given[Mapping[str, str]] | None = None,
           tagged: bool = False) -> EffectSite[Any]:
    """Track a side effect; see the module docstring and docs/effect.md.

    `operation_id`, `key`, `params`, `run_id`, `tool_call_id` and `correlation` are values, or
    functions of the decorated call's arguments. `key` is the idempotency key the call sends
    the provider (and the operation id when none is given); give none when it sends none: a
    key recorded but not sent would let a probe's blind zero open a retry (SPEC section 3). A
    retry grant needs one. `tagged`: the call attaches the operation id
    (`current_call().operation_id`) where the provider keeps metadata, so a probe can find
    its effect by it. `params` is what the request hash covers (default: every argument).
    `classify` maps an exception the built-in rules do not know to an outcome; `receipt` reads
    the provider's reference from a result; `replay` turns an `Applied` answer into the
    function's own return type (e.g. a lookup of the charge by `provider_ref`).
    """
    return EffectSite(provider=provider, action=action, effect=effect,
                      operation_id=operation_id, key=key, params=params, backend=backend,
                      classify=classify, receipt=receipt, replay=replay, holder=holder,
                      run_id=run_id, tool_call_id=tool_call_id, correlation=correlation,
                      tagged=tagged)


__all__ = [
    "NEXT_STEP",
    "Applied",
    "EffectCall",
    "EffectSite",
    "EmbeddedBackend",
    "Recorder",
    "effect",
    "refs_of",
    "refusal",
    "use_backend",
]
