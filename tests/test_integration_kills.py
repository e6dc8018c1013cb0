"""For `@effect`, each framework adapter and the MCP proxy: the worker is SIGKILLed between the
provider's effect and the result's record (21 kill points, each a fresh run), restarted, and the
run finishes with exactly one charge at the provider, which the model is told (kill_harness.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.sandbox import RunningSandbox

from kill_harness import ADAPTERS, PLANS, Zygote, kill_and_restart, sandbox_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    forking = Zygote()
    yield forking
    forking.close()


@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_a_worker_killed_between_effect_and_record_is_restarted_and_charges_once(
        adapter: str, sandbox: RunningSandbox, zygote: Zygote, tmp_path: Path) -> None:
    runs = kill_and_restart(zygote, sandbox, adapter, sandbox_config(sandbox, tmp_path),
                            tmp_path)
    report = "\n".join(f"{run.plan}: exit {run.first_exit}/{run.second_exit}, charges "
                       f"{run.charges}, told {run.answers}" for run in runs)
    assert len(runs) == len(PLANS) >= 20
    assert all(run.killed for run in runs), report
    assert all(run.second_exit == 0 and len(run.charges) == 1 for run in runs), report
    assert all(run.told for run in runs), report
