"""Temporal: activities whose side effect goes through the gate, so that Temporal's retry of an
activity asks the provider (through the reconciler) before it sends again.

    @activity.defn
    @reconciled_activity(provider="stripe", action="payment_intents.create", tagged=True)
    async def charge(order: str, amount: int) -> dict[str, Any]: ...

or, for a whole worker, by activity type:

    Worker(client, task_queue="payments", activities=[charge],
           interceptors=[ReconciledActivities({"charge": ActivityEffect("stripe", tagged=True)})])

Temporal retries a failed activity under the same workflow id and activity id, attempt after
attempt (https://docs.temporal.io/encyclopedia/retry-policies); that identity is the operation
(`activity_operation`), so attempt 2 and later are repeats the gate answers:

    attempt 1 ── intent ── send ─┬─ answered ─────────────────────────▶ the result
                                 └─ failed ── reconcile ─┬─ verified_not_applied: the error
                                                         │  (retryable: attempt 2 asks the gate)
                                                         ├─ verified_applied: `replay(Applied)`
                                                         └─ anything else: non-retryable
    attempt n ── the gate ─┬─ granted: send                 ApplicationError with the verdict
                           ├─ verified_applied: nothing sent; `replay(Applied)`
                           └─ refused: non-retryable ApplicationError with the verdict

A non-retryable error stops Temporal's retry policy, whatever it says: the verdict in its
details (`refused_details`) tells the workflow what to do (docs/integrations/temporal.md).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from reconciler.client.effects import Recorder
from reconciler.core.domain import Effect, Verdict
from reconciler.core.errors import RetryRefusedError
from reconciler.effect import (
    NEXT_STEP,
    Applied,
    Classifier,
    EffectCall,
    EffectSite,
    ReceiptReader,
    refs_of,
)
from reconciler.infra import tracing
from reconciler.integrations.durable import engine_operation, ident
from reconciler.integrations.tool_calls import _reconcile

#: The `type` of the ApplicationError a refused or doubtful activity fails with: name it in
#: a retry policy's `non_retryable_error_types` too, for a failure raised by other code.
REFUSED = "RetryRefusedError"


def activity_operation(*_: Any, **__: Any) -> str:
    """The operation id of the activity running now: its workflow id and activity id, the
    identity Temporal retries it under (the workflow id, not the run id: a reset workflow's
    new run re-running the activity is a repeat too)."""
    info = activity.info()
    return engine_operation("temporal", info.workflow_id or "standalone", info.activity_id)


def _workflow(*_: Any, **__: Any) -> str | None:
    workflow = activity.info().workflow_id
    return ident(workflow) if workflow else None


def refused_details(operation_id: str, verdict: str, findings: Any) -> dict[str, Any]:
    """What a refused or doubtful activity's error carries (its `details[0]`): identities and
    the verdict, never the activity's arguments."""
    step = NEXT_STEP.get(Verdict(verdict), "hand it to a human")
    return {"operation_id": operation_id, "verdict": verdict, "findings": list(findings),
            "next": step}


def refused(error: RetryRefusedError) -> ApplicationError:
    """The gate refused attempt n: Temporal must not retry it."""
    return ApplicationError(str(error), refused_details(error.operation_id or "", error.verdict,
                                                        error.findings),
                            type=REFUSED, non_retryable=True)


