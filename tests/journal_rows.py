"""What the tests read straight from a SqlJournal's tables: the summary rows list views will
read, and the unique tool-result rows that keep a call from having two results."""

from __future__ import annotations

from sqlmodel import col, select

from reconciler.core.errors import UnknownRunError
from reconciler.store.journal import SqlJournal
from reconciler.store.tables import RunRow, ToolResultRow


def summary_row(journal: SqlJournal, run_id: str) -> RunRow:
    with journal.store.session() as s:
        row = s.get(RunRow, run_id)
    if row is None:
        raise UnknownRunError(run_id)
    return row


def run_ids(journal: SqlJournal, state: str | None = None) -> list[str]:
    query = select(RunRow.run_id)
    if state is not None:
        query = query.where(RunRow.state == state)
    with journal.store.session() as s:
        return list(s.exec(query.order_by(col(RunRow.created_at))).all())


def result_keys(journal: SqlJournal, run_id: str) -> set[tuple[int, str]]:
    """(turn, tool call id) of every recorded result of the run."""
    with journal.store.session() as s:
        rows = s.exec(select(ToolResultRow).where(ToolResultRow.run_id == run_id)).all()
    return {(r.turn, r.tool_call_id) for r in rows}
