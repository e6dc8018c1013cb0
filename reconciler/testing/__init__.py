"""A kit for testing code that uses the reconciler, as httpx ships `MockTransport`:

    from reconciler.testing import FakeProbe, ManualClock, manual_sandbox

- `ManualClock`: timezone-aware UTC time that moves when the test says (`advance`, `set`);
  the ledger, probes and sweeper call it, the sandbox reads it too (`now()`).
- `ManualMonotonic`: a `time.monotonic` that moves when the test says (`advance`, `sleep`), for
  code taking a `monotonic` callable (a probe budget's pacing, a run's request deadline).
- `FakeProbe`: a probe answering scripted observations or receipts, or raising; records calls.
- `MemoryStore`: the receipt store and its leases in memory, held to the same contract as
  SQLite and PostgreSQL: `Ledger(MemoryStore(), clock)`, `RetryGate(ledger, store)`.
- `MemoryJournal`: agent runs' event logs in memory, held to the journal's contract like
  `SqlJournal`: `AgentRuntime(MemoryJournal(store), ledger, gate, model, tools)`.
- `manual_sandbox` / `on_manual_clock`: the sandbox provider on a manual clock.
- `reconciler.testing.pytest_plugin`: the same as fixtures (`clock`, `sandbox`, `sandbox_clock`).
"""

from reconciler.infra.clock import ManualClock, ManualMonotonic
from reconciler.store.memory import MemoryStore
from reconciler.store.memory_journal import MemoryJournal
from reconciler.testing.fake_probe import FakeProbe, ScriptedResult
from reconciler.testing.sandbox import manual_sandbox, on_manual_clock

__all__ = ["FakeProbe", "ManualClock", "ManualMonotonic", "MemoryJournal", "MemoryStore",
           "ScriptedResult", "manual_sandbox", "on_manual_clock"]
