"""A run's events as server-sent events: what a streaming runs request answers with.

One SSE event per run event, in sequence order, its `id:` the event's seq, so a client that
lost the connection reconnects with `Last-Event-ID: <seq>` and gets the rest from the journal,
then the events as they are appended:

    POST /v1/runs (stream) ─ id:1 run_created ─ id:2 run_started ─ … id:7 ┤ connection lost
    GET  /v1/runs/r/events, Last-Event-ID: 7 ─ id:8 (journal) ─ … ─ id:15 run_completed ┤ end

The events are read back from the journal, never handed over by the worker, so the stream is
the run's record whichever process advances it. A stream ends once the run comes to rest:
completed, stopped, waiting for a human, or paused for a continue request (format: the WHATWG
HTML "server-sent events" section: `id`, `event`, `data` fields, a blank line per event).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from starlette.responses import StreamingResponse

from reconciler.core.errors import RunConflictError, RunError
from reconciler.core.ports import Journal
from reconciler.core.runs.events import RunEvent, RunView
from reconciler.core.runs.states import RunState
from reconciler.runtime.wire import RunEventOut

MEDIA_TYPE = "text/event-stream"
#: How often a stream looks for new events while the run is being advanced.
POLL_S = 0.05
#: A comment line this often keeps proxies from closing an idle stream.
KEEPALIVE_S = 15.0
#: The longest a stream follows a run nobody in this request advances.
FOLLOW_MAX_S = 600.0
_AT_REST = frozenset({RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED,
                      RunState.TIMED_OUT, RunState.AWAITING_APPROVAL})
#: Keeps the advances of streaming requests referenced: a client that disconnects does not stop
#: its run, which goes on to its deadline and pauses.
_WORK: set[asyncio.Task[Any]] = set()


def wants_stream(accept: str | None, stream: bool) -> bool:
    """`"stream": true` in the body, or an Accept header that names text/event-stream."""
    return stream or MEDIA_TYPE in (accept or "")


def last_event_id(headers: Mapping[str, str]) -> int | None:
    """The seq a reconnecting client saw last; a malformed header counts as none."""
    value = headers.get("last-event-id", "").strip()
    return int(value) if value.isdigit() else None


def at_rest(view: RunView) -> bool:
    """Nothing more happens to the run until someone asks: its stream may end."""
    return view.state in _AT_REST or view.continue_request is not None


def sse(event: RunEvent) -> str:
    out = RunEventOut(seq=event.seq, kind=event.kind, at=event.at, data=dict(event.data))
    body = {"run_id": event.run_id, **out.model_dump(mode="json")}
    return (f"id: {event.seq}\nevent: {event.kind.value}\n"
            f"data: {json.dumps(body, separators=(',', ':'))}\n\n")


def problem_event(kind: str, detail: str, run_id: str) -> str:
    body = {"type": kind, "detail": detail, "run_id": run_id}
    return f"event: problem\ndata: {json.dumps(body, separators=(',', ':'))}\n\n"


def seed_event(data: Mapping[str, Any]) -> str:
    """An event of seed 003's protocol, named by its own `type` (no id: not a run event)."""
    return f"event: {data['type']}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


#: Given the run where the stream stopped, a last SSE event to send (or None).
Finale = Callable[[RunView], str | None]


def stream_response(journal: Journal, run_id: str, after: int,
                    work: Awaitable[Any] | None = None, *, status_code: int = 200,
                    finale: Finale | None = None) -> StreamingResponse:
    """Answer with the run's events after `after`, following them live while `work` (the
    request's advance, started here as a task) runs, or until the run comes to rest; then
    `finale`'s event, if any."""
    task = None
    if work is not None:
        task = asyncio.ensure_future(work)
        _WORK.add(task)
        task.add_done_callback(_WORK.discard)
    return StreamingResponse(_with_finale(journal, run_id, _follow(journal, run_id, after, task),
                                          finale),
                             status_code=status_code, media_type=MEDIA_TYPE,
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _with_finale(journal: Journal, run_id: str, events: AsyncIterator[str],
                       finale: Finale | None) -> AsyncIterator[str]:
    async for event in events:
        yield event
    last = finale(journal.load(run_id)) if finale is not None else None
    if last is not None:
        yield last


async def _follow(journal: Journal, run_id: str, after: int,
                  task: asyncio.Task[Any] | None) -> AsyncIterator[str]:
    last, quiet_since, started = after, time.monotonic(), time.monotonic()
    while True:
        if task is not None and task.done():
            error = task.exception()
            task = None
            if error is not None and not isinstance(error, RunConflictError):
                # Anything but "another worker has it" ends the stream with what went wrong;
                # another worker's advance is followed like any other.
                for event in journal.events(run_id, last):
                    yield sse(event)
                yield problem_event(type(error).__name__, str(error),
                                    error.run_id if isinstance(error, RunError) else run_id)
                return
            if error is None:
                for event in journal.events(run_id, last):
                    yield sse(event)
                return
        # Load first: every event up to the view's seq is then in the read below.
        view = journal.load(run_id) if task is None else None
        events = journal.events(run_id, last)
        for event in events:
            yield sse(event)
            last = event.seq
        now = time.monotonic()
        if events:
            quiet_since = now
        elif now - quiet_since > KEEPALIVE_S:
            quiet_since = now
            yield ": keep-alive\n\n"
        if view is not None and ((last >= view.seq and at_rest(view))
                                 or now - started > FOLLOW_MAX_S):
            return
        if task is not None:
            await asyncio.wait({task}, timeout=POLL_S)
        else:
            await asyncio.sleep(POLL_S * 2)
