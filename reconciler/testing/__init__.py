"""A kit for testing code that uses the reconciler, as httpx ships `MockTransport`:

    from reconciler.testing import FakeProbe, ManualClock, manual_sandbox

- `ManualClock`: timezone-aware UTC time that moves when the test says (`advance`, `set`);
  the ledger, probes and sweeper call it, the sandbox reads it too (`now()`).
- `FakeProbe`: a probe answering scripted observations or receipts, or raising; records calls.
- `MemoryStore`: the receipt store and its leases in memory, held to the same contract as
  SQLite and PostgreSQL: `Ledger(MemoryStore(), clock)`, `RetryGate(ledger, store)`.
- `manual_sandbox` / `on_manual_clock`: the sandbox provider on a manual clock.
- `reconciler.testing.pytest_plugin`: the same as fixtures (`clock`, `sandbox`, `sandbox_clock`).
"""

from reconciler.sandbox.clock import ManualClock
from reconciler.store.memory import MemoryStore
from reconciler.testing.fake_probe import Answer, FakeProbe
from reconciler.testing.sandbox import manual_sandbox, on_manual_clock

__all__ = ["Answer", "FakeProbe", "ManualClock", "MemoryStore", "manual_sandbox",
           "on_manual_clock"]
