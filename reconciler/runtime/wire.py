"""The wire format of the sidecar's runs API (/v1/runs), and runs rendered in it.

A run's configuration travels as a partial object (only the keys a caller sets), because the
stored configuration is merged key by key: the agent's defaults, then the run's own, then what a
resume changes. Each key is checked against `RunConfig` and stored as its checked value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, fields
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    model_validator,
)

from reconciler.core.ports import OperationSummary
from reconciler.core.runs.events import CallView, EventKind, RunEvent, RunView
from reconciler.core.runs.messages import usage_to_json
from reconciler.core.runs.states import RunState
from reconciler.core.schemas import Name, Note, Storable
from reconciler.runtime.guards import RunConfig

#: The caller's wait for an answer, at most: a run goes on past it only by the step under way.
DEFAULT_DEADLINE_S = 25.0
MAX_DEADLINE_S = 300.0

_CONFIG = TypeAdapter(RunConfig)


def _run_config(value: dict[str, Any]) -> dict[str, Any]:
    checked = asdict(_CONFIG.validate_python(value))  # types; unknown keys are let through
    given = {key: checked.get(key, value[key]) for key in value}
    if isinstance(value.get("prices"), dict):
        # Unknown price kinds are kept, for Prices to refuse by name below.
        given["prices"] = {**value["prices"], **checked["prices"]}
    try:
        RunConfig.of(given)  # unknown keys and out-of-range values, in RunConfig's own words
    except TypeError as exc:
        raise ValueError(f"prices: {exc}") from None
    numbers = [v for v in (*given.values(), *(given.get("prices") or {}).values())
               if isinstance(v, float)]
    if not all(math.isfinite(v) for v in numbers):
        raise ValueError("numbers in a run configuration must be finite")
    return given


RunConfigIn = Annotated[dict[str, Any], AfterValidator(_run_config), Field(
    description="Run configuration keys to set (the rest keep the agent's defaults): "
    + ", ".join(f.name for f in fields(RunConfig)))]
#: Run ids become part of operation ids (`run:tool_call`, at most 200 characters) and of paths.
RUN_ID_PATTERN = r"^[A-Za-z0-9._:@+=-]+$"
RUN_ID_MAX = 120
RunId = Annotated[str, Field(min_length=1, max_length=RUN_ID_MAX, pattern=RUN_ID_PATTERN)]
#: Strict: JSON's true is not one second, nor "5" five.
DeadlineS = Annotated[float, Field(
    gt=0, le=MAX_DEADLINE_S, strict=True, description="seconds to work on the run before "
    "answering; a run with more to do pauses with a continue_request")]
Token = Annotated[str, Field(min_length=1, max_length=200), Storable]
Stream = Annotated[bool, Field(description="answer with the run's events as server-sent events "
                               "(as does Accept: text/event-stream)")]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InputMessage(_In):
    """A user message, as seed 003's requests carry the task (`input: [{role, content}]`)."""

    role: Literal["user"]
    content: str = Field(min_length=1, max_length=60_000)


class DatabricksOptions(BaseModel):
    """Seed 003's options object: `long_task` is read, other options are accepted and unused."""

    model_config = ConfigDict(extra="allow", frozen=True)
    long_task: bool = False


class RunIn(_In):
    input: (Annotated[str, Field(min_length=1, max_length=60_000), Storable]
            | Annotated[list[InputMessage], Field(min_length=1, max_length=100)] | None) = Field(
        None, description="the task: text, or user messages (joined by blank lines)")
    messages: list[dict[str, Any]] | None = Field(
        None, min_length=1, max_length=10_000,
        description="a long task's follow-up instead of `input`: the previous messages, the "
                    "task_continue_request and a task_continue_response answering it")
    long_task: bool = Field(False, description="pause for the deadline with seed 003's "
                            "response.output_item.done / task_continue_request event")
    databricks_options: DatabricksOptions | None = None
    config: RunConfigIn | None = None
    correlation_id: Token | None = None
    run_id: RunId | None = Field(None, description="default: a new unique id")
    deadline_s: DeadlineS = DEFAULT_DEADLINE_S
    stream: Stream = False

    @model_validator(mode="after")
    def _input_or_messages(self) -> RunIn:
        if (self.input is None) == (self.messages is None):
            raise ValueError("give either input (a new run) or messages (a long task's "
                             "follow-up), not both")
        return self

    @property
    def is_long_task(self) -> bool:
        return self.long_task or bool(self.databricks_options
                                      and self.databricks_options.long_task)

    @property
    def task(self) -> str:
        """The task as the run's input text (only for a new run)."""
        if isinstance(self.input, list):
            return "\n\n".join(message.content for message in self.input)
        return self.input or ""


class ApproveIn(_In):
    """A human's decision on the call the run waits for (see AgentRuntime.decide)."""

    resume_token: Token
    decision: Literal["applied", "not_applied", "approve_retry", "approve"]
    actor: Name | None = Field(None, description="ignored when a credential is used: the "
                               "actor recorded is the credential's name")
    note: Note = ""
    deadline_s: DeadlineS = DEFAULT_DEADLINE_S
    stream: Stream = False


