"""The seam between the run loop and where runs are kept (`store.journal.SqlJournal`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from reconciler.runtime.events import Kind, RunEvent, RunView


class Journal(Protocol):
    """Append-only run logs with optimistic appends (RunConflictError when the run moved on)."""

    def create(self, run_id: str, data: Mapping[str, Any], at: datetime) -> RunView: ...

    def append(self, view: RunView, kind: Kind, data: Mapping[str, Any],
               at: datetime) -> RunView: ...

    def load(self, run_id: str) -> RunView: ...

    def events(self, run_id: str, after: int = 0) -> list[RunEvent]: ...

    def claim(self, run_id: str, holder: str, now: datetime, ttl_s: float, *,
              force: bool = False) -> bool: ...

    def release(self, run_id: str, holder: str) -> None: ...
