"""The clients honour the sidecar's overload refusals (reconciler/client/http.py): a call
refused with 503 `overloaded` is sent again as Retry-After asks, within the call's
`overload_deadline_s`; a wait past it, or any other 503, is the caller's error at once."""

import asyncio
import time

import httpx
import pytest

from reconciler.client import AsyncReconcilerClient, ReconcilerClient
from reconciler.client.calls import OVERLOADED
from reconciler.client.runs import RunsApiError, RunsClient
from reconciler.core.errors import ServiceError

EMPTY_PAGE: dict[str, object] = {"items": [], "next_cursor": None}


def refusal(type_: str = OVERLOADED, retry_after: str = "0") -> httpx.Response:
    return httpx.Response(503, headers={"Retry-After": retry_after,
                                        "Content-Type": "application/problem+json"},
                          json={"type": type_, "title": "t", "status": 503, "detail": "d"})


def answering(*answers: httpx.Response) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A transport answering each request with the next of `answers`, and what it was sent."""
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answers[len(sent) - 1]

    return httpx.MockTransport(handle), sent


def test_an_overloaded_call_is_sent_again_as_retry_after_asks() -> None:
    transport, sent = answering(refusal(), refusal(), httpx.Response(200, json=EMPTY_PAGE))
    with ReconcilerClient(transport=transport) as client:
        assert client.list().items == []
    assert len(sent) == 3
    assert {(r.method, r.url.path) for r in sent} == {("GET", "/v1/operations")}


def test_the_async_client_sends_an_overloaded_call_again_too() -> None:
    transport, sent = answering(refusal(), httpx.Response(200, json=EMPTY_PAGE))

    async def scenario() -> None:
        async with AsyncReconcilerClient(transport=transport) as client:
            assert (await client.list()).items == []

    asyncio.run(asyncio.wait_for(scenario(), 30))
    assert len(sent) == 2


def test_a_retry_after_past_the_deadline_is_raised_at_once() -> None:
    transport, sent = answering(refusal(retry_after="3600"))
    started = time.monotonic()
    with ReconcilerClient(transport=transport, overload_deadline_s=5) as client, \
            pytest.raises(ServiceError) as raised:
        client.list()
    assert time.monotonic() - started < 5
    assert raised.value.status == 503
    assert raised.value.problem["type"] == OVERLOADED
    assert len(sent) == 1


def test_waits_stop_at_the_deadline() -> None:
    transport, sent = answering(*[refusal(retry_after="1")] * 10)
    started = time.monotonic()
    with ReconcilerClient(transport=transport, overload_deadline_s=1.5) as client, \
            pytest.raises(ServiceError):
        client.list()
    # Waits of 1-1.25 s each: one fits in 1.5 s, a second would not.
    assert len(sent) == 2
    assert time.monotonic() - started < 1.5


def test_another_503_is_not_sent_again() -> None:
    transport, sent = answering(refusal("https://reconciler.dev/problems/store-unavailable"))
    with ReconcilerClient(transport=transport) as client, pytest.raises(ServiceError):
        client.list()
    assert len(sent) == 1


RUN = {"run_id": "run-1", "state": "completed", "continue_request": None}


def test_the_runs_client_sends_an_overloaded_run_again() -> None:
    # Refused before anything of it was read: sending the run again creates it once.
    transport, sent = answering(refusal(), httpx.Response(201, json=RUN),
                                refusal(), httpx.Response(200, json=RUN))
    with RunsClient(transport=transport) as client:
        assert client.run_task("book a slot")["run_id"] == "run-1"
    assert [(r.method, r.url.path) for r in sent] == [
        ("POST", "/v1/runs"), ("POST", "/v1/runs"), ("GET", "/v1/runs/run-1"),
        ("GET", "/v1/runs/run-1")]
    assert sent[0].content == sent[1].content


def test_the_runs_client_sends_an_overloaded_stream_again() -> None:
    events = b'event: response.completed\nid: 1\ndata: {"run_id": "run-1"}\n\n'
    transport, sent = answering(
        refusal(), httpx.Response(200, headers={"Content-Type": "text/event-stream"},
                                  content=events), httpx.Response(200, json=RUN))
    seen: list[dict[str, object]] = []
    with RunsClient(transport=transport) as client:
        assert client.run_task("book a slot", stream=True, on_event=seen.append)["run_id"] \
            == "run-1"
    assert [r.url.path for r in sent] == ["/v1/runs", "/v1/runs", "/v1/runs/run-1"]
    assert [event["event"] for event in seen] == ["response.completed"]


def test_the_runs_client_raises_an_overload_past_its_deadline() -> None:
    transport, sent = answering(refusal(retry_after="3600"))
    with RunsClient(transport=transport, overload_deadline_s=5) as client, \
            pytest.raises(RunsApiError) as raised:
        client.run_task("book a slot")
    assert raised.value.status == 503
    assert len(sent) == 1
