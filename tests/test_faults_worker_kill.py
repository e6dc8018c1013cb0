"""Fault harness: agent workers killed with SIGKILL at every durable step, across all three
effect classes (the `reconciler chaos` runner, at small scale; `--fault-scale N` for more).

A second worker takes each run over (or, supervised, a `reconciler serve` process's
supervisor finds it once the dead worker's lease lapses). Whatever the kill point, no effect may
happen twice at the provider and no step may be lost; a run may stop for a human only where the
evidence forbids a retry (a provider without idempotency keys whose effect is verified not
applied)."""

from __future__ import annotations

import pytest

from reconciler.chaos.runner import POINTS, chaos
from reconciler.core.runs.states import RunState

from databases import pg_schema, pg_unreachable

pytestmark = pytest.mark.slow


def _scale(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--fault-scale"))


def test_killed_workers_leave_no_duplicate_effect_and_no_lost_step(
        request: pytest.FixtureRequest) -> None:
    report = chaos(2 * len(POINTS) * _scale(request), seed=11)

    assert {r.kill.point for r in report.results} == set(POINTS)
    assert all(r.killed for r in report.results), [r for r in report.results if not r.killed]
    assert report.duplicates == 0, [r for r in report.results if r.duplicates]
    assert report.lost == 0, [r for r in report.results if r.lost]
    for result in report.results:
        assert result.state in (RunState.COMPLETED, RunState.AWAITING_APPROVAL), result
        if result.escalated:
            # Only a send whose dispatch was recorded but whose fate the worker never saw.
            assert result.kill.point == "dispatched", result
    assert report.lines()[-1] == (f"{len(report.results)} runs, 0 duplicate effects, "
                                  f"0 lost steps, {report.escalated} escalated")


def test_killed_workers_on_postgresql(request: pytest.FixtureRequest) -> None:
    if reason := pg_unreachable():
        pytest.skip(reason)
    with pg_schema() as url:
        report = chaos(len(POINTS) * _scale(request), seed=12, db_url=url)
    assert all(r.killed for r in report.results)
    assert (report.duplicates, report.lost) == (0, 0), [r for r in report.results if r.notes]


def test_killed_workers_runs_are_finished_by_another_serve_process_supervisor() -> None:
    # Nobody resumes: every first worker dies, and only the `reconciler serve` replica's
    # supervisor is left to finish the runs.
    report = chaos(len(POINTS), seed=13, supervised=True)

    assert {r.kill.point for r in report.results} == set(POINTS)
    assert all(r.killed for r in report.results), [r for r in report.results if not r.killed]
    assert (report.duplicates, report.lost) == (0, 0), [r for r in report.results if r.notes]
    for result in report.results:
        assert result.state in (RunState.COMPLETED, RunState.AWAITING_APPROVAL), result
    assert report.lines()[-1] == (f"{len(report.results)} runs, 0 duplicate effects, "
                                  f"0 lost steps, {report.escalated} escalated")
