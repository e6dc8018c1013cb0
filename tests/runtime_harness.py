"""Shared pieces of the agent runtime's unit tests: an in-memory store, clocks tests move, fake
tools that record their calls, a fake reconciler that records the evidence a test chooses, a
hook that "crashes" the worker at a named point, and checks that a tool's processes are gone.

    world = World.open()                        # SQLite in memory, provider contracts, a run key
                                                # (and a ManualMonotonic for request deadlines)
    rt = world.runtime([call(tool_use("send", {...})), say("done")], [send.tool])
    run_id = world.start(rt, "task")            # created with a test configuration
    adv = run(rt.advance(run_id))

A crash is simulated by a hook that raises `Crash` at a point; the test then builds a new
`AgentRuntime` on the same world (a fresh ScriptedModel with the same script) and advances with
take_over=True, as a supervisor would after the worker died.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest

from reconciler.core.domain import Authority, Effect, Match, Observation, ProviderContract
from reconciler.core.runs.events import CallView, RunView, project
from reconciler.core.runs.messages import ModelResponse, ToolSpec
from reconciler.ledger import Judgement, Ledger
from reconciler.ledger.gate import RetryGate
from reconciler.runtime.loop import AgentRuntime
from reconciler.runtime.scripted import ScriptedModel, Step, call, say, tool_use
from reconciler.runtime.toolgate import Hook, no_hook
from reconciler.runtime.tools import Tool, ToolCall, ToolOutput
from reconciler.store.journal import SqlJournal
from reconciler.store.leases import SqlLeases
from reconciler.store.schema import open_store
from reconciler.store.sealing import Sealer, new_key
from reconciler.store.sql import SqlStore
from reconciler.testing import ManualClock, ManualMonotonic
from reconciler.testing.patience import PATIENCE_S

from journal_rows import run_ids, summary_row

T = TypeVar("T")
#: Bounds every scenario: a hang fails the test instead of stalling the suite.
DEADLINE_S = PATIENCE_S
T0 = datetime(2026, 1, 1, tzinfo=UTC)

#: Providers of the fake tools. "store" and "chat" keep idempotency keys, so the retry gate can
#: grant a retry of a call shown not applied; "bank" cannot be compensated (a human approves
#: each retry); "nokeys" keeps no keys, so no retry is ever granted. All settle at once
#: (`inflight_s` 0): the tests that wait out a settle time set their own.
CONTRACTS = (
    ProviderContract("store", idempotency_keys=True, inflight_s=0),
    ProviderContract("chat", idempotency_keys=True, inflight_s=0),
    ProviderContract("bank", idempotency_keys=True, compensable=False, inflight_s=0),
    ProviderContract("nokeys", inflight_s=0),
)
#: What runs get unless a test says otherwise: no waiting between reconcile rounds.
TEST_CONFIG: dict[str, Any] = {"reconcile_wait_s": 0.0, "reconcile_rounds": 2}


def run(scenario: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(scenario, DEADLINE_S))


def gone(pid: int) -> bool:
    """No process, not even a zombie, has this pid."""
    return not Path(f"/proc/{pid}").exists()


def group_gone(pgid: int) -> bool:
    """No process is left in this process group (a tool's child and all it started)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


class Crash(Exception):
    """The worker "dies" here: nothing after this point of the step happens."""


@dataclass
class CrashAt:
    """A hook that crashes at the first `point` reached (for `tool_call_id`, if given)."""

    point: str
    tool_call_id: str | None = None
    fired: bool = False

    def __call__(self, point: str, run_id: str, tool_call_id: str | None) -> None:
        if self.fired or point != self.point:
            return
        if self.tool_call_id is not None and tool_call_id != self.tool_call_id:
            return
        self.fired = True
        raise Crash(f"worker killed at {point} of {run_id} ({tool_call_id})")


Finding = Literal["applied", "applied_twice", "not_applied", "unavailable", "busy"]


@dataclass
class FakeReconcile:
    """Stands in for `Sweeper.reconcile`: records what `finds` says the provider shows, and the
    operations it was asked about.

    applied: an authoritative observation matching the intent; applied_twice: one matching two
    effects; not_applied: an authoritative zero; unavailable: a probe that could not answer;
    busy: another sweeper holds the operation (nothing recorded, None)."""

    ledger: Ledger
    finds: Finding = "applied"
    asked: list[str] = field(default_factory=list)

    def __call__(self, operation_id: str) -> Judgement | None:
        self.asked.append(operation_id)
        if self.finds == "busy":
            return None
        intent = self.ledger.store.facts(operation_id).intent
        effects = {"applied": 1, "applied_twice": 2}.get(self.finds, 0)
        matches = tuple(Match(f"ref-{operation_id}" + "-again" * n, intent.request_hash)
                        for n in range(effects))
        authority = Authority.UNAVAILABLE if self.finds == "unavailable" else (
            Authority.AUTHORITATIVE)
        error = "probe timed out" if self.finds == "unavailable" else None
        return self.ledger.record_evidence(Observation(
            operation_id, self.ledger.clock(), "fake-probe", authority, matches, error))


Action = Callable[[ToolCall], Awaitable[ToolOutput]]


@dataclass
class FakeTool:
    """A tool whose handler records every call; `action` (if set) decides what it returns."""

    name: str
    effect: Effect = Effect.READ_ONLY
    provider: str | None = None
    action: Action | None = None
    calls: list[ToolCall] = field(default_factory=list)
    #: Whether the derived key is sent to the provider (and so recorded on the intent).
    uses_key: bool | None = None

    @property
    def tool(self) -> Tool:
        spec = ToolSpec(self.name, f"the {self.name} tool", {"type": "object"})
        return Tool(spec, self.effect, self._handle, provider=self.provider,
                    uses_key=self.uses_key)

    async def _handle(self, call: ToolCall) -> ToolOutput:
        self.calls.append(call)
        if self.action is not None:
            return await self.action(call)
        return ToolOutput(f"{self.name} done: {json.dumps(dict(call.input), sort_keys=True)}")


def lookup(**kw: Any) -> FakeTool:
    return FakeTool("lookup", Effect.READ_ONLY, **kw)


def put(**kw: Any) -> FakeTool:
    return FakeTool("put", Effect.IDEMPOTENT_WRITE, "store", **kw)


def send(provider: str = "chat", **kw: Any) -> FakeTool:
    return FakeTool("send", Effect.NON_IDEMPOTENT, provider, **kw)


@dataclass
class World:
    """One store and everything built on it; runtimes made here share it like workers would,
    and read request deadlines off `monotonic`."""

    store: SqlStore
    clock: ManualClock
    ledger: Ledger
    journal: SqlJournal
    gate: RetryGate
    reconcile: FakeReconcile
    monotonic: ManualMonotonic

    @classmethod
    def open(cls, monotonic: ManualMonotonic | None = None) -> World:
        store = open_store("sqlite://")
        for contract in CONTRACTS:
            store.put_contract(contract)
        # A millisecond on every read: facts recorded one after another are strictly ordered
        # (an observation is after the dispatch it follows).
        clock = ManualClock(T0, step=timedelta(milliseconds=1))
        ledger = Ledger(store, clock)
        journal = SqlJournal(store, Sealer([new_key()]))
        return cls(store, clock, ledger, journal, RetryGate(ledger, SqlLeases(store)),
                   FakeReconcile(ledger), monotonic or ManualMonotonic())

    def runtime(self, script: Sequence[Step], tools: Sequence[Tool] = (), *,
                hook: Hook = no_hook) -> AgentRuntime:
        return AgentRuntime(self.journal, self.ledger, self.gate, ScriptedModel(script), tools,
                            self.reconcile, hook=hook, monotonic=self.monotonic)

    def start(self, rt: AgentRuntime, input: str = "do the task", **config: Any) -> str:
        """Create a run with the test configuration (plus `config`); its id."""
        return rt.create(input, config={**TEST_CONFIG, **config}).run_id

    def finished_run(self, script: Sequence[Step], tools: Sequence[Tool],
                     **config: Any) -> RunView:
        """A new run advanced by one worker as far as it goes."""
        rt = self.runtime(script, tools)
        return run(rt.advance(self.start(rt, **config))).view

    def crashed_run(self, script: Sequence[Step], tools: Sequence[Tool], point: str, *,
                    tool_call_id: str | None = None, **config: Any) -> str:
        """A run whose worker died at `point` (of `tool_call_id`, if given); its id."""
        rt = self.runtime(script, tools, hook=CrashAt(point, tool_call_id))
        run_id = self.start(rt, **config)
        with pytest.raises(Crash):
            run(rt.advance(run_id))
        return run_id

    def rebuilt_differs(self) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
        """Every run whose projection of its events disagrees with its stored summary:
        run id -> (rebuilt, stored)."""
        differ = {}
        for run_id in run_ids(self.journal):
            rebuilt = summary_of(project(self.journal.events(run_id)))
            row = summary_row(self.journal, run_id)
            stored = {name: getattr(row, name) for name in rebuilt}
            if rebuilt != stored:
                differ[run_id] = (rebuilt, stored)
        return differ


def summary_of(view: RunView) -> dict[str, Any]:
    """What the stored summary row must say of a run, read off its projection."""
    usage = view.usage
    return {
        "state": view.state.value, "seq": view.seq, "turn": view.turn,
        "correlation_id": view.correlation_id, "stop_reason": view.stop_reason,
        "error_code": (view.error or {}).get("error_code"),
        "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "created_at": view.created_at, "updated_at": view.updated_at,
    }


@contextmanager
def open_world(monotonic: ManualMonotonic | None = None) -> Iterator[World]:
    """A world for one test (its runtimes on `monotonic`, if given); on the way out, every run
    it holds must rebuild from its events to exactly its stored state (the event log
    requirement, checked after every runtime test)."""
    world = World.open(monotonic)
    yield world
    assert world.rebuilt_differs() == {}


WRITES = [pytest.param(put, id="idempotent_write"), pytest.param(send, id="non_idempotent")]
EVERY_EFFECT = [pytest.param(lookup, id="read_only"), *WRITES]
#: The id ScriptedModel gives the first tool use of its first step.
FIRST = "toolu_s0_0"
Make = Callable[..., FakeTool]


def script_for(tool: FakeTool) -> list[ModelResponse]:
    return [call(tool_use(tool.name, {"to": "bob", "n": 1})), say("done")]


def take_over(world: World, tool: FakeTool, run_id: str) -> RunView:
    """A new worker (a fresh model with the same script) takes the run over and advances it."""
    return run(world.runtime(script_for(tool), [tool.tool]).advance(run_id, take_over=True)).view


def crashed(world: World, tool: FakeTool, point: str, **config: Any) -> str:
    return world.crashed_run(script_for(tool), [tool.tool], point, **config)


def first_call(view: RunView) -> CallView:
    return view.calls[FIRST]
