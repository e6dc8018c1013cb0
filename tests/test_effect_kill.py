"""`@effect` in a worker process that is SIGKILLed mid-charge, at 20 points spread over the
call (before the intent, while the provider holds the request, after it committed and before
the attempt is recorded, after), then started again: the restarted worker finishes the same
operation, and the provider holds exactly one charge. The workers are forked from a forkserver
with `reconciler.effect` imported (tests/effect_worker.py), so 40 workers cost forks, not
interpreter start-ups.

    worker ──ready── intent ── POST (sandbox delays, then commits) ── attempt ── exit
              ▲ kill at ready + k * step, k = 0..19; then the same worker again, unkilled
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.errors import UnknownOperationError
from reconciler.sandbox import RunningSandbox, running_sandbox
from reconciler.store.schema import open_store

import effect_worker

EXAMPLE_CONFIG = Path(__file__).parent.parent / "examples" / "reconciler.toml"
KILL_POINTS = 20
STEP_S = 0.02
#: The sandbox holds the first send this long before committing: the window to kill in.
DELAY_S = 0.2


@pytest.fixture(scope="module")
def sandbox() -> Iterator[RunningSandbox]:
    with running_sandbox() as handle:
        yield handle


def run_worker(args: list[str], kill_after_s: float | None) -> str:
    """Charge in a forked worker; killed `kill_after_s` after it is ready, or run to its end
    (then its result)."""
    ours, theirs = multiprocessing.Pipe()
    process = effect_worker.forkserver().Process(target=effect_worker.charge_once,
                                                 args=(*args, theirs), daemon=True)
    process.start()
    theirs.close()
    try:
        assert ours.poll(effect_worker.TIMEOUT_S), "the worker never opened its store"
        assert ours.recv() == "ready"
        if kill_after_s is None:
            assert ours.poll(effect_worker.TIMEOUT_S), "the worker never answered"
            out = repr(ours.recv())
            process.join(effect_worker.TIMEOUT_S)
            assert process.exitcode == 0, out
            return out
        time.sleep(kill_after_s)
        process.kill()  # SIGKILL
        process.join(10)
        return ""
    finally:
        if process.exitcode is None:
            process.kill()
            process.join(10)
        ours.close()


def phase(db: str, sandbox: RunningSandbox) -> str:
    """Where the killed worker stopped, as the store and the provider show it."""
    try:
        facts = open_store(db).facts("order-77")
    except UnknownOperationError:
        return "no intent"
    charged = any(r.provider == "pay" for r in sandbox.state.objects())
    attempts = len(facts.attempts)
    return f"intent, {attempts} attempt(s), {'charged' if charged else 'not charged'}"


def test_a_worker_killed_mid_charge_and_restarted_charges_once(
        sandbox: RunningSandbox, tmp_path: Path) -> None:
    config = tmp_path / "reconciler.toml"
    config.write_text(EXAMPLE_CONFIG.read_text().replace("http://127.0.0.1:8081", sandbox.url))
    phases: set[str] = set()
    for point in range(KILL_POINTS):
        sandbox.state.reset()
        db = f"sqlite:///{tmp_path / f'r{point}.db'}"
        run_worker([db, str(config), sandbox.url, f"delay={DELAY_S}"], point * STEP_S)
        time.sleep(DELAY_S * 2)  # an orphaned request of the killed worker has committed now
        phases.add(phase(db, sandbox))
        out = run_worker([db, str(config), sandbox.url, ""], None)
        charges = [r.ref for r in sandbox.state.objects()
                   if r.provider == "pay" and r.ref.startswith("pi_")]
        assert len(charges) == 1, f"kill point {point}: {charges}\n{out}"
        assert "result" in out
    # The kill points reached the window that matters: charged, and no attempt recorded.
    assert "intent, 0 attempt(s), charged" in phases, phases
