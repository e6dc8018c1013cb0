"""Body reads under one deadline timer per loop (service.intake._Deadlines): a read that waits
past the timeout is a TimeoutError where it awaited; a read that is answered, or cancelled by
someone else, is what it would be without a deadline; the timer runs only while reads wait."""

from __future__ import annotations

import asyncio

import pytest

from reconciler.service.intake import _Deadlines

TIMEOUT_S = 0.2


async def _never() -> dict[str, object]:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def _answered() -> dict[str, object]:
    await asyncio.sleep(0)
    return {"type": "http.request", "body": b"{}", "more_body": False}


def test_a_read_past_its_deadline_raises_timeout_error_within_a_tick() -> None:
    async def scenario() -> float:
        deadlines = _Deadlines(TIMEOUT_S)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            await deadlines.read(_never)
        return loop.time() - started

    waited = asyncio.run(scenario())
    assert TIMEOUT_S <= waited <= TIMEOUT_S + _Deadlines(TIMEOUT_S).tick_s + 0.5


def test_an_answered_read_returns_its_message_and_leaves_the_timer_stopped() -> None:
    async def scenario() -> tuple[object, object, bool]:
        deadlines = _Deadlines(TIMEOUT_S)
        message = await deadlines.read(_answered)
        running = deadlines._timer is not None
        await asyncio.sleep(deadlines.tick_s * 2)  # the timer's next tick finds nobody waiting
        return message, running, deadlines._timer is None

    message, was_running, stopped = asyncio.run(scenario())
    assert message == {"type": "http.request", "body": b"{}", "more_body": False}
    assert was_running and stopped


def test_a_read_cancelled_by_someone_else_stays_cancelled() -> None:
    async def scenario() -> asyncio.Task[object]:
        deadlines = _Deadlines(TIMEOUT_S)
        reading = asyncio.ensure_future(deadlines.read(_never))
        await asyncio.sleep(0.01)
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
        return reading

    assert asyncio.run(scenario()).cancelled()


def test_a_read_past_its_deadline_and_cancelled_by_someone_else_stays_cancelled() -> None:
    async def scenario() -> asyncio.Task[object]:
        deadlines = _Deadlines(TIMEOUT_S)
        reading = asyncio.ensure_future(deadlines.read(_never))
        await asyncio.sleep(0.01)
        deadlines._waiting[reading] = 0.0  # its deadline long past: this tick expires it
        deadlines._check()
        reading.cancel()  # a shutdown, say, before the read has run again
        await asyncio.gather(reading, return_exceptions=True)
        return reading

    assert asyncio.run(scenario()).cancelled()


def test_only_reads_past_their_deadline_are_cut_off() -> None:
    async def scenario() -> tuple[bool, bool]:
        deadlines = _Deadlines(TIMEOUT_S)
        stalled = asyncio.ensure_future(deadlines.read(_never))
        await asyncio.sleep(TIMEOUT_S / 2)
        later = asyncio.ensure_future(deadlines.read(_never))
        await asyncio.gather(stalled, return_exceptions=True)
        later_alive = not later.done()
        later.cancel()
        await asyncio.gather(later, return_exceptions=True)
        return isinstance(stalled.exception(), TimeoutError), later_alive

    stalled_timed_out, later_alive = asyncio.run(scenario())
    assert stalled_timed_out and later_alive
