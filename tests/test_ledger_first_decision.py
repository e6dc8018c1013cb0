"""Recording a new intent judges it from the intent alone (no read-back of what was just
written), and answers and caches exactly what a full judgement would."""

from dataclasses import replace

import pytest

from reconciler.core.verdicts import NextAction
from reconciler.ledger import Ledger
from reconciler.store.sql import SqlStore
from reconciler.testing import ManualClock

from builders import CONTRACT, T0, intent

#: The cached first decision is kept by the SQL stores: the `store` fixture gives those two.
pytestmark = pytest.mark.store_kinds("sqlite", "postgresql")


def test_a_new_intent_is_answered_as_a_full_judgement_would_answer_it(store: SqlStore) -> None:
    store.put_contract(CONTRACT)
    ledger = Ledger(store, clock=ManualClock(T0))
    recorded = ledger.record_intent(intent())
    assert recorded.created
    assert recorded.judgement == ledger.judge(intent().operation_id)


def test_a_new_intent_whose_first_decision_is_not_the_stored_one_is_cached_as_decided(
        store: SqlStore) -> None:
    # No time to reconcile: the engine escalates at once, which is not what the store caches
    # with a new intent, so the decision must be written.
    store.put_contract(replace(CONTRACT, reconcile_deadline_s=0))
    ledger = Ledger(store, clock=ManualClock(T0))
    recorded = ledger.record_intent(intent())
    assert recorded.judgement.decision.next_action == NextAction.ESCALATE
    [summary] = store.list_operations()
    assert summary.next_action == NextAction.ESCALATE
