"""service.loop_calls: a synchronous call on the event loop, in a greenlet SQLAlchemy's `await_`
waits in, kept for the next call; it behaves as SQLAlchemy's `greenlet_spawn`."""

import asyncio
import contextvars
import gc
import weakref

import pytest
from sqlalchemy.util.concurrency import await_, in_greenlet

from reconciler.service import loop_calls
from reconciler.service.loop_calls import call_in_greenlet

WHO = contextvars.ContextVar("who", default="nobody")


def later(value: object, delay_s: float = 0.001) -> object:
    """Waits (through the caller's coroutine) for `value` to be ready, then returns it."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[object] = loop.create_future()
    loop.call_later(delay_s, ready.set_result, value)
    return await_(ready)


def idle() -> list[object]:
    runners: list[object] = loop_calls._idle.__dict__.setdefault("runners", [])
    return runners


def test_a_call_returns_what_the_function_returns_after_waiting_through_await() -> None:
    assert asyncio.run(call_in_greenlet(later, "answer")) == "answer"


def test_the_function_runs_where_sqlalchemy_lets_it_wait() -> None:
    assert asyncio.run(call_in_greenlet(in_greenlet)) is True


def test_a_finished_call_leaves_its_greenlet_for_the_next_one() -> None:
    async def twice() -> tuple[int, int]:
        await call_in_greenlet(later, 1)
        first = id(idle()[-1])
        await call_in_greenlet(later, 2)
        return first, id(idle()[-1])

    first, second = asyncio.run(twice())
    assert first == second


def test_calls_in_flight_together_each_get_their_own_answer() -> None:
    async def many() -> list[object]:
        return list(await asyncio.gather(*(call_in_greenlet(later, n, 0.001 * (n % 5))
                                            for n in range(50))))

    assert asyncio.run(many()) == list(range(50))


def test_what_the_function_raises_reaches_the_caller_and_the_greenlet_serves_again() -> None:
    def fails() -> None:
        later(None)
        raise LookupError("no such operation")

    async def then_again() -> object:
        with pytest.raises(LookupError, match="no such operation"):
            await call_in_greenlet(fails)
        return await call_in_greenlet(later, "still serving")

    assert asyncio.run(then_again()) == "still serving"


def test_a_failed_awaitable_is_raised_where_the_function_awaited_it() -> None:
    def catches() -> str:
        failed: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        failed.set_exception(TimeoutError("the commit timed out"))
        try:
            await_(failed)
        except TimeoutError as exc:
            return f"caught: {exc}"
        return "not raised"

    assert asyncio.run(call_in_greenlet(catches)) == "caught: the commit timed out"


def test_a_cancelled_caller_cancels_the_wait_inside_and_the_greenlet_serves_again() -> None:
    seen: list[str] = []

    def waits() -> object:
        try:
            return later("never", delay_s=10)
        except asyncio.CancelledError:
            seen.append("cancelled inside")
            raise

    async def cancel_then_call() -> object:
        task = asyncio.ensure_future(call_in_greenlet(waits))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await call_in_greenlet(later, "after")

    assert asyncio.run(cancel_then_call()) == "after"
    assert seen == ["cancelled inside"]


def test_the_function_sees_the_callers_context_variables() -> None:
    def who() -> str:
        later(None)
        return WHO.get()

    async def as_someone(name: str) -> str:
        WHO.set(name)
        return await call_in_greenlet(who)

    async def both() -> list[str]:
        return list(await asyncio.gather(as_someone("worker-a"), as_someone("worker-b")))

    assert asyncio.run(both()) == ["worker-a", "worker-b"]


def test_an_idle_greenlet_keeps_nothing_of_its_last_call() -> None:
    class Big:
        pass

    made: list[weakref.ref[Big]] = []

    def returns_big() -> Big:
        big = Big()
        made.append(weakref.ref(big))
        return big

    async def run() -> bool:
        await call_in_greenlet(returns_big)
        gc.collect()
        # Alive only if something (the idle greenlet, its frame) still holds it.
        return made[0]() is not None

    assert asyncio.run(run()) is False