@dataclass(frozen=True)
class ActivityEffect:
    """How an activity's calls are effects: `reconciler.effect`'s options (docs/effect.md).

    `action` defaults to the activity's type. `keyed`: the activity sends the provider the
    operation id as its idempotency key (`current_call().intent.idempotency_key`); `tagged`:
    it attaches the operation id where the provider keeps metadata. An activity that does
    neither carries nothing a probe can find: attempt 2 after a lost answer is refused.
    `operation_id`, a function of the activity's arguments, names the effect when more than
    one activity may make it (a workflow that catches the refusal and schedules the activity
    again, or continues as new and repeats it for a new effect)."""

    provider: str
    action: str | None = None
    effect: Effect = Effect.NON_IDEMPOTENT
    keyed: bool = False
    tagged: bool = False
    operation_id: Callable[..., str] | None = None
    params: Any = None
    backend: Recorder | None = None
    classify: Classifier | None = None
    receipt: ReceiptReader | None = None
    replay: Callable[[Applied], Any] | None = None
    correlation: Mapping[str, str] | Callable[..., Mapping[str, str]] | None = None

    def _site(self, action: str) -> EffectSite[Any]:
        operation = self.operation_id or activity_operation
        return EffectSite(provider=self.provider, action=self.action or action,
                          effect=self.effect, operation_id=operation,
                          key=operation if self.keyed else None, tagged=self.tagged,
                          params=self.params, backend=self.backend, classify=self.classify,
                          receipt=self.receipt, replay=self.replay, holder=None,
                          run_id=_workflow, tool_call_id=None, correlation=self.correlation)

    def _answer(self, call: EffectCall, result: Any) -> Any:
        return self.replay(result) if isinstance(result, Applied) and self.replay else result

    def _after_failure(self, call: EffectCall) -> Any:
        """A send failed: the verdict says whether Temporal may try again (it is raised
        again, by the caller, when this returns the failure itself)."""
        verdict = call.standing.verdict if call.standing else None
        if verdict is Verdict.VERIFIED_APPLIED:
            refs = refs_of(call.standing) if call.standing else []
            return self._answer(call, Applied(call.operation_id, refs[0] if refs else None))
        if verdict is Verdict.VERIFIED_NOT_APPLIED:
            return None
        shown = verdict.value if verdict else Verdict.INDETERMINATE.value
        findings = call.standing.findings if call.standing else []
        raise ApplicationError(
            f"{call.operation_id}: the send failed and the provider does not show whether it "
            f"happened (verdict {shown}); not retried", refused_details(
                call.operation_id, shown, findings), type=REFUSED, non_retryable=True)

    def wrap(self, fn: Callable[..., Any], action: str | None = None) -> Callable[..., Any]:
        """`fn` (sync or async) with each call through the gate; `action` names it when
        `self.action` does not (default: the function's name)."""
        site = self._site(action or fn.__name__)

        def began(call: EffectCall) -> None:
            call.begin()
            # The operation id only: a heartbeat's details reach the server and the next
            # attempt (`info().heartbeat_details`), never the arguments.
            activity.heartbeat(call.operation_id)

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                call = EffectCall(site, site.intent(args, kwargs, fn))
                with tracing.traced_call(call):  # the GenAI tool span, when tracing is on
                    await asyncio.to_thread(began, call)
                    try:
                        return self._answer(call, await call.arun(fn, *args, **kwargs))
                    except RetryRefusedError as error:
                        raise refused(error) from error
                    except Exception:
                        if call.last_outcome is None:
                            raise
                        await asyncio.to_thread(_reconcile, call)
                        answer = self._after_failure(call)
                        if answer is None:
                            raise
                        return answer
            return run_async

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            call = EffectCall(site, site.intent(args, kwargs, fn))
            with tracing.traced_call(call):
                began(call)
                try:
                    return self._answer(call, call.run(fn, *args, **kwargs))
                except RetryRefusedError as error:
                    raise refused(error) from error
                except Exception:
                    if call.last_outcome is None:
                        raise
                    _reconcile(call)
                    answer = self._after_failure(call)
                    if answer is None:
                        raise
                    return answer
        return run


def reconciled_activity(provider: str, **options: Any) -> Callable[[Callable[..., Any]],
                                                                    Callable[..., Any]]:
    """A decorator (under `@activity.defn`) making the activity's calls effects:
    `ActivityEffect(provider, **options).wrap`."""
    return ActivityEffect(provider, **options).wrap


class _Reconciling(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor,
                 effects: Mapping[str, ActivityEffect]) -> None:
        super().__init__(next)
        self.effects = effects

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        kind = activity.info().activity_type
        effect = self.effects.get(kind)
        if effect is None:
            return await self.next.execute_activity(input)
        # The worker runs `fn` as it would the activity (a sync one on its executor, with the
        # activity's context), so the reconciled function takes its place.
        return await self.next.execute_activity(replace(input, fn=effect.wrap(input.fn, kind)))


class ReconciledActivities(Interceptor):
    """A worker interceptor: the activities named in `effects` (by activity type) run as
    `ActivityEffect.wrap` does; any other runs as it is."""

    def __init__(self, effects: Mapping[str, ActivityEffect]) -> None:
        self.effects = dict(effects)

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Reconciling(next, self.effects)
