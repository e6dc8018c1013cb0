"""What probe calls reuse from call to call, and what they must not: a daemon thread per call
in flight (a hung call keeps its own), an HTTP client per call in flight, never a cookie."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import httpx

from probes.base import ProbeTarget
from probes.runner import ProbeThreads
from probes.transport import Clients
from reconciler.domain import Authority, Observation

from probe_harness import charge, observe, probe, target

#: Bound on every wait in these tests; none is expected to come near it.
PATIENCE_S = 10


class ThreadNoting:
    """A probe that notes the thread each call runs on; a call for operation "hangs" sets
    `hanging` once it runs, then waits for `release`."""

    name = "noting"

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.hanging, self.release = threading.Event(), threading.Event()

    def probe(self, t: ProbeTarget) -> Observation:
        self.threads.append(threading.get_ident())
        if t.operation_id == "hangs":
            self.hanging.set()
            self.release.wait(PATIENCE_S)
        return Observation(t.operation_id, datetime.now(UTC), self.name, Authority.WEAK)


def test_calls_one_after_another_reuse_one_thread() -> None:
    threads, noting = ProbeThreads(), ThreadNoting()
    for _ in range(5):
        threads.submit(noting, target()).result(PATIENCE_S)
    threads.close()
    assert len(set(noting.threads)) == 1 and threading.get_ident() not in noting.threads


def test_a_hung_call_keeps_its_thread_and_the_next_call_gets_another() -> None:
    threads, noting = ProbeThreads(), ThreadNoting()
    hung = threads.submit(noting, target(operation_id="hangs"))
    # The next call comes while the hung one is under way on its thread. Without this wait, a
    # loaded machine may not have started the hung call (nor noted its thread) yet.
    assert noting.hanging.wait(PATIENCE_S)
    answered = threads.submit(noting, target()).result(PATIENCE_S)
    assert not hung.done() and isinstance(answered, Observation)
    assert len(set(noting.threads)) == 2
    noting.release.set()
    assert isinstance(hung.result(PATIENCE_S), Observation)
    threads.close()


def test_a_probe_that_raises_past_exception_answers_unavailable() -> None:
    class Exits:
        name = "exits"

        def probe(self, t: ProbeTarget) -> Observation:
            raise SystemExit(3)

    answer = ProbeThreads().submit(Exits(), target()).result(PATIENCE_S)
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
