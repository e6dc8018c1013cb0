"""What probe calls reuse from call to call, and what they must not: a daemon thread per call
in flight (a hung call keeps its own), or for an asynchronous probe one probe loop for them all;
an HTTP client per call in flight, never a cookie."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime

import httpx

from probes.base import ProbeTarget
from probes.runner import ProbeThreads
from probes.transport import Clients
from reconciler.core.domain import Authority, Observation
from reconciler.core.sight import Sight
from reconciler.testing import FakeProbe
from reconciler.testing.patience import PATIENCE_S

from probe_harness import charge, observe, probe, target


class ThreadNoting:
    """A fake probe's answer that notes the thread each call runs on; a call for operation
    "hangs" sets `hanging` once it runs, then waits for `release`."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.hanging, self.release = threading.Event(), threading.Event()
        self.fake = FakeProbe(answer=self.answer, name="noting")

    def answer(self, t: ProbeTarget) -> Observation:
        self.threads.append(threading.get_ident())
        if t.operation_id == "hangs":
            self.hanging.set()
            self.release.wait(PATIENCE_S)
        return Observation(t.operation_id, datetime.now(UTC), "noting", Authority.WEAK)


def test_calls_one_after_another_reuse_one_thread() -> None:
    threads, noting = ProbeThreads(), ThreadNoting()
    for _ in range(5):
        threads.submit(noting.fake, target()).result(PATIENCE_S)
    threads.close()
    assert len(set(noting.threads)) == 1 and threading.get_ident() not in noting.threads


def test_a_hung_call_keeps_its_thread_and_the_next_call_gets_another() -> None:
    threads, noting = ProbeThreads(), ThreadNoting()
    hung = threads.submit(noting.fake, target(operation_id="hangs"))
    # The next call comes while the hung one is under way on its thread. Without this wait, a
    # loaded machine may not have started the hung call (nor noted its thread) yet.
    assert noting.hanging.wait(PATIENCE_S)
    answered = threads.submit(noting.fake, target()).result(PATIENCE_S)
    assert not hung.done() and isinstance(answered, Observation)
    assert len(set(noting.threads)) == 2
    noting.release.set()
    assert isinstance(hung.result(PATIENCE_S), Observation)
    threads.close()


def test_a_probe_that_raises_past_exception_answers_unavailable() -> None:
    exits = FakeProbe(SystemExit(3), name="exits")
    answer = ProbeThreads().submit(exits, target()).result(PATIENCE_S)
    assert isinstance(answer, Observation) and answer.authority is Authority.UNAVAILABLE
    assert answer.error == "probe raised SystemExit"


def test_an_idle_client_is_reused_and_a_busy_one_never_shared() -> None:
    clients = Clients({}, httpx.MockTransport(lambda request: httpx.Response(200)))
    with clients.client() as first, clients.client() as second:
        assert second is not first
    with clients.client() as again:
        assert again in (first, second)


def test_a_cookie_set_on_one_call_is_not_sent_with_the_next() -> None:
    sent: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("cookie"))
        return httpx.Response(200, json={"data": [charge("ch_1")]},
                              headers={"set-cookie": "session=abc; Path=/"})

    p = probe("stripe.payment_intents.search", handler)
    observe(p)
    observe(p)
    assert sent == [None, None]


class LoopNoting:
    """An asynchronous probe noting the thread each call runs on; a call for "hangs" waits
    (on the loop, without blocking it) for `release`; one for "raises" raises."""

    name = "loop-noting"
    sight = Sight()

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.release: asyncio.Event | None = None

    def probe(self, t: ProbeTarget) -> Observation:
        raise AssertionError("the sweep's calls of an asynchronous probe go to aprobe")

    async def aprobe(self, t: ProbeTarget) -> Observation:
        self.threads.append(threading.current_thread().name)
        if t.operation_id == "hangs":
            self.release = asyncio.Event()
            await asyncio.wait_for(self.release.wait(), PATIENCE_S)
        if t.operation_id == "raises":
            raise ValueError("provider trouble")
        return Observation(t.operation_id, datetime.now(UTC), self.name, Authority.WEAK)


def test_an_asynchronous_probes_calls_are_tasks_on_one_probe_loop() -> None:
    threads, noting = ProbeThreads(), LoopNoting()
    hung = threads.submit(noting, target(operation_id="hangs"))
    answers = [threads.submit(noting, target()).result(PATIENCE_S) for _ in range(3)]
    # The hung call holds no thread: the others answered on the same loop meanwhile.
    assert not hung.done() and all(isinstance(a, Observation) for a in answers)
    assert set(noting.threads) == {"probe-loop"}
    threads.close()
    # Closing the loop cancels the hung call: it answers unavailable, never an exception.
    cut = hung.result(PATIENCE_S)
    assert isinstance(cut, Observation)
    assert cut.authority is Authority.UNAVAILABLE and cut.error == "probe raised CancelledError"


def test_an_asynchronous_probe_that_raises_answers_unavailable() -> None:
    threads = ProbeThreads()
    answer = threads.submit(LoopNoting(), target(operation_id="raises")).result(PATIENCE_S)
    threads.close()
    assert isinstance(answer, Observation) and answer.authority is Authority.UNAVAILABLE
    assert answer.error == "probe raised ValueError"