class RejectIn(_In):
    resume_token: Token
    actor: Name | None = Field(None, description="ignored when a credential is used: the "
                               "actor recorded is the credential's name")
    note: Note = ""
    deadline_s: DeadlineS = DEFAULT_DEADLINE_S
    stream: Stream = False


class CancelIn(_In):
    reason: Annotated[str, Storable] = Field("cancelled over the runs API", min_length=1,
                                             max_length=500)


class ResumeIn(_In):
    config: RunConfigIn | None = Field(None, description="changes, e.g. a larger budget")
    deadline_s: DeadlineS = DEFAULT_DEADLINE_S
    stream: Stream = False


class ContinueIn(_In):
    type: Literal["task_continue_response"]
    continue_request_id: Token
    deadline_s: DeadlineS = DEFAULT_DEADLINE_S
    stream: Stream = False


class UsageOut(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


class ApprovalOut(BaseModel):
    tool_call_id: str
    resume_token: str
    payload: dict[str, Any]
    requested_at: datetime


class ContinueRequestOut(BaseModel):
    type: Literal["task_continue_request"] = "task_continue_request"
    id: str
    run_id: str
    tool_steps: int
    step: int = Field(description="seed 003's name for tool_steps")


class CallOut(BaseModel):
    """One tool call; a side-effecting one is the operation `operation_id` in /v1/operations."""

    tool_call_id: str
    turn: int
    name: str
    effect: str
    operation_id: str | None
    dispatches: int
    done: bool
    is_error: bool | None
    source: str | None = Field(description="who wrote the result: handler, reconciled, "
                               "guard, rejected, cancelled")


class UnhealthyCallOut(BaseModel):
    operation_id: str
    verdict: str
    next_action: str


class HealthOut(BaseModel):
    """Whether the run's effects turned out as its tool calls were told (SPEC section 4)."""

    healthy: bool
    unhealthy_calls: list[UnhealthyCallOut] = Field(
        description="operations of the run found false_success or duplicate_effect after the "
                    "fact; the run is unhealthy even if it completed")


class RunOut(BaseModel):
    run_id: str
    state: RunState
    seq: int = Field(description="the number of the run's latest event")
    created_at: datetime
    updated_at: datetime
    input: str
    correlation_id: str | None
    config: dict[str, Any]
    turn: int
    tool_steps: int
    usage: UsageOut
    output: str | None
    stop_reason: str | None
    error: dict[str, Any] | None
    cancellation: dict[str, Any] | None
    approval: ApprovalOut | None = Field(description="the call waiting for a human, if any")
    continue_request: ContinueRequestOut | None = Field(
        description="set when the run paused for the deadline: answer it to go on")
    calls: list[CallOut]
    health: HealthOut


class RunEventOut(BaseModel):
    seq: int
    kind: EventKind
    at: datetime
    data: dict[str, Any]


class RunEventsOut(RunOut):
    events: list[RunEventOut] = Field(description="events after ?after=, oldest first")
    next_after: int | None = Field(description="pass as ?after= for the next page of events")


def run_out(view: RunView, unhealthy: Sequence[OperationSummary] = ()) -> RunOut:
    """The run as a client gets it; `unhealthy` are its operations whose effect went wrong."""
    approval = view.approval
    return RunOut(
        run_id=view.run_id, state=view.state, seq=view.seq, created_at=view.created_at,
        updated_at=view.updated_at, input=view.input, correlation_id=view.correlation_id,
        config=dict(view.config), turn=view.turn, tool_steps=view.tool_steps,
        usage=UsageOut(**usage_to_json(view.usage)), output=view.output,
        stop_reason=view.stop_reason,
        error=dict(view.error) if view.error is not None else None,
        cancellation=dict(view.cancellation) if view.cancellation is not None else None,
        approval=ApprovalOut(tool_call_id=approval.tool_call_id,
                             resume_token=approval.resume_token, payload=dict(approval.payload),
                             requested_at=approval.requested_at) if approval else None,
        continue_request=ContinueRequestOut(id=view.continue_request, run_id=view.run_id,
                                            tool_steps=view.tool_steps, step=view.tool_steps)
        if view.continue_request is not None else None,
        calls=[_call_out(call) for call in view.calls.values()],
        health=HealthOut(healthy=not unhealthy, unhealthy_calls=[
            UnhealthyCallOut(operation_id=o.operation_id, verdict=o.verdict,
                             next_action=o.next_action) for o in unhealthy]))


def run_events_out(view: RunView, events: list[RunEvent], limit: int,
                   unhealthy: Sequence[OperationSummary] = ()) -> RunEventsOut:
    """The run with one page of its events (`events` may hold one more than `limit`)."""
    page = events[:limit]
    return RunEventsOut(
        **dict(run_out(view, unhealthy)),
        events=[RunEventOut(seq=e.seq, kind=e.kind, at=e.at, data=dict(e.data)) for e in page],
        next_after=page[-1].seq if len(events) > limit else None)


def _call_out(call: CallView) -> CallOut:
    result = call.result
    return CallOut(tool_call_id=call.tool_call_id, turn=call.turn, name=call.name,
                   effect=call.effect, operation_id=call.operation_id,
                   dispatches=call.dispatches, done=result is not None,
                   is_error=result.is_error if result else None, source=call.result_source)
