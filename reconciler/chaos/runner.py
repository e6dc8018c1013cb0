"""The chaos runner: many runs of the origin scenario, each worker killed at one durable step,
each run finished by a fresh worker (or, --supervised, by another serve process's supervisor:
`chaos.supervised`); then the sandbox is counted.

    for every run:  create ─▶ worker 1 (SIGKILL at point p, n-th time) ─▶ worker 2 (takes over)
                                                                              │
    sandbox records by request hash ◀── count effects per operation ◀────────┘
      > 1: a duplicate effect    0 for a step the run says is done (or never done in a completed
                                 run): a lost step    run waiting for a human: escalated

Workers are forked from a forkserver that has the runtime imported, so a run costs two forks,
not two interpreter start-ups. Every wait is bounded: a worker that outlives WORKER_TIMEOUT_S is
killed and its run counted as lost.
"""

from __future__ import annotations

import multiprocessing
import random
import signal
import subprocess
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes.config import parse_config
from reconciler.chaos.agent import CONFIG, SHAPE_OF, STEPS, TASK
from reconciler.chaos.supervised import LEASE_S, second_replica, settle
from reconciler.chaos.worker import Kill, work
from reconciler.core.domain import Effect
from reconciler.core.hashing import request_hash
from reconciler.core.runs.events import RunView
from reconciler.core.runs.states import RunState
from reconciler.demo.agent import SHAPES
from reconciler.demo.scenarios import CREDENTIALS, probe_config
from reconciler.ledger import utcnow
from reconciler.runtime.loop import create_run
from reconciler.runtime.tools import operation_id
from reconciler.sandbox import running_sandbox
from reconciler.sandbox.state import SandboxState
from reconciler.store.journal import SqlJournal
from reconciler.store.schema import open_store
from reconciler.store.sealing import Sealer, new_key

#: Every durable step of the run loop and tool gate, with how often one run reaches it.
TURNS = 4
POINTS: dict[str, int] = {
    "assistant_recorded": TURNS, "model_answered": TURNS, "requested": len(STEPS),
    "dispatched": len(STEPS), "delivered": len(STEPS), "attempt_recorded": len(STEPS) - 1,
    "result_recorded": len(STEPS), "checkpointed": TURNS,
}
WORKER_TIMEOUT_S = 60.0


@dataclass
class RunResult:
    run_id: str
    kill: Kill
    killed: bool
    state: str
    duplicates: int = 0
    lost: int = 0
    escalated: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    results: list[RunResult]

    def by_point(self) -> dict[str, list[RunResult]]:
        grouped: dict[str, list[RunResult]] = {point: [] for point in POINTS}
        for result in self.results:
            grouped[result.kill.point].append(result)
        return grouped

    @property
    def duplicates(self) -> int:
        return sum(r.duplicates for r in self.results)

    @property
    def lost(self) -> int:
        return sum(r.lost for r in self.results)

    @property
    def escalated(self) -> int:
        return sum(r.escalated for r in self.results)

    def lines(self) -> list[str]:
        out = []
        for point, results in self.by_point().items():
            if not results:
                continue
            out.append(
                f"killed at {point:<19} runs {len(results):>4}  "
                f"killed {sum(r.killed for r in results):>4}  "
                f"completed {sum(r.state == RunState.COMPLETED for r in results):>4}  "
                f"escalated {sum(r.escalated for r in results):>3}  "
                f"duplicates {sum(r.duplicates for r in results):>2}  "
                f"lost {sum(r.lost for r in results):>2}")
        out.append(f"{len(self.results)} runs, {self.duplicates} duplicate effects, "
                   f"{self.lost} lost steps, {self.escalated} escalated")
        return out


