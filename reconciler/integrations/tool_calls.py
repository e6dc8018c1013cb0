"""A tool call as an effect, and what the model is told when it is not the tool's own result.

A model that retries a tool makes a *new* tool call (a new tool_call_id) with the same
arguments. So the operation is the call's identity, not the tool_call_id: the run (or session)
and the tool's name and canonical arguments. The same charge asked for twice in one run is one
operation; a model that means a second charge says so in the arguments (an order id).

    model ── charge(order=A-17) ──▶ send ── timeout ─▶ reconcile ─▶ "done (ch_1); do not call again"
    model ── charge(order=A-17) ──▶ gate ── applied ─▶ nothing sent ─▶ "already done (ch_1)"
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from reconciler.client.effects import Recorder
from reconciler.core.domain import Effect, Outcome, Verdict
from reconciler.core.errors import RetryRefusedError, ServiceError
from reconciler.core.hashing import request_hash
from reconciler.effect import (
    Applied,
    Classifier,
    EffectCall,
    EffectSite,
    ReceiptReader,
    effect,
    refs_of,
)

T = TypeVar("T")


def tool_operation(scope: str, tool: str, arguments: Mapping[str, Any]) -> str:
    """The operation id (and idempotency key, for a tool that sends one) of a tool call:
    unambiguous in (scope, tool, arguments), since the three are hashed as one JSON document,
    and stable across restarts."""
    digest = request_hash({"scope": scope, "tool": tool, "arguments": dict(arguments)})
    return f"tool.{tool[:60]}.{digest.removeprefix('sha256:')[:40]}"


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What the model is told instead of the tool's result: what happened, what not to do."""

    tool: str
    operation_id: str
    verdict: Verdict | None
    message: str
    #: False when the effect did not happen and a call with the same arguments may be made.
    final: bool = True

    def __str__(self) -> str:
        return self.message


def _ref(call: EffectCall) -> str:
    refs = refs_of(call.standing) if call.standing else []
    return f" ({refs[0]})" if refs else ""


def told(tool: str, call: EffectCall, failure: BaseException | None) -> ToolOutcome:
    """The message for a call that failed on the wire (`failure`) or was answered from the
    record, read from the operation's verdict."""
    verdict = call.standing.verdict if call.standing else None
    lost = ""
    if failure is not None and call.last_outcome is Outcome.RESPONSE:
        lost = f"the provider answered with an error ({type(failure).__name__}: {failure})"[:300]
    elif failure is not None:
        lost = f"the call failed ({call.last_outcome}: {type(failure).__name__})"
    if verdict is Verdict.VERIFIED_APPLIED:
        why = f"{lost}, but the provider shows the effect" if lost else (
            "An earlier call reached the provider; nothing was sent again")
        text = (f"{tool}: done{_ref(call)}. {why[0].upper()}{why[1:]}. "
                f"Do not call {tool} again for this.")
        return ToolOutcome(tool, call.operation_id, verdict, text)
    if verdict is Verdict.VERIFIED_NOT_APPLIED and call.intent.idempotency_key is None:
        # The gate grants no retry without a key (SPEC rule 6): "call again" would be refused.
        return ToolOutcome(tool, call.operation_id, verdict, (
            f"{tool}: not done: {lost or 'the call failed'} and the provider shows no effect, "
            f"but {tool} sends the provider no idempotency key, so it is not sent again: a "
            f"human decides. Do not call {tool} again with these arguments."))
    if verdict is Verdict.VERIFIED_NOT_APPLIED:
        return ToolOutcome(tool, call.operation_id, verdict, (
            f"{tool}: not done: {lost or 'the call failed'} and the provider shows no effect. "
            f"You may call {tool} again, once, with the same arguments."), final=False)
    return ToolOutcome(tool, call.operation_id, verdict, (
        f"{tool}: outcome unknown: {lost or 'the call failed'} and the provider does not show "
        f"yet whether it happened (verdict {verdict.value if verdict else 'none'}). Do not call "
        f"{tool} again and do not tell the user it failed: it is being reconciled, and a human "
        "decides if it stays unknown."))


