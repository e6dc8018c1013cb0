"""DBOS Transact: a reconciled step (reconciler.integrations.dbos) that DBOS runs again, after
a crash or as its own retry, asks the gate before it sends (dbos_harness.py runs the
application, one process per launch, on SQLite). Counted at the sandbox: the charges for the
workflow's order."""

from __future__ import annotations

import ast
import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from reconciler.core.hashing import request_hash
from reconciler.sandbox import RunningSandbox

from dbos_harness import Job, body, in_process
from kill_harness import sandbox_config

ROOT = Path(__file__).parent.parent


def charges(sandbox: RunningSandbox, order: str, keyed: bool, operation_id: str = "") -> list[str]:
    wanted = request_hash(body(order, keyed, operation_id))
    return [r.ref for r in sandbox.state.objects() if r.request_hash == wanted]


def job(sandbox: RunningSandbox, folder: Path, keyed: bool, **given: Any) -> Job:
    nonce = uuid.uuid4().hex[:8]
    return Job(workflow_id=f"wf-{nonce}", order=f"A-{nonce}", keyed=keyed, start=True,
               dbos_db=f"sqlite:///{folder / 'dbos.sqlite'}",
               store_db=f"sqlite:///{folder / 'receipts.db'}",
               config=sandbox_config(sandbox, folder), sandbox_url=sandbox.url,
               out=folder / f"{nonce}.json", **given)


def recovered(first: Job) -> tuple[dict[str, Any], Job]:
    """Kill `first` at its point, then launch DBOS again: its recovery runs the workflow."""
    assert in_process(first) == -signal.SIGKILL
    assert not first.out.exists()
    again = Job(**{**first.__dict__, "start": False, "kill_at": None})
    assert in_process(again) == 0
    return json.loads(again.out.read_text()), again


@pytest.mark.slow
def test_a_step_killed_after_the_provider_committed_is_not_sent_again_by_recovery(
        sandbox: RunningSandbox, tmp_path: Path) -> None:
    first = job(sandbox, tmp_path, keyed=False, kill_at="mid-response")
    end, _ = recovered(first)
    # Keyless: nothing a probe can find, so the doubt stays and the gate refuses the re-run.
    assert end["refused"] == "indeterminate", end
    assert end["sends"] == 0, end
    assert end["steps"][0]["error"] == "RetryRefusedError", end
    assert len(charges(sandbox, first.order, keyed=False)) == 1


@pytest.mark.slow
def test_a_recovered_step_the_provider_shows_done_returns_its_replay_without_sending(
        sandbox: RunningSandbox, tmp_path: Path) -> None:
    first = job(sandbox, tmp_path, keyed=True, kill_at="mid-response")
    end, _ = recovered(first)
    # Tagged: the probes find the charge by its operation id, verified_applied.
    charged = charges(sandbox, first.order, keyed=True, operation_id=end["operation_id"])
    assert len(charged) == 1, end
    assert end["result"] == charged[0], end
    assert end["sends"] == 0, end
    assert end["steps"][0]["output"] == {"id": charged[0], "replayed": True}, end


def ran(first: Job) -> dict[str, Any]:
    assert in_process(first) == 0
    return json.loads(first.out.read_text())  # type: ignore[no-any-return]


def test_dbos_retries_a_step_that_failed_before_the_provider_committed_under_a_grant(
        sandbox: RunningSandbox, tmp_path: Path) -> None:
    end = ran(job(sandbox, tmp_path, keyed=True, fault="fail_before_commit"))
    charged = charges(sandbox, end["order"], keyed=True, operation_id=end["operation_id"])
    assert end["sends"] == 2, end  # verified_not_applied, a keyed retry: the gate granted it
    assert charged == [end["result"]], end


def test_dbos_retries_a_step_the_provider_did_despite_its_error_without_sending(
        sandbox: RunningSandbox, tmp_path: Path) -> None:
    end = ran(job(sandbox, tmp_path, keyed=True, fault="error_after_commit"))
    charged = charges(sandbox, end["order"], keyed=True, operation_id=end["operation_id"])
    assert end["sends"] == 1, end  # DBOS's retry asked the gate: verified_applied
    assert charged == [end["result"]], end
    assert end["steps"][0]["output"] == {"id": charged[0], "replayed": True}, end


def docs_example(page: str) -> str:
    """The first Python block of docs/integrations/`page`."""
    text = (ROOT / "docs" / "integrations" / page).read_text()
    return text.split("```python", 1)[1].split("\n", 1)[1].split("```", 1)[0]  # past the fence


@pytest.mark.parametrize("fault", ["error_after_commit", "fail_before_commit"])
def test_the_docs_example_is_the_example_that_runs_and_charges_once(fault: str) -> None:
    example = ROOT / "examples" / "dbos_charge.py"
    assert docs_example("dbos.md") in example.read_text()
    # A process of its own: DBOS is one per process.
    ran = subprocess.run([sys.executable, example.name, fault], cwd=example.parent,
                         capture_output=True, text=True, timeout=120, check=True)
    answer, charges_line = ran.stdout.strip().splitlines()[-2:]
    charged = ast.literal_eval(charges_line.removeprefix("charges at the provider: "))
    assert len(charged) == 1 and answer.endswith(charged[0]), ran.stdout