def chaos(runs: int, *, seed: int = 0, db_url: str | None = None, supervised: bool = False,
          progress: Callable[[str], None] = lambda line: None) -> Report:
    """Play `runs` runs, killing the first worker of each at a step chosen by `seed`. Each run
    is finished by a second worker that takes it over, or, `supervised`, by the supervisor of
    a `reconciler serve` process running beside them (`chaos.supervised`): nobody resumes."""
    rng = random.Random(seed)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["reconciler.chaos.worker"])
    nonce = uuid.uuid4().hex[:8]
    kills = [Kill(point, rng.randint(1, POINTS[point]))
             # Every point in turn, so a short run covers them all; the occurrence at random.
             for point in (list(POINTS)[index % len(POINTS)] for index in range(runs))]
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp, running_sandbox() as sandbox:
        url = db_url or f"sqlite:///{Path(tmp) / 'chaos.db'}"
        store = open_store(url)
        config = probe_config(sandbox.url)
        for setup in parse_config(config, env=CREDENTIALS, source="<chaos>").values():
            store.put_contract(setup.contract)
        # A key for this chaos session only: its runs are thrown away with it.
        run_key = new_key()
        journal = SqlJournal(store, Sealer([run_key]))
        ids = [f"chaos-{nonce}-{index:04d}" for index in range(runs)]
        if supervised:
            with second_replica(url, sandbox.url, run_key, config, Path(tmp)) as replica:
                results = _supervised(context, journal, url, sandbox, run_key, ids, kills,
                                      replica, progress)
        else:
            results = []
            for run_id, kill in zip(ids, kills, strict=True):
                create_run(journal, TASK, utcnow(), run_id=run_id, config=CONFIG)
                first = _spawn(context, (url, sandbox.url, run_id, kill, run_key))
                second = _spawn(context, (url, sandbox.url, run_id, None, run_key))
                result = assess(journal.load(run_id), kill, first == -signal.SIGKILL,
                                sandbox.state)
                if second != 0:
                    result.notes.append(f"resuming worker exited with {second}")
                results.append(result)
                _progress(progress, results, runs)
        store.close()
    return Report(results)


def _supervised(context: object, journal: SqlJournal, url: str, sandbox: Any, run_key: str,
                ids: list[str], kills: list[Kill], replica: subprocess.Popen[bytes],
                progress: Callable[[str], None]) -> list[RunResult]:
    """Start each run in a worker that is killed (one after the other, without waiting for the
    rescue), then wait for the second replica's supervisor to finish them all."""
    exits = []
    for index, (run_id, kill) in enumerate(zip(ids, kills, strict=True)):
        exits.append(_spawn(context, (url, sandbox.url, run_id, kill, run_key, LEASE_S)))
        if (index + 1) % 10 == 0 or index + 1 == len(ids):
            progress(f"{index + 1}/{len(ids)} runs started and killed")
    unfinished = settle(journal, ids, replica)
    results = []
    for run_id, kill, code in zip(ids, kills, exits, strict=True):
        result = assess(journal.load(run_id), kill, code == -signal.SIGKILL, sandbox.state)
        if run_id in unfinished:
            result.notes.append("not finished by the supervisor in time"
                                if replica.poll() is None else
                                f"the second replica exited with {replica.returncode}")
        results.append(result)
    _progress(progress, results, len(ids))
    return results


def _progress(progress: Callable[[str], None], results: list[RunResult], runs: int) -> None:
    if len(results) % 10 == 0 or len(results) == runs:
        report = Report(results)
        progress(f"{len(results)}/{runs} runs: {report.duplicates} duplicates, "
                 f"{report.lost} lost, {report.escalated} escalated")


def _spawn(context: object, args: tuple[Any, ...]) -> int:
    """Run one worker (`worker.work(*args)`) to its end or its death; its exit code (-9:
    killed by SIGKILL)."""
    process = context.Process(  # type: ignore[attr-defined]
        target=work, args=args, daemon=True)
    process.start()
    process.join(WORKER_TIMEOUT_S)
    if process.exitcode is None:
        process.kill()
        process.join()
        return -1000
    return int(process.exitcode)


def assess(view: RunView, kill: Kill, killed: bool, sandbox: SandboxState) -> RunResult:
    """Count the run's effects at the sandbox against what its events say was done."""
    result = RunResult(view.run_id, kill, killed, view.state.value,
                       escalated=view.state is RunState.AWAITING_APPROVAL)
    effects = Counter(record.request_hash for record in sandbox.objects())
    calls = {call.name: call for call in view.calls.values()}
    for step in STEPS:
        call = calls.get(step.tool)
        done = call is not None and call.result is not None
        count = None
        if call is not None and step.effect is not Effect.READ_ONLY:
            shape = SHAPES[SHAPE_OF[step.tool]]
            count = effects[request_hash(shape.params(operation_id(view.run_id,
                                                                   call.tool_call_id)))]
            result.duplicates += max(0, count - 1)
            if count > 1:
                result.notes.append(f"{step.tool}: {count} effects")
        if done and call is not None and call.result is not None and call.result.is_error:
            result.lost += 1
            result.notes.append(f"{step.tool}: error result {call.result.content[:120]!r}")
        elif done and count == 0:
            result.lost += 1
            result.notes.append(f"{step.tool}: result recorded, but no effect at the provider")
        elif not done and not result.escalated:
            result.lost += 1
            result.notes.append(f"{step.tool}: never done (run {view.state.value})")
    return result
