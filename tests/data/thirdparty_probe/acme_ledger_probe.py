"""A probe that finds an operation's effects in a ledger export (a JSON file the provider writes).

    {"entries": [{"id": "tx_1", "operation_id": "op-1", "request_hash": "sha256:..."}]}

An export is written some time after the fact, so it is `lagging` by default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from probes import ProbeTarget
from probes.errors import ProbeConfigError
from reconciler.core.domain import Authority, Carried, Match, Observation
from reconciler.core.sight import Sight


class LedgerProbe:
    #: It finds an effect by the operation id the request attached (SPEC section 3); the
    #: configuration's `actions` say which actions' effects the export holds.
    sight = Sight(finds_by=frozenset({Carried.OPERATION_ID}))

    def __init__(self, name: str, path: Path, authority: Authority) -> None:
        self.name = name
        self.path = path
        self.authority = authority

    def probe(self, target: ProbeTarget) -> Observation:
        now = datetime.now(UTC)
        try:
            entries = json.loads(self.path.read_text(encoding="utf-8"))["entries"]
            matches = tuple(Match(str(e["id"]), e.get("request_hash")) for e in entries
                            if e.get("operation_id") == target.operation_id)
        except (OSError, ValueError, LookupError, TypeError, AttributeError) as exc:
            # Never raise: trouble reading is "could not answer", which proves nothing.
            return Observation(target.operation_id, now, self.name, Authority.UNAVAILABLE,
                               error=f"ledger unreadable: {type(exc).__name__}")
        return Observation(target.operation_id, now, self.name, self.authority, matches)


def make_probe(name: str, options: Mapping[str, Any], env: Mapping[str, str]) -> LedgerProbe:
    unknown = sorted(set(options) - {"path", "authority"})
    if unknown or not isinstance(options.get("path"), str):
        raise ProbeConfigError(f"probe {name!r}: needs 'path' (and optionally 'authority'); "
                               f"unknown: {', '.join(unknown) or 'none'}")
    authority = Authority(options.get("authority", "lagging"))
    if authority not in (Authority.AUTHORITATIVE, Authority.LAGGING, Authority.WEAK):
        raise ProbeConfigError(f"probe {name!r}: authority must be authoritative, lagging or weak")
    return LedgerProbe(name, Path(options["path"]), authority)
