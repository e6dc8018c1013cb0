"""Provider names the configuration knows, and intents that name another.

An intent whose provider the configuration does not know gets the cautious default contract
and no probes: it is never reconciled, only escalated at its deadline. That is usually a typo
or a missing `[providers.*]` table, so the service says so: at start for the undecided
operations already in the store, and for each new intent in a counter
(`reconciler_unknown_provider_intents_total`) and a warning the first time a name is seen.
"""

from __future__ import annotations

import logging
import threading

from reconciler.core.domain import Verdict
from reconciler.core.errors import StoreUnavailableError
from reconciler.core.ports import Store
from reconciler.infra.metrics import UNKNOWN_PROVIDER_INTENTS

log = logging.getLogger(__name__)

#: Names warned about once each; past this many, only the counter speaks (a client sending
#: random names must not grow the process).
MAX_WARNED = 100


class ProviderNames:
    """`known`: the configured providers; None when there is no configuration to judge by."""

    def __init__(self, known: frozenset[str] | None) -> None:
        self.known = known
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def note_intent(self, provider: str) -> None:
        """Count a newly recorded intent whose provider is not configured."""
        if self.known is None or provider in self.known:
            return
        UNKNOWN_PROVIDER_INTENTS.inc()
        with self._lock:
            first = provider not in self._warned and len(self._warned) < MAX_WARNED
            if first:
                self._warned.add(provider)
        if first:
            log.warning("intent for provider %r, which the configuration does not know: no "
                        "probes will run for it (known: %s)", provider,
                        ", ".join(sorted(self.known)) or "none")

    def warn_undecided(self, store: Store) -> None:
        """At start: name the unknown providers of operations still undecided in the store."""
        if self.known is None:
            return
        try:
            names = sorted(store.providers(verdict=Verdict.INDETERMINATE.value) - self.known)
        except StoreUnavailableError as exc:
            log.warning("could not check the store for unknown providers: %s", exc)
            return
        if names:
            log.warning("undecided operations name providers the configuration does not know "
                        "(they are never probed): %s", ", ".join(names))
