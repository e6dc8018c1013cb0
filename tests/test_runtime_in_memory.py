"""The agent runtime on the testing kit alone: `MemoryStore` and the journal its kind registers
(`MemoryJournal`), no database. The runtime's other unit tests run on SQLite (runtime_harness);
these hold that nothing in the loop needs one."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest

from reconciler.core.runs.events import EventKind, project
from reconciler.core.runs.states import RunState
from reconciler.ledger import Ledger
from reconciler.ledger.gate import RetryGate
from reconciler.runtime.loop import AgentRuntime
from reconciler.runtime.scripted import ScriptedModel, Step, call, say, tool_use
from reconciler.runtime.toolgate import Hook, no_hook
from reconciler.runtime.tools import Tool
from reconciler.store.kinds import journal_of, leases_of
from reconciler.testing import ManualClock, MemoryJournal, MemoryStore

from runtime_harness import (
    CONTRACTS,
    T0,
    TEST_CONFIG,
    Crash,
    CrashAt,
    FakeReconcile,
    lookup,
    run,
    send,
)


class Kit:
    """A memory store with the provider contracts, its journal, and runtimes on them."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        for contract in CONTRACTS:
            self.store.put_contract(contract)
        self.ledger = Ledger(self.store, ManualClock(T0, step=timedelta(milliseconds=1)))
        self.journal = journal_of(self.store)
        self.reconcile = FakeReconcile(self.ledger)

    def runtime(self, script: Sequence[Step], tools: Sequence[Tool],
                hook: Hook = no_hook) -> AgentRuntime:
        return AgentRuntime(self.journal, self.ledger, RetryGate(self.ledger,
                                                                 leases_of(self.store)),
                            ScriptedModel(script), tools, self.reconcile, hook=hook)


def test_a_run_completes_on_the_memory_store_and_journal() -> None:
    kit = Kit()
    assert isinstance(kit.journal, MemoryJournal)
    tool = send()
    rt = kit.runtime([call(tool_use("send", {"to": "bob"}), tool_use("lookup", {"q": 1})),
                      say("done")], [tool.tool, lookup().tool])
    run_id = rt.create("do the task", config=TEST_CONFIG).run_id
    view = run(rt.advance(run_id)).view
    assert view.state is RunState.COMPLETED and len(tool.calls) == 1
    assert project(kit.journal.events(run_id)) == view == kit.journal.load(run_id)
    # The send's intent, in the store beside the journal, names its run.
    assert len(kit.store.list_operations(run_id=run_id)) == 1


def test_a_send_recorded_before_a_crash_is_not_sent_again_on_memory() -> None:
    """A second worker takes over a run whose worker died after recording the send's result:
    the result is replayed from the memory journal, the send not run again."""
    kit = Kit()
    tool = send()
    script = [call(tool_use("send", {"to": "bob"})), say("done")]
    crashing = kit.runtime(script, [tool.tool], CrashAt("result_recorded"))
    run_id = crashing.create("do the task", config=TEST_CONFIG).run_id
    with pytest.raises(Crash):
        run(crashing.advance(run_id))
    view = run(kit.runtime(script, [tool.tool]).advance(run_id, take_over=True)).view
    assert view.state is RunState.COMPLETED and len(tool.calls) == 1
    results = [e for e in kit.journal.events(run_id) if e.kind is EventKind.TOOL_RESULT]
    assert len(results) == 1
