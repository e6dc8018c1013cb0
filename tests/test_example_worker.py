"""The README's worker example, run for real: sandbox provider and sidecar on loopback."""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from reconciler.sandbox import RunningSandbox, running_sandbox
from reconciler.service.app import create_app
from reconciler.service.settings import Settings

from service_harness import serving

sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
from worker import charge_customer  # type: ignore[import-not-found, unused-ignore]

# The probes read the providers' credentials from the environment (the sandbox checks them).
pytestmark = pytest.mark.usefixtures("sandbox_credentials")


@pytest.fixture
def sandbox() -> Iterator[RunningSandbox]:
    with running_sandbox() as handle:
        yield handle


@contextmanager
def serving_example(tmp_path: Path, sandbox: RunningSandbox, inflight_s: int) -> Iterator[str]:
    """The sidecar on examples/reconciler.toml aimed at `sandbox`, its provider settling
    `inflight_s` after a doubtful dispatch."""
    example = (Path(__file__).parent.parent / "examples" / "reconciler.toml").read_text()
    config = tmp_path / "reconciler.toml"
    # The sandbox's search has no lag: the search probe's documented minute is not waited out.
    config.write_text(example.replace("http://127.0.0.1:8081", sandbox.url)
                      .replace('use = "stripe.payment_intents.search"',
                               'use = "stripe.payment_intents.search"\nleast_lag_s = 0')
                      .replace("max_attempts = 3", "max_attempts = 3\nvisibility_lag_s = 0")
                      .replace("inflight_s = 0", f"inflight_s = {inflight_s}"))
    settings = Settings(db=f"sqlite:///{tmp_path / 'r.db'}", sweep_interval_s=0, config=config)
    with serving(create_app(settings)) as url:
        yield url


@pytest.fixture
def sidecar(tmp_path: Path, sandbox: RunningSandbox) -> Iterator[str]:
    with serving_example(tmp_path, sandbox, inflight_s=0) as url:
        yield url


def test_the_worker_charges_once_on_a_clean_run(sidecar: str, sandbox: RunningSandbox) -> None:
    assert charge_customer(sidecar, sandbox.url + "/pay", "run-1", "call-1").startswith(
        "charged: pi_")


def test_the_worker_retries_only_with_a_grant_after_a_failed_send(
        sidecar: str, sandbox: RunningSandbox) -> None:
    outcome = charge_customer(sidecar, sandbox.url + "/pay", "run-2", "call-1",
                              fault="fail_before_commit")
    assert outcome.startswith("charged on retry: pi_")


def test_the_worker_does_not_retry_a_charge_that_went_through(
        sidecar: str, sandbox: RunningSandbox) -> None:
    sandbox.state.configure(hold_s=3.0)
    outcome = charge_customer(sidecar, sandbox.url + "/pay", "run-3", "call-1",
                              fault="lose_response")
    assert outcome.startswith("not retried (verified_applied)")


def test_the_worker_waits_out_the_settle_time_before_its_retry(
        tmp_path: Path, sandbox: RunningSandbox) -> None:
    # A 500 may still be applied for inflight_s: the zero read at once proves nothing, so the
    # worker reconciles until the verdict stops saying to wait, then retries on the grant.
    with serving_example(tmp_path, sandbox, inflight_s=2) as sidecar:
        outcome = charge_customer(sidecar, sandbox.url + "/pay", "run-4", "call-1",
                                  fault="fail_before_commit")
        attempts = httpx.get(f"{sidecar}/v1/operations/run-4.call-1").json()["attempts"]
    assert outcome.startswith("charged on retry: pi_")
    assert len([o for o in sandbox.state.objects() if o.ref.startswith("pi_")]) == 1
    # The retry was opened only once the first send had settled, by the sidecar's own clock.
    first, retry = (datetime.fromisoformat(a["recorded_at"]) for a in attempts[:2])
    assert retry - first >= timedelta(seconds=2)
