"""The hot routes' bounded admission (service/admission.py, `HotQueue`): past `hot_queue_max`
requests in flight, or while the oldest has waited `hot_queue_wait_s`, a new one is answered
503 `overloaded` with Retry-After at once, never queued; the requests admitted are answered as
before. The service's own hot routes are bounded by its settings."""

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request

from reconciler.client import AsyncReconcilerClient
from reconciler.core.schemas import IntentIn
from reconciler.service.admission import OVERLOADED, HotQueue
from reconciler.service.app import create_app
from reconciler.service.auth import require_worker
from reconciler.service.settings import Settings

from fault_harness import HASH

#: Generous: the machine is shared; a refusal must come long before a held request would end.
DEADLINE_S = 10.0
INTENT = {"operation_id": "op-1", "request_hash": HASH, "provider": "pay", "action": "charge",
          "effect": "idempotent_write"}


@asynccontextmanager
async def held_service(tmp_path: Path, **settings: float
                       ) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient, asyncio.Event]]:
    """The service and a client of it, its worker credential check held until the event is
    set: a stand-in for a store that stalls (the requests admitted wait inside the route, as
    on a slow commit)."""
    app = create_app(Settings(db=f"sqlite:///{tmp_path / 'r.db'}", **settings))
    release = asyncio.Event()

    async def held(request: Request) -> None:
        await release.wait()

    app.dependency_overrides[require_worker] = held
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as client:
        yield app, client, release


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(scenario, DEADLINE_S * 3))


async def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def timed(send: Awaitable[httpx.Response]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await send
    return response, time.monotonic() - started


def refused_as_overloaded(response: httpx.Response) -> None:
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == OVERLOADED.type


def queue_of(app: FastAPI) -> HotQueue:
    queue: HotQueue = app.state.hot_queue
    return queue


def test_the_service_bounds_its_hot_routes_by_its_settings(tmp_path: Path) -> None:
    queue = queue_of(create_app(Settings(db=f"sqlite:///{tmp_path / 'r.db'}", hot_queue_max=7,
                                         hot_queue_wait_s=0.25)))
    assert (queue.limit, queue.max_wait_s) == (7, 0.25)


def test_past_the_bound_a_hot_request_gets_503_with_retry_after_at_once(
        tmp_path: Path) -> None:
    run(past_the_bound(tmp_path))


async def past_the_bound(tmp_path: Path) -> None:
    async with held_service(tmp_path, hot_queue_max=3, hot_queue_wait_s=60) as (
            app, client, release):
        admitted = [asyncio.create_task(client.post(
            "/v1/operations", json={**INTENT, "operation_id": f"op-{n}"})) for n in range(3)]
        await until(lambda: queue_of(app).in_flight == 3)
        for path in ("/v1/operations", "/v1/operations/op-0", "/v1/operations/op-0/retry"):
            send = (client.get(path) if path.endswith("op-0")
                    else client.post(path, json={**INTENT, "request_hash": HASH}))
            response, took = await timed(send)
            refused_as_overloaded(response)
            assert took < DEADLINE_S / 2
            assert not any(task.done() for task in admitted)  # refused while they still wait
        release.set()
        answers = await asyncio.wait_for(asyncio.gather(*admitted), DEADLINE_S)
    assert [a.status_code for a in answers] == [201, 201, 201]
    assert queue_of(app).in_flight == 0


def test_while_the_oldest_has_waited_past_the_bound_a_new_one_gets_503(
        tmp_path: Path) -> None:
    run(past_the_wait(tmp_path))


async def past_the_wait(tmp_path: Path) -> None:
    async with held_service(tmp_path, hot_queue_max=100, hot_queue_wait_s=0.05) as (
            app, client, release):
        oldest = asyncio.create_task(client.post("/v1/operations", json=INTENT))
        await until(lambda: queue_of(app).in_flight == 1)
        waited_from = time.monotonic()
        await until(lambda: time.monotonic() - waited_from > 0.1)
        refused_as_overloaded(await client.post("/v1/operations",
                                                json={**INTENT, "operation_id": "op-2"}))
        release.set()
        assert (await asyncio.wait_for(oldest, DEADLINE_S)).status_code == 201
        # Drained: the next one is admitted again.
        again = await client.post("/v1/operations", json={**INTENT, "operation_id": "op-3"})
    assert again.status_code == 201


class Watched(httpx.ASGITransport):
    """The app in process, and the status of every answer it gave."""

    def __init__(self, app: FastAPI) -> None:
        super().__init__(app=app)
        self.statuses: list[int] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        self.statuses.append(response.status_code)
        return response


def test_the_client_sends_a_refused_call_again_once_admitted(tmp_path: Path) -> None:
    run(refused_then_admitted(tmp_path))


async def refused_then_admitted(tmp_path: Path) -> None:
    async with held_service(tmp_path, hot_queue_max=1, hot_queue_wait_s=60) as (
            app, client, release):
        first = asyncio.create_task(client.post("/v1/operations", json=INTENT))
        await until(lambda: queue_of(app).in_flight == 1)
        watched = Watched(app)
        async with AsyncReconcilerClient("http://127.0.0.1", transport=watched,
                                         overload_deadline_s=DEADLINE_S) as sidecar:
            second = asyncio.create_task(sidecar.record_intent(
                IntentIn.model_validate({**INTENT, "operation_id": "op-2"})))
            await until(lambda: watched.statuses == [503])
            release.set()
            reply = await second
        assert (await first).status_code == 201
    assert (reply.created, reply.value.intent.operation_id) == (True, "op-2")
    assert watched.statuses == [503, 201]
