"""What people list and count: operations page by page, what waits on a human, the providers.

The attention filters are the very rules of reconciler.core.attention, as SQL conditions on the
state row, so that a list, its counts and each item's reason always agree.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, and_, case, func, not_, or_
from sqlmodel import Session, col, select

from reconciler.core.attention import MUST_ACT, RULES, Reason, reason_of
from reconciler.core.ports import OperationSummary, Waiting
from reconciler.store.tables import IntentRow, StateRow


def operations(s: Session, *, verdict: str | None, escalated: bool | None,
               provider: str | None, attention: bool | None, run_id: str | None,
               after: str | None, limit: int) -> list[OperationSummary]:
    """Operations in id order, `limit` at a time, starting after the `after` cursor. Each
    filter leads an index that ends in the id (migration 0007): a page reads `limit` rows."""
    query = select(IntentRow, StateRow).join(
        StateRow, col(StateRow.operation_id) == col(IntentRow.operation_id))
    if verdict is not None:
        query = query.where(StateRow.verdict == verdict)
    if provider is not None:
        query = query.where(IntentRow.provider == provider)
    if escalated is not None:
        acting = _any_reason(MUST_ACT)
        query = query.where(acting if escalated else not_(acting))
    if attention is not None:
        looking = _any_reason(frozenset(Reason))
        query = query.where(looking if attention else not_(looking))
    if run_id is not None:
        query = query.where(IntentRow.run_id == run_id)
    # The same id on both sides of the join; the cursor runs on the filtered table's, so
    # the index it leads also gives the order (ordered by the state's id, a ?provider=
    # page sorted every match: 400 ms at a million).
    by_intent = (provider is not None or run_id is not None) and verdict is None \
        and escalated is None and attention is None
    cursor = col(IntentRow.operation_id) if by_intent else col(StateRow.operation_id)
    if after is not None:
        # On both sides of the join: PostgreSQL carries the join's equality across, not a
        # range, so with the cursor on one side its merge join scanned the other side's index
        # from the first id (EXPLAIN at a million, cursor half way: 446,722 intents read for
        # a page of 51, 216 ms; the console benchmark's deep cursor).
        query = query.where(col(IntentRow.operation_id) > after,
                            col(StateRow.operation_id) > after)
    query = query.order_by(cursor).limit(limit)
    return [_summary(i, st) for i, st in s.exec(query).all()]


def waiting_on_human(s: Session) -> list[Waiting]:
    """How many operations wait on a human for each reason, and since when the oldest."""
    reason = case(*[(_holds(needs), r.value) for r, needs in RULES])
    query = (select(reason, func.count(), func.min(StateRow.updated_at))
             .where(_any_reason(frozenset(Reason))).group_by(reason).order_by(reason))
    # min() keeps its argument's type: the times come back as UTC-aware datetimes.
    return [Waiting(r, n, oldest) for r, n, oldest in s.execute(query).all()]


def providers(s: Session, *, verdict: str | None) -> set[str]:
    """The providers with operations (with an operation of cached `verdict`)."""
    query = select(IntentRow.provider).distinct()
    if verdict is not None:
        query = query.join(StateRow, col(StateRow.operation_id) == col(
            IntentRow.operation_id)).where(StateRow.verdict == verdict)
    return set(s.exec(query).all())


def _holds(needs: dict[str, str | bool]) -> ColumnElement[bool]:
    """An attention rule's fields, as a condition on the state row."""
    return and_(*[getattr(StateRow, name) == value for name, value in needs.items()])


def _any_reason(reasons: frozenset[Reason]) -> ColumnElement[bool]:
    """The reason is one of `reasons`: the first rule that holds decides the reason, so a rule
    counts only where no earlier rule outside `reasons` holds."""
    conditions = []
    for n, (reason, needs) in enumerate(RULES):
        if reason in reasons:
            earlier = [_holds(e) for r, e in RULES[:n] if r not in reasons]
            conditions.append(and_(_holds(needs), *[not_(c) for c in earlier]))
    return or_(*conditions)


def _summary(intent: IntentRow, state: StateRow) -> OperationSummary:
    reason = reason_of(state.verdict, state.next_action, state.escalated)
    return OperationSummary(intent.operation_id, intent.provider, intent.action, state.verdict,
                            state.next_action, state.escalated, state.updated_at,
                            reason.value if reason else None)
