"""Which settled operations a store may forget. Pure: facts, contract and time in, yes or no.

An operation may be removed only when nothing can still change or use it:

    settled      its verdict is verified_applied or verified_not_applied (the store's query);
                 nothing a human must look at (attention) is ever settled
    quiet        its verdict was decided before the cut-off (the store's query)
    past retry   the provider's key retention has run out since the latest dispatch: no retry
                 with the same key could still be granted or arrive
    exportable   every fact it has can be written as SPEC NDJSON (a refused retry cannot), so
                 what is removed can be replayed to the same verdict
"""

from __future__ import annotations

from datetime import datetime, timedelta

from reconciler.core.domain import Facts, ProviderContract, RefusedRetry, Verdict

SETTLED = (Verdict.VERIFIED_APPLIED.value, Verdict.VERIFIED_NOT_APPLIED.value)


def removable(facts: Facts, contract: ProviderContract, now: datetime) -> bool:
    """True when a settled operation may be removed at `now` (see the module's rules)."""
    latest = max([facts.intent.at, *(a.at for a in facts.attempts)])
    if latest + timedelta(seconds=contract.key_retention_s) > now:
        return False
    return not facts.of(RefusedRetry)
