"""GET /v1/runs: the runs an operator pages through, from the journal's summary rows.

Listing needs no agent (it reads the store, it runs nothing), so it has its own router beside
the runs API's: a sidecar that only reconciles still shows the runs its fleet recorded.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from reconciler.core.ports import RunSummary
from reconciler.core.runs.states import RunState
from reconciler.core.schemas import Storable
from reconciler.runtime.wire import RUN_ID_MAX
from reconciler.service.auth import Reader
from reconciler.service.problems import problem_responses
from reconciler.service.wiring import Wired
from reconciler.store.kinds import journal_of


class RunQueryIn(BaseModel):
    """The query of the runs list; an unknown (misspelt) filter is an error, not ignored."""

    model_config = ConfigDict(extra="forbid")

    state: RunState | None = None
    # Storable: a NUL reached PostgreSQL as a 500 (schemathesis, ?after=...%00...).
    correlation_id: Annotated[str, Storable] | None = Field(None, min_length=1, max_length=200)
    unhealthy: bool | None = Field(None, description="true: runs with a false_success call")
    after: Annotated[str, Storable] | None = Field(None, max_length=RUN_ID_MAX,
                                                   description="next_cursor of the previous page")
    limit: int = Field(50, ge=1, le=500)


class RunSummaryOut(BaseModel):
    run_id: str
    state: RunState
    turn: int
    correlation_id: str | None
    stop_reason: str | None
    error_code: str | None
    unhealthy: bool = Field(description="a call of the run reported a success the provider "
                                        "does not show (false_success)")
    created_at: datetime
    updated_at: datetime


class RunListOut(BaseModel):
    items: list[RunSummaryOut]
    next_cursor: str | None = Field(None, description="pass as ?after= for the next page")


def run_summary_out(run: RunSummary) -> RunSummaryOut:
    return RunSummaryOut(run_id=run.run_id, state=RunState(run.state), turn=run.turn,
                         correlation_id=run.correlation_id, stop_reason=run.stop_reason,
                         error_code=run.error_code, unhealthy=run.unhealthy,
                         created_at=run.created_at, updated_at=run.updated_at)


router = APIRouter(prefix="/v1/runs", tags=["runs"])


@router.get("", response_model=RunListOut, responses=problem_responses(422))
def list_runs(wiring: Wired, query: Annotated[RunQueryIn, Query()],
              caller: Reader) -> RunListOut:
    """Runs in id order, filtered by state, correlation id and health, `limit` at a time."""
    page = journal_of(wiring.store).list_runs(
        state=query.state.value if query.state else None, correlation_id=query.correlation_id,
        unhealthy=query.unhealthy, after=query.after, limit=query.limit + 1)
    items = [run_summary_out(r) for r in page[:query.limit]]
    more = len(page) > query.limit
    return RunListOut(items=items, next_cursor=items[-1].run_id if more else None)
