"""A streaming model's deltas in the run: each is appended as an assistant_delta event (the
projection ignores them: the assistant message is the answer), and a cancel closes the stream.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from reconciler.core.errors import IllegalTransitionError
from reconciler.core.runs.events import EventKind, apply
from reconciler.core.runs.messages import ModelRequest, ModelResponse, TextDelta
from reconciler.core.runs.states import RunState
from reconciler.runtime.loop import AgentRuntime
from reconciler.runtime.models import DeltaSink
from reconciler.runtime.scripted import say

from runtime_harness import TEST_CONFIG, open_world, run


class Streams:
    """Streams `words` as deltas, then answers with them; `hang` stops after the first delta
    and waits until cancelled, recording that its stream was closed."""

    def __init__(self, words: list[str], *, hang: bool = False) -> None:
        self.words, self.hang = words, hang
        self.streaming, self.closed = asyncio.Event(), False

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("a streaming model is asked to stream")

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        try:
            for word in self.words:
                on_delta(TextDelta(0, word))
                if self.hang:
                    self.streaming.set()
                    await asyncio.Event().wait()
            return say("".join(self.words))
        finally:
            self.closed = True


def test_each_delta_is_appended_before_the_answer_and_changes_no_state() -> None:
    with open_world() as world:
        model = Streams(["order ", "7 is ", "shipped"])
        rt = AgentRuntime(world.journal, world.ledger, world.gate, model, [], world.reconcile)
        run_id = rt.create("where is order 7?", config=TEST_CONFIG).run_id
        view = run(rt.advance(run_id)).view
        events = world.journal.events(run_id)
    kinds = [e.kind for e in events]
    deltas = [e for e in events if e.kind is EventKind.ASSISTANT_DELTA]
    assert [d.data["text"] for d in deltas] == ["order ", "7 is ", "shipped"]
    assert kinds.index(EventKind.ASSISTANT) > kinds.index(EventKind.ASSISTANT_DELTA)
    assert all(d.data["turn"] == 1 and d.data["type"] == "text_delta" for d in deltas)
    assert view.state is RunState.COMPLETED and view.output == "order 7 is shipped"


def test_a_delta_moves_nothing_and_needs_a_live_run() -> None:
    with open_world() as world:
        rt = AgentRuntime(world.journal, world.ledger, world.gate, Streams(["hi"]), [],
                          world.reconcile)
        run_id = rt.create("hi", config=TEST_CONFIG).run_id
        run(rt.advance(run_id))
        events = world.journal.events(run_id)
    delta = next(e for e in events if e.kind is EventKind.ASSISTANT_DELTA)
    before = None
    for event in events[:delta.seq - 1]:
        before = apply(before, event)
    assert before is not None
    after = apply(before, delta)
    assert replace(after, seq=before.seq, updated_at=before.updated_at) == before
    done = None
    for event in events:
        done = apply(done, event)
    assert done is not None
    with pytest.raises(IllegalTransitionError):
        apply(done, replace(delta, seq=done.seq + 1))


def test_a_cancel_mid_stream_closes_the_stream_and_cancels_the_run() -> None:
    async def scenario(rt: AgentRuntime, model: Streams, run_id: str) -> None:
        advancing = asyncio.create_task(rt.advance(run_id))
        await asyncio.wait_for(model.streaming.wait(), 10)
        await rt.cancel(run_id, "user pressed stop")
        await advancing

    with open_world() as world:
        model = Streams(["one ", "two"], hang=True)
        rt = AgentRuntime(world.journal, world.ledger, world.gate, model, [], world.reconcile)
        run_id = rt.create("count", config=TEST_CONFIG).run_id
        run(scenario(rt, model, run_id))
        view = world.journal.load(run_id)
        kinds = [e.kind for e in world.journal.events(run_id)]
    assert model.closed and view.state is RunState.CANCELLED
    assert EventKind.ASSISTANT_DELTA in kinds and EventKind.ASSISTANT not in kinds
