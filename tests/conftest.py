"""Shared fixtures. Test helpers (builders.py, databases.py, ...) sit beside the tests and are
imported by module name: pytest puts this folder on sys.path."""

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reconciler.sandbox import ManualClock, RunningSandbox, running_sandbox

from databases import pg_unreachable
from service_harness import database

# Helpers that assert get their asserts rewritten like a test module's, so that a failure inside
# them shows the values compared. This must run before they are first imported.
pytest.register_assert_rewrite("probe_harness", "sandbox_harness", "sidecar_client")

from sidecar_client import Sidecar, running_sidecar  # noqa: E402


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty store URL on each backend (PostgreSQL skipped, with the reason, when it
    cannot be reached)."""
    if request.param == "postgresql" and (reason := pg_unreachable()):
        pytest.skip(reason)
    with database(request.param, tmp_path) as url:
        yield url


# The sandbox provider over real HTTP on loopback (test_sandbox_*.py): one server per test
# module; each test that asks for `client` starts from a reset state on a manual clock.


@pytest.fixture(scope="module")
def sandbox() -> Iterator[RunningSandbox]:
    with running_sandbox() as running:
        yield running


@pytest.fixture
def clock(sandbox: RunningSandbox) -> ManualClock:
    sandbox.state.reset()
    manual = ManualClock()
    sandbox.state.clock = manual
    return manual


@pytest.fixture(scope="module")
def http(sandbox: RunningSandbox) -> Iterator[httpx.Client]:
    # Shared because building a client (its TLS context) costs more than most tests here.
    with httpx.Client(base_url=sandbox.url, timeout=5.0) as shared:
        yield shared


@pytest.fixture
def client(http: httpx.Client, clock: ManualClock) -> httpx.Client:
    return http


# The sidecar over real HTTP (test_service_*.py): a fresh store on each backend, and its own
# server on an ephemeral loopback port.


@pytest.fixture
def sidecar(store_url: str) -> Iterator[Sidecar]:
    with running_sidecar(store_url) as running:
        yield running


@pytest.fixture
def no_internal_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Input must never reach the catch-all 500. Not autouse: the test_service_*.py modules
    ask for it with `pytestmark = pytest.mark.usefixtures("no_internal_errors")`."""
    yield
    unexpected = [r for r in caplog.records
                  if r.name == "reconciler.service.problems" and r.levelno >= logging.ERROR]
    assert not unexpected, [r.getMessage() for r in unexpected]
