"""Fixtures for testing against the reconciler, as a pytest plugin. Not loaded by itself: a
project opts in from its conftest.py with

    pytest_plugins = ["reconciler.testing.pytest_plugin"]

`clock`          a fresh `ManualClock` (2026-01-01T00:00Z), for the ledger, probes and sweeper
`sandbox`        the sandbox provider over loopback HTTP, one server per test module
`sandbox_clock`  the `sandbox` reset to empty and running on a fresh `ManualClock`, returned
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reconciler.infra.clock import ManualClock
from reconciler.sandbox import RunningSandbox, running_sandbox
from reconciler.testing.sandbox import on_manual_clock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(scope="module")
def sandbox() -> Iterator[RunningSandbox]:
    with running_sandbox() as running:
        yield running


@pytest.fixture
def sandbox_clock(sandbox: RunningSandbox) -> ManualClock:
    return on_manual_clock(sandbox)
