"""What the durable-execution adapters (DBOS steps, Temporal activities) share: the operation
id of a unit of work the engine re-runs.

An engine re-runs a step (or an activity) under the same identity: DBOS by its workflow id and
step number, Temporal by its workflow id and activity id. That identity, not the attempt, is
the operation, so every re-run of it is a repeat that the gate answers from the provider's
evidence.
"""

from __future__ import annotations

import re

from reconciler.core.hashing import request_hash
from reconciler.core.schemas import IDENT_PATTERN

#: Room left in an operation id (200 characters at most) after the engine's prefix and the
#: step's own part.
_ROOM = 120


def ident(text: str) -> str:
    """`text` as an identifier the ledger takes (`IDENT_PATTERN`, at most 200 characters):
    itself when it is one and short, else a hash of it (an engine's workflow id is any string
    its user chose)."""
    if len(text) <= _ROOM and re.fullmatch(IDENT_PATTERN, text):
        return text
    return "h-" + request_hash(text).removeprefix("sha256:")[:40]


def engine_operation(engine: str, workflow: str, unit: str) -> str:
    """The operation id of unit `unit` (a step number, an activity id) of `workflow`."""
    return f"{engine}:{ident(workflow)}:{ident(unit)}"

