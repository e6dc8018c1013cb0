"""The testing kit users import (reconciler.testing): one manual clock every party reads, a fake
probe answering a script, the sandbox provider on that clock."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest

from probes.base import Probe, ProbeTarget, sight_of
from probes.runner import run_probe
from reconciler.core.domain import Authority, Observation, Receipt
from reconciler.core.sight import Sight
from reconciler.sandbox import RunningSandbox
from reconciler.sandbox.credentials import SandboxAuth
from reconciler.testing import FakeProbe, ManualClock, ManualMonotonic, manual_sandbox
from reconciler.testing.patience import PATIENCE_S

from probe_harness import target

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHARGE = {"amount": 1200, "currency": "eur", "metadata": {"operation_id": "op-1"}}


def seen(at: datetime, authority: Authority = Authority.AUTHORITATIVE) -> Observation:
    return Observation("op-1", at, "fake", authority)


# --- the manual clock ------------------------------------------------------------------------

def test_a_manual_clock_stands_still_until_advanced(clock: ManualClock) -> None:
    assert clock() == clock() == T0
    clock.advance(1.5)
    assert clock() == T0 + timedelta(seconds=1.5)


def test_a_manual_clock_reads_timezone_aware_utc_and_set_jumps_either_way() -> None:
    clock = ManualClock(datetime(2026, 6, 1, 14, 0, tzinfo=timezone(timedelta(hours=2))))
    assert clock() == datetime(2026, 6, 1, 12, 0, tzinfo=UTC) and clock().tzinfo is UTC
    clock.set(T0)
    assert clock() == T0


def test_a_manual_clock_refuses_a_naive_time_and_going_back_by_advance() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        ManualClock(datetime(2026, 1, 1))
    clock = ManualClock()
    with pytest.raises(ValueError, match="timezone-aware"):
        clock.set(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="cannot advance"):
        clock.advance(-1)
    assert clock() == T0


def test_a_stepping_clock_gives_each_reading_a_later_time() -> None:
    clock = ManualClock(T0, step=timedelta(milliseconds=1))
    first, second = clock(), clock()
    assert T0 < first < second and second - first == timedelta(milliseconds=1)


def test_the_sandbox_reads_the_same_instant_in_unix_seconds(clock: ManualClock) -> None:
    clock.advance(0.25)
    assert clock.now() == (T0 + timedelta(seconds=0.25)).timestamp()


# --- the manual monotonic clock --------------------------------------------------------------

def test_a_manual_monotonic_clock_moves_only_when_advanced_or_slept_on() -> None:
    mono = ManualMonotonic(start=50.0)
    assert mono() == mono() == 50.0
    mono.advance(2.5)
    mono.sleep(10)
    assert mono() == 62.5 and mono.slept == [10]


def test_a_manual_monotonic_clock_never_goes_back() -> None:
    mono = ManualMonotonic()
    with pytest.raises(ValueError, match="cannot advance"):
        mono.advance(-1)
    with pytest.raises(ValueError, match="cannot advance"):
        mono.sleep(-1)
    assert mono() == 1000.0 and mono.slept == []


# --- the fake probe --------------------------------------------------------------------------

def test_a_fake_probe_is_a_probe() -> None:
    assert isinstance(FakeProbe(seen(T0)), Probe)


def test_a_fake_probe_answers_its_script_in_order_then_repeats_the_last() -> None:
    weak, zero = seen(T0, Authority.WEAK), seen(T0)
    receipt = Receipt("op-1", T0, "ch_1", "sha256:h0", "lookup")
    probe = FakeProbe(weak, receipt, zero)
    assert [probe.probe(target()) for _ in range(4)] == [weak, receipt, zero, zero]


def test_a_fake_probe_records_each_target_it_was_asked_about() -> None:
    probe = FakeProbe(answer=lambda t: Observation(t.operation_id, T0, "fake", Authority.WEAK))
    probe.probe(target(operation_id="op-1"))
    probe.probe(target(operation_id="op-2"))
    assert probe.asked == ["op-1", "op-2"] and probe.calls[1] == target(operation_id="op-2")


def test_a_fake_probe_that_raises_is_evidence_of_nothing(clock: ManualClock) -> None:
    probe = FakeProbe(TimeoutError("provider hangs"), name="flaky")
    with pytest.raises(TimeoutError):
        probe.probe(target())
    answer = run_probe(probe, target(), clock=clock)
    assert isinstance(answer, Observation) and answer.authority is Authority.UNAVAILABLE
    assert answer.error == "probe raised TimeoutError" and len(probe.calls) == 2


def test_a_fake_probe_takes_a_script_or_a_function_not_both_nor_neither() -> None:
    with pytest.raises(ValueError):
        FakeProbe()
    with pytest.raises(ValueError):
        FakeProbe(seen(T0), answer=lambda t: seen(T0))


def test_a_fake_probe_without_a_sight_is_one_the_reconciler_sees_nothing_through(
        caplog: pytest.LogCaptureFixture) -> None:
    assert FakeProbe(seen(T0)).sight == Sight()
    sightless = FakeProbe(seen(T0), name="sightless", sight=None)
    assert not hasattr(sightless, "sight")
    with caplog.at_level(logging.WARNING, logger="probes.base"):
        assert sight_of(sightless) == Sight()
    assert "'sightless' has no sight" in caplog.text


def test_waiting_for_a_fake_probes_call_returns_once_one_has_begun() -> None:
    release = threading.Event()

    def held(t: ProbeTarget) -> Observation:
        release.wait(PATIENCE_S)
        return seen(T0)

    probe = FakeProbe(answer=held)
    assert not probe.wait_for_call(0.01)
    caller = threading.Thread(target=probe.probe, args=(target(),))
    caller.start()
    assert probe.wait_for_call(PATIENCE_S) and caller.is_alive()  # under way, not answered
    release.set()
    caller.join(PATIENCE_S)
    assert probe.wait_for_call(0) and probe.asked == ["op-1"]


# --- the sandbox on a manual clock -----------------------------------------------------------

def test_the_sandbox_clock_fixture_dates_what_the_sandbox_stores(
        sandbox: RunningSandbox, sandbox_clock: ManualClock) -> None:
    sandbox_clock.advance(30)
    charge = httpx.post(f"{sandbox.url}/pay/v1/charges", json=CHARGE, auth=SandboxAuth(),
                        timeout=PATIENCE_S).json()
    assert charge["created"] == int((T0 + timedelta(seconds=30)).timestamp())


def test_manual_sandbox_runs_a_server_on_the_clock_it_was_given() -> None:
    given = ManualClock(T0 + timedelta(days=1))
    with manual_sandbox(given) as (sandbox, clock):
        charge = httpx.post(f"{sandbox.url}/pay/v1/charges", json=CHARGE, auth=SandboxAuth(),
                            timeout=PATIENCE_S).json()
    assert clock is given and charge["created"] == int(given.now())
