"""Tools as the runtime sees them: a spec for the model, an effect class, an async handler.

A handler does the work once and says what it saw on the wire; the runtime decides whether it
may run at all (`toolgate`). Handlers of side-effecting tools report the transport outcome and
any receipt, so the reconciler's attempt record is what the caller really saw.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.core.domain import Carried, Effect, Match, Outcome
from reconciler.core.hashing import canonical_json, derive_idempotency_key, request_hash
from reconciler.core.runs.messages import ToolSpec
from reconciler.runtime.cancel import CancelSignal


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One dispatch of a tool call, as its handler gets it."""

    run_id: str
    turn: int
    tool_call_id: str
    name: str
    input: Mapping[str, Any]
    #: The reconciler's operation for this call (None for read_only tools).
    operation_id: str | None
    #: Derived from (run id, tool call id): the same on every dispatch of this call.
    idempotency_key: str
    #: 1 for the first dispatch; more only after the retry gate granted one.
    attempt: int
    #: The run's cancellation. The handler's task is cancelled when it fires; work the handler
    #: hands elsewhere (a thread, a child process, another client) checks `cancel.cancelled`
    #: or awaits `cancel.wait()` to stop too. Never fires for a call that is not dispatched.
    cancel: CancelSignal = field(default_factory=CancelSignal, compare=False)


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a handler returns: the result for the model, and what the wire said."""

    content: str
    is_error: bool = False
    outcome: Outcome = Outcome.RESPONSE
    status: int | None = None
    receipt: Match | None = None


Handler = Callable[[ToolCall], Awaitable[ToolOutput]]


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the model may call.

    `provider`/`action` name the operation for the reconciler (required unless read_only).
    `request` gives the exact parameters the provider receives, whose hash the intent records
    (default: the tool input); `correlation` the references probes search by; `uses_key` whether
    the derived idempotency key is sent to the provider (default: for idempotent writes);
    `tagged` whether the handler attaches the call's operation id where the provider keeps
    metadata (Stripe's `metadata[operation_id]`): with the key, what the intent says the request
    carried (SPEC section 3), which a probe can find the effect by; `needs_approval` whether a
    human approves each call before it is first sent.
    """

    spec: ToolSpec
    effect: Effect
    handler: Handler
    provider: str | None = None
    action: str | None = None
    request: Callable[[ToolCall], Any] | None = None
    correlation: Callable[[ToolCall], Mapping[str, str]] | None = None
    uses_key: bool | None = None
    tagged: bool = False
    #: Ask a human before the first dispatch (the run pauses in awaiting_approval with the
    #: call and a resume token). Side-effecting calls to a provider whose contract says
    #: `compensable: false` are asked about whatever this says.
    needs_approval: bool = False

    def __post_init__(self) -> None:
        if self.effect is not Effect.READ_ONLY and not self.provider:
            raise ValueError(f"tool {self.spec.name!r} has side effects: name its provider")

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def sends_key(self) -> bool:
        return self.effect is Effect.IDEMPOTENT_WRITE if self.uses_key is None else self.uses_key

    @property
    def carries(self) -> frozenset[Carried]:
        """What a call's request carries that a probe can find its effect by (SPEC section 3)."""
        return frozenset({Carried.IDEMPOTENCY_KEY} if self.sends_key else ()) | frozenset(
            {Carried.OPERATION_ID} if self.tagged else ())

    def request_hash(self, call: ToolCall) -> str:
        return request_hash(self.request(call) if self.request else dict(call.input))


#: Inside each part of a derived operation id, "=" escapes itself and the two separators.
_ESCAPE = str.maketrans({"=": "==", ":": "=c", "/": "=s"})
#: The longest operation id the store keeps (intents.operation_id).
OPERATION_ID_MAX = 200


def operation_id(run_id: str, tool_call_id: str) -> str:
    """The reconciler's operation id of a tool call, unambiguous (SPEC section 2).

    `<run id>/<tool call id>`, each part escaped ("=" -> "==", ":" -> "=c", "/" -> "=s"), so the
    one bare "/" splits the pair and two pairs never share an id: run "r:1" call "c" is
    `r=c1/c`, run "r" call "1:c" is `r/1=cc`. Past OPERATION_ID_MAX characters it is
    `h=<sha256 of the pair as a canonical JSON array>` (no "/": never a readable id).

    Ids were once `<run id>:<tool call id>`, which collided. No derived id contains ":", which
    every old one does, so the two forms never meet in a store. The id is derived once, when
    the model requests the call, and kept in the run's journal (`tool_requested`); every later
    step, after a crash or a continue too, reads it from there. A call requested before the
    change therefore keeps its old id and its recorded intent, attempts and evidence: no
    migration is needed, and old ids are never derived again.
    """
    readable = f"{run_id.translate(_ESCAPE)}/{tool_call_id.translate(_ESCAPE)}"
    if len(readable) <= OPERATION_ID_MAX:
        return readable
    return "h=" + hashlib.sha256(canonical_json([run_id, tool_call_id])).hexdigest()


def call_key(run_id: str, tool_call_id: str) -> str:
    return derive_idempotency_key(run_id, tool_call_id)


def by_name(tools: Sequence[Tool]) -> dict[str, Tool]:
    names = [tool.name for tool in tools]
    duplicates = {name for name in names if names.count(name) > 1}
    if duplicates:
        raise ValueError(f"tool names must be unique; repeated: {sorted(duplicates)}")
    return {tool.name: tool for tool in tools}
