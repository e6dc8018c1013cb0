"""`@effect` in a worker process that is SIGKILLed mid-charge, at 20 points spread over the
call (before the intent, while the provider holds the request, after it committed and before
the attempt is recorded, after), then started again: the restarted worker finishes the same
operation, and the provider holds exactly one charge.

    worker ──ready── intent ── POST (sandbox delays, then commits) ── attempt ── exit
              ▲ kill at ready + k * step, k = 0..19; then the same worker again, unkilled
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.errors import UnknownOperationError
from reconciler.sandbox import RunningSandbox, running_sandbox
from reconciler.store.schema import open_store

EXAMPLE_CONFIG = Path(__file__).parent.parent / "examples" / "reconciler.toml"
KILL_POINTS = 20
STEP_S = 0.02
#: The sandbox holds the first send this long before committing: the window to kill in.
DELAY_S = 0.2

WORKER = '''
import sys
from pathlib import Path
import httpx
from reconciler.effect import current_call, effect
from reconciler.effect_backends import EmbeddedBackend

db, config, provider, fault = sys.argv[1:5]
body = {"amount": 1200, "currency": "eur", "confirm": True, "payment_method": "pm_card_visa",
        "metadata": {"operation_id": "order-77"}}
with EmbeddedBackend(db, config=Path(config)) as store:

    @effect(provider="stripe", action="payment_intents.create", key="order-77", params=body,
            backend=store)
    def charge() -> dict:
        call = current_call()
        headers = {"Idempotency-Key": call.intent.idempotency_key}
        if fault:
            headers["X-Sandbox-Fault"] = fault
        response = httpx.post(f"{provider}/pay/v1/payment_intents", json=body,
                              headers=headers, timeout=5.0)
        return response.json()

    print("ready", flush=True)
    print("result", charge(), flush=True)
'''


@pytest.fixture(scope="module")
def sandbox() -> Iterator[RunningSandbox]:
    with running_sandbox() as handle:
        yield handle


def run_worker(script: Path, args: list[str], kill_after_s: float | None) -> str:
    process = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    try:
        if kill_after_s is None:
            out, _ = process.communicate(timeout=60)
            assert process.returncode == 0, out
            return out
        line = process.stdout.readline()
        assert line.startswith("ready"), line
        time.sleep(kill_after_s)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        return ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


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
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    phases: set[str] = set()
    for point in range(KILL_POINTS):
        sandbox.state.reset()
        db = f"sqlite:///{tmp_path / f'r{point}.db'}"
        run_worker(script, [db, str(config), sandbox.url, f"delay={DELAY_S}"], point * STEP_S)
        time.sleep(DELAY_S * 2)  # an orphaned request of the killed worker has committed now
        phases.add(phase(db, sandbox))
        out = run_worker(script, [db, str(config), sandbox.url, ""], None)
        charges = [r.ref for r in sandbox.state.objects()
                   if r.provider == "pay" and r.ref.startswith("pi_")]
        assert len(charges) == 1, f"kill point {point}: {charges}\n{out}"
        assert "result" in out
    # The kill points reached the window that matters: charged, and no attempt recorded.
    assert "intent, 0 attempt(s), charged" in phases, phases