@dataclass(frozen=True)
class ToolEffects:
    """Which tools have side effects, at which provider, and where their records go.

    `effects` names a tool's class (`read_only` tools pass straight through); any other tool is
    `default`. `actions` maps a tool to the provider's action name (default: the tool's).
    `correlate` names, per tool, the arguments whose values are references a probe needs to
    find the effect (an order id, a channel): they go into the intent's correlation, and no
    other argument leaves the process."""

    provider: str
    backend: Recorder | None = None
    effects: Mapping[str, Effect | str] = field(default_factory=dict)
    default: Effect = Effect.NON_IDEMPOTENT
    actions: Mapping[str, str] = field(default_factory=dict)
    classify: Classifier | None = None
    receipt: ReceiptReader | None = None
    correlate: Mapping[str, Sequence[str]] = field(default_factory=dict)
    #: Per tool, the provider request a call makes from (operation id, arguments): what the
    #: request hash covers, so that a provider echoing its body's hash binds the effect.
    #: Default: the arguments.
    requests: Mapping[str, Callable[[str, Mapping[str, Any]], Any]] = field(
        default_factory=dict)
    #: Errors handed back as they are (recorded, not reconciled): an MCP upstream's own
    #: error result, which the client should see unchanged.
    passthrough: tuple[type[BaseException], ...] = ()
    #: Who asks the gate for retries (default: one holder per call, from host and pid). A
    #: worker that its supervisor restarts under the same name gives that name: the restarted
    #: worker then renews a retry grant its killed predecessor held, instead of waiting out
    #: the grant's lease.
    holder: str | None = None
    #: The tools that send the provider an idempotency key: the one the call is given
    #: (`current_call().intent.idempotency_key`, the operation id). Any other tool's intent
    #: records no key: a key recorded but not sent is a false statement of the intent (SPEC
    #: section 3), and a null key never gets a retry grant (SPEC section 4, rule 6).
    keyed: Collection[str] = frozenset()
    #: The tools that attach the operation id (`current_call().operation_id`) where the
    #: provider keeps metadata (Stripe's `metadata[operation_id]`), so that a probe can find
    #: their effects by it. A tool neither keyed nor tagged carries nothing a probe can find:
    #: it is warned about once, and its calls whose answer was lost go to a human.
    tagged: Collection[str] = frozenset()

    def effect_of(self, tool: str) -> Effect:
        return Effect(self.effects.get(tool, self.default))

    def _site(self, scope: str, tool: str, arguments: Mapping[str, Any]) -> EffectSite[Any]:
        operation_id = tool_operation(scope, tool, arguments)
        request = self.requests.get(tool)
        return effect(provider=self.provider, action=self.actions.get(tool, tool),
                      effect=self.effect_of(tool), operation_id=operation_id,
                      key=operation_id if tool in self.keyed else None, tagged=tool in self.tagged,
                      params=request(operation_id, arguments) if request else dict(arguments),
                      backend=self.backend, classify=self.classify,
                      receipt=self.receipt, run_id=scope, holder=self.holder,
                      correlation={name: str(arguments[name])
                                   for name in self.correlate.get(tool, ())
                                   if isinstance(arguments.get(name), str | int)})

    def run(self, scope: str, tool: str, arguments: Mapping[str, Any],
            invoke: Callable[[], T]) -> T | ToolOutcome:
        """Run one tool call through the gate; the model gets the result or a `ToolOutcome`.
        A call that failed is reconciled and told as its verdict; an error raised before
        anything was sent is the tool's own, and is raised."""
        if self.effect_of(tool) is Effect.READ_ONLY:
            return invoke()
        try:
            with self._site(scope, tool, arguments) as call:
                try:
                    result = call.run(invoke)
                except Exception as exc:
                    if call.last_outcome is None or isinstance(exc, self.passthrough):
                        raise
                    _reconcile(call)
                    return told(tool, call, exc)
        except RetryRefusedError as refused:
            return _refused(tool, refused)
        return told(tool, call, None) if isinstance(result, Applied) else result

    async def arun(self, scope: str, tool: str, arguments: Mapping[str, Any],
                   invoke: Callable[[], Awaitable[T]]) -> T | ToolOutcome:
        """`run` for a coroutine; the bookkeeping runs on a worker thread."""
        if self.effect_of(tool) is Effect.READ_ONLY:
            return await invoke()
        try:
            async with self._site(scope, tool, arguments) as call:
                try:
                    result = await call.arun(invoke)
                except Exception as exc:
                    if call.last_outcome is None or isinstance(exc, self.passthrough):
                        raise
                    await asyncio.to_thread(_reconcile, call)
                    return told(tool, call, exc)
        except RetryRefusedError as refused:
            return _refused(tool, refused)
        return told(tool, call, None) if isinstance(result, Applied) else result


def _reconcile(call: EffectCall) -> None:
    try:
        call.standing = call.backend.reconcile(call.operation_id)
    except ServiceError as exc:  # another sweeper is probing: the verdict stays as recorded
        if exc.status != 409:
            raise


def _refused(tool: str, refused: RetryRefusedError) -> ToolOutcome:
    return ToolOutcome(tool, refused.operation_id or "", Verdict(refused.verdict), (
        f"{tool}: not sent: {refused}. Do not call {tool} again with these arguments."))
