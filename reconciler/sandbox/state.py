"""Everything the four fake providers remember, in memory, behind one lock.

Handlers run on the server's event loop while tests configure the sandbox and move its clock
from their own thread, hence a threading lock; no await ever happens while it is held.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from reconciler.infra.clock import Clock, SystemClock
from reconciler.sandbox.holds import Holds

JSONObject = dict[str, Any]

#: Builds one object from (store sequence number, clock time): its lookup reference and its
#: JSON as the provider shows it.
Build = Callable[[int, float], tuple[str, JSONObject]]


class SandboxConfig(BaseModel):
    """Read-side behaviour and the `lose_response` hold (docs/sandbox-api.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    search_lag_s: float = Field(default=0.0, ge=0)
    cached_list: bool = False
    read_unavailable: bool = False
    #: When positive, every provider read answers its provider's rate-limit answer, asking for
    #: a pause of this many seconds.
    rate_limited_s: float = Field(default=0.0, ge=0)
    #: True (the default): a request with no credential at all is refused as its provider
    #: refuses it. False: it is let through, for a caller that cannot send one; a malformed
    #: credential is refused either way.
    check_credentials: bool = True
    hold_s: float = Field(default=30.0, ge=0)
    #: How long an idempotency key is kept (Stripe: at least 24 hours), then forgotten.
    key_retention_s: float = Field(default=86_400.0, ge=0)


@dataclass(frozen=True, slots=True)
class Record:
    """One stored object. `scope` is where the provider files it (a chat channel, an
    "owner/repo"; empty when the provider has no such thing)."""

    provider: str
    scope: str
    ref: str
    seq: int
    created_at: float
    request_hash: str
    data: JSONObject


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A provider's record of an idempotency key; `response` is None while the first request
    holding the key is still in flight."""

    key: str
    request_hash: str
    created_at: float
    response: JSONObject | None = None
    status: int = 200


class SandboxState:
    """The objects, idempotency keys, read-side config and clock of one sandbox."""

    def __init__(self, clock: Clock | None = None) -> None:
        #: Public so a test can swap in a `ManualClock` (and advance it) while the server runs;
        #: each stored time comes from the clock that was current when the object was created.
        self.clock: Clock = clock or SystemClock()
        self.holds = Holds()
        self._lock = threading.Lock()
        # Never reset, so references (chat ts, issue numbers) are not reused after a reset.
        self._seq = 0
        self._config = SandboxConfig()
        self._records: dict[tuple[str, str], Record] = {}
        self._keys: dict[str, KeyRecord] = {}
        self._snapshot_seq: int | None = None
        self._armed: dict[tuple[str, str], str] = {}
        self._scopes: set[tuple[str, str]] = set()

    @property
    def config(self) -> SandboxConfig:
        with self._lock:
            return self._config

    def configure(self, **changes: float | bool) -> SandboxConfig:
        """Change some config fields (validated like `POST /_sandbox/config`); the rest stay."""
        with self._lock:
            self._config = SandboxConfig.model_validate(self._config.model_dump() | changes)
            if "cached_list" in changes:
                # The snapshot is taken by the first list call after cached_list is set.
                self._snapshot_seq = None
            return self._config

    def arm(self, root: str, faults: str, side: str = "write") -> None:
        """The next write (or, with side "read", the next read) under `root` (`pay`, `mail`,
        `chat`, `gh`, `twilio`) takes `faults` (as the `X-Sandbox-Fault` header would give
        them), for a client, like a provider's SDK, that sends no header of ours."""
        with self._lock:
            self._armed[root, side] = faults

    def take_armed(self, root: str, side: str = "write") -> str | None:
        with self._lock:
            return self._armed.pop((root, side), None)

    def reset(self) -> None:
        """Forget all objects, keys and config; the clock stays (it is the test's, not state)."""
        with self._lock:
            self._armed.clear()
            self._scopes.clear()
            self._config = SandboxConfig()
            self._records.clear()
            self._keys.clear()
            self._snapshot_seq = None

    def open_scope(self, provider: str, scope: str) -> None:
        """Make `scope` (a chat channel) exist, with or without objects in it."""
        with self._lock:
            self._scopes.add((provider, scope))

    def scope_open(self, provider: str, scope: str) -> bool:
        with self._lock:
            return (provider, scope) in self._scopes

    def commit(
        self, provider: str, request_hash: str, build: Build, *, copies: int, scope: str = ""
    ) -> Record:
        """Build max(copies, 1) objects, store the first `copies` of them (0 for a false
        success, 2 for a duplicate), and return the first."""
        with self._lock:
            now = self.clock.now()
            built = []
            for _ in range(max(copies, 1)):
                self._seq += 1
                ref, data = build(self._seq, now)
                built.append(Record(provider, scope, ref, self._seq, now, request_hash, data))
            for record in built[:copies]:
                self._records[provider, record.ref] = record
            return built[0]

    def get(self, provider: str, ref: str) -> Record | None:
        """By reference: strongly consistent, never lagging nor cached."""
        with self._lock:
            return self._records.get((provider, ref))

    def search(self, provider: str) -> list[Record]:
        """What a lagging search index sees: objects at least `search_lag_s` old, newest first."""
        with self._lock:
            horizon = self.clock.now() - self._config.search_lag_s
            return self._newest_first(provider, lambda r: r.created_at <= horizon)

    def listing(self, provider: str) -> list[Record]:
        """What a list endpoint sees, newest first: a frozen snapshot when `cached_list`."""
        with self._lock:
            if not self._config.cached_list:
                return self._newest_first(provider, lambda r: True)
            if self._snapshot_seq is None:
                self._snapshot_seq = self._seq
            cutoff = self._snapshot_seq
            return self._newest_first(provider, lambda r: r.seq <= cutoff)

    def objects(self) -> list[Record]:
        """Everything stored, oldest first."""
        with self._lock:
            return sorted(self._records.values(), key=lambda r: r.seq)

    def claim_key(self, key: str, request_hash: str) -> KeyRecord | None:
        """The existing record of `key`, or None after recording it as in flight for this
        request (check and claim are one step, so two concurrent requests cannot both win)."""
        with self._lock:
            now = self.clock.now()
            seen = self._keys.get(key)
            if seen is not None and now - seen.created_at > self._config.key_retention_s:
                seen = None  # pruned: a reused key makes a new request, as at Stripe
            if seen is None:
                self._keys[key] = KeyRecord(key, request_hash, now)
            return seen

    def finish_key(self, key: str, response: JSONObject, status: int = 200) -> None:
        with self._lock:
            seen = self._keys.get(key)
            if seen is not None:  # a reset while the request was in flight forgot it
                self._keys[key] = replace(seen, response=response, status=status)

    def release_key(self, key: str) -> None:
        """Forget `key` if its request never finished (nothing committed, so a retry is new)."""
        with self._lock:
            seen = self._keys.get(key)
            if seen is not None and seen.response is None:
                del self._keys[key]

    def key_record(self, key: str) -> KeyRecord | None:
        with self._lock:
            return self._keys.get(key)

    def _newest_first(self, provider: str, keep: Callable[[Record], bool]) -> list[Record]:
        found = [r for r in self._records.values() if r.provider == provider and keep(r)]
        return sorted(found, key=lambda r: r.seq, reverse=True)
