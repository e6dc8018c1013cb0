"""One agent worker of a chaos run, in its own process: it advances the run and, if told to,
kills itself with SIGKILL at one durable step, as a crash or an OOM kill would.

    worker 1 ── step ── step ── ✕ SIGKILL at (point, n-th time it is reached)
    worker 2 ── takes the run over ── recovers what worker 1 left unfinished ── done / escalated
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass
from typing import Any

import httpx

from probes.config import parse_config
from reconciler.chaos.agent import CONFIG, TASK, script, tools
from reconciler.core.schedule import SweepPolicy
from reconciler.demo.scenarios import CREDENTIALS, probe_config
from reconciler.ledger import Ledger
from reconciler.ledger.gate import RetryGate
from reconciler.ledger.sweep import Sweeper
from reconciler.runtime.loop import AgentRuntime, create_run
from reconciler.runtime.toolgate import Hook, no_hook
from reconciler.store.journal import SqlJournal
from reconciler.store.leases import SqlLeases
from reconciler.store.schema import open_store
from reconciler.store.sealing import Sealer


@dataclass(frozen=True, slots=True)
class Kill:
    """Where to die: the `nth` time the runtime reaches hook `point`."""

    point: str
    nth: int


def killer(kill: Kill) -> Hook:
    seen = 0

    def hook(point: str, run_id: str, tool_call_id: str | None) -> None:
        nonlocal seen
        if point == kill.point:
            seen += 1
            if seen == kill.nth:
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


def work(db_url: str, sandbox_url: str, run_id: str, kill: Kill | None, run_key: str,
         lease_s: float | None = None) -> None:
    """Advance `run_id` to its end (process entry point; exits 0 unless killed). With
    `lease_s` (the supervised mode) the worker is a serve process taking a new run: it creates
    the run, as POST /v1/runs does, and advances it under a lease of `lease_s`; otherwise it
    takes over a run whose previous worker it knows is dead."""
    asyncio.run(_work(db_url, sandbox_url, run_id, kill, Sealer([run_key]), lease_s))


async def _work(db_url: str, sandbox_url: str, run_id: str, kill: Kill | None,
                sealer: Sealer, lease_s: float | None) -> None:
    store = open_store(db_url)
    ledger = Ledger(store)
    leases = SqlLeases(store)
    providers = parse_config(probe_config(sandbox_url), env=CREDENTIALS, source="<chaos>")
    holder = f"chaos-worker-{os.getpid()}"
    # Short probe leases: a killed worker's lease must not outlive the next worker's patience.
    sweeper = Sweeper(ledger, leases, lambda name: providers[name].probes,
                      SweepPolicy(probe_timeout_s=2.0, lease_s=2.0), holder=holder)
    # The runtime's own lease length unless the runner names one.
    lease: dict[str, Any] = {} if lease_s is None else {"lease_s": lease_s}
    async with httpx.AsyncClient() as http:
        journal = SqlJournal(store, sealer)
        runtime = AgentRuntime(journal, ledger, RetryGate(ledger, leases),
                               script(), tools(sandbox_url, http), sweeper.reconcile,
                               holder=holder, hook=killer(kill) if kill else no_hook, **lease)
        if lease_s is None:
            # The runner saw the previous worker die: taking its lease over is safe.
            await runtime.advance(run_id, take_over=True)
        else:
            create_run(journal, TASK, ledger.clock(), run_id=run_id, config=CONFIG)
            await runtime.advance(run_id)
    store.close()
