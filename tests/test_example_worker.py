"""The README's worker example, run for real: sandbox provider and sidecar on loopback."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.sandbox import RunningSandbox, running_sandbox
from reconciler.service.app import create_app
from reconciler.service.settings import Settings

from service_harness import serving

sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
from worker import charge_customer  # type: ignore[import-not-found, unused-ignore]


@pytest.fixture
def sandbox() -> Iterator[RunningSandbox]:
    with running_sandbox() as handle:
        yield handle


@pytest.fixture
def sidecar(tmp_path: Path, sandbox: RunningSandbox) -> Iterator[str]:
    example = (Path(__file__).parent.parent / "examples" / "reconciler.toml").read_text()
    config = tmp_path / "reconciler.toml"
    # The sandbox's search has no lag: the search probe's documented minute is not waited out.
    config.write_text(example.replace("http://127.0.0.1:8081", sandbox.url)
                      .replace('use = "stripe.payment_intents.search"',
                               'use = "stripe.payment_intents.search"\nleast_lag_s = 0')
                      .replace("max_attempts = 3", "max_attempts = 3\nvisibility_lag_s = 0"))
    settings = Settings(db=f"sqlite:///{tmp_path / 'r.db'}", sweep_interval_s=0, config=config)
    with serving(create_app(settings)) as url:
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
