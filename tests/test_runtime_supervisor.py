"""The supervisor of `reconciler serve`: recovery without a human. It advances queued runs and
runs whose worker died (lease lapsed), through the runtime's own recovery; it never touches a
run whose worker lives, nor one that waits for a human or for its client; two supervisors over
one store never advance one run twice; it stops when the service does."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from alembic import command
from sqlalchemy import text

from reconciler.core.runs.states import RunState
from reconciler.ledger import Ledger
from reconciler.ledger.gate import RetryGate
from reconciler.runtime.loop import AgentRuntime
from reconciler.runtime.scripted import ScriptedModel
from reconciler.runtime.supervisor import Supervisor
from reconciler.runtime.tools import ToolCall, ToolOutput
from reconciler.store.journal import SqlJournal
from reconciler.store.leases import SqlLeases
from reconciler.store.schema import alembic_config, make_engine, open_store, upgrade

from journal_rows import summary_row
from runtime_harness import (
    CONTRACTS,
    FakeReconcile,
    FakeTool,
    World,
    crashed,
    run,
    script_for,
    send,
)

LEASE_S = 30.0


def supervisor(world: World, tool: FakeTool, holder: str, *, batch: int = 8) -> Supervisor:
    """A supervisor on its own runtime (another replica) over `world`'s store."""
    rt = AgentRuntime(world.journal, world.ledger, world.gate, ScriptedModel(script_for(tool)),
                      [tool.tool], world.reconcile, holder=holder, lease_s=LEASE_S,
                      monotonic=world.monotonic)
    return Supervisor(rt, interval_s=0.05, batch=batch)


async def settled(sup: Supervisor) -> None:
    """Wait (bounded by the harness's deadline) until the supervisor's advances are done."""
    while sup.advancing:
        await asyncio.sleep(0.01)


async def look(sup: Supervisor) -> list[str]:
    """One look, and the advances it started, to their end; the runs it claimed."""
    claimed = await sup.tick()
    await settled(sup)
    return claimed


def orphan(world: World, tool: FakeTool, point: str = "delivered") -> str:
    """A run whose worker was SIGKILLed at `point` (by default: the call sent, its answer not
    recorded): its lease still names the dead worker."""
    run_id = crashed(world, tool, point)
    assert world.journal.claim(run_id, "dead-worker", world.clock(), LEASE_S)
    return run_id


def test_a_queued_run_nobody_started_is_advanced(world: World) -> None:
    tool = send()
    sup = supervisor(world, tool, "replica-b")
    run_id = world.start(sup.runtime)
    world.clock.advance(LEASE_S + 1)

    assert run(look(sup)) == [run_id]
    assert world.journal.load(run_id).state is RunState.COMPLETED
    assert len(tool.calls) == 1


def test_a_run_just_created_is_left_to_the_request_that_created_it(world: World) -> None:
    tool = send()
    sup = supervisor(world, tool, "replica-b")
    run_id = world.start(sup.runtime)
    world.clock.advance(1)

    assert run(sup.tick()) == []
    assert world.journal.load(run_id).state is RunState.QUEUED


def test_a_run_whose_lease_lapsed_is_finished_without_repeating_its_effect(world: World) -> None:
    tool = send()
    run_id = orphan(world, tool)
    sup = supervisor(world, tool, "replica-b")
    world.clock.advance(LEASE_S + 1)

    assert run(look(sup)) == [run_id]
    view = world.journal.load(run_id)
    assert view.state is RunState.COMPLETED
    # The dead worker sent it; the evidence shows it applied: never sent again.
    assert len(tool.calls) == 1
    assert world.reconcile.asked


def test_a_run_whose_worker_lives_is_not_touched(world: World) -> None:
    tool = send()
    run_id = orphan(world, tool)
    sup = supervisor(world, tool, "replica-b")
    world.clock.advance(LEASE_S - 1)  # the worker's last renewal has not lapsed

    assert run(sup.tick()) == []
    assert summary_row(world.journal, run_id).holder == "dead-worker"
    assert len(tool.calls) == 1


def test_a_run_paused_for_its_client_is_not_work(world: World) -> None:
    tool = send()
    sup = supervisor(world, tool, "replica-b")
    run_id = world.start(sup.runtime)
    # A deadline already past: the first step is made, then the run pauses for a continue.
    paused = run(sup.runtime.advance(run_id, deadline=world.monotonic()))
    assert paused.continue_request is not None
    world.clock.advance(LEASE_S * 10)

    assert run(sup.tick()) == []
    assert world.journal.load(run_id).continue_request is not None


def test_a_look_claims_at_most_its_batch(world: World) -> None:
    tool = send()
    sup = supervisor(world, tool, "replica-b", batch=2)
    for _ in range(5):
        world.start(sup.runtime)
    world.clock.advance(LEASE_S + 1)

    async def scenario() -> list[int]:
        return [len(await look(sup)), len(await look(sup))]

    assert run(scenario()) == [2, 2]


def replica(world: World, url: str) -> World:
    """Another process on `world`'s database file: its own connections, the same clock and
    run key (in-memory SQLite has one connection, which two runtimes cannot share)."""
    store = open_store(url)
    ledger = Ledger(store, world.clock)
    return replace(world, store=store, ledger=ledger,
                   journal=SqlJournal(store, world.journal.sealer),
                   gate=RetryGate(ledger, SqlLeases(store)), reconcile=FakeReconcile(ledger))


def test_two_supervisors_never_advance_one_run_twice(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    first = World.open()
    first = replica(first, url)
    for contract in CONTRACTS:
        first.store.put_contract(contract)
    second = replica(first, url)
    dead = send()
    orphans = [orphan(first, dead) for _ in range(6)]
    tools = [send(), send()]
    a = supervisor(first, tools[0], "replica-a", batch=4)
    b = supervisor(second, tools[1], "replica-b", batch=4)
    first.clock.advance(LEASE_S + 1)
    now = first.clock()
    # Both find the same runs; only one claim of each lands.
    found = second.journal.needing_work(now, now, 100)
    assert sorted(found) == sorted(orphans)
    assert first.journal.claim_unattended(found[0], "replica-a", now, LEASE_S, now)
    assert not second.journal.claim_unattended(found[0], "replica-b", now, LEASE_S, now)
    first.journal.release(found[0], "replica-a")

    async def scenario() -> tuple[list[str], list[str]]:
        by_a: list[str] = []
        by_b: list[str] = []
        for _ in range(3):  # bounded: 6 runs, 4 a look each
            claimed = await asyncio.gather(a.tick(), b.tick())
            by_a += claimed[0]
            by_b += claimed[1]
            await asyncio.gather(settled(a), settled(b))
        return by_a, by_b

    by_a, by_b = run(scenario())
    assert not set(by_a) & set(by_b)
    assert sorted(by_a + by_b) == sorted(orphans)
    assert all(first.journal.load(r).state is RunState.COMPLETED for r in orphans)
    # Only the dead workers' sends: neither supervisor sent any call again.
    assert (len(dead.calls), len(tools[0].calls), len(tools[1].calls)) == (6, 0, 0)
    assert first.rebuilt_differs() == {}


def test_the_supervisor_looks_until_stopped_then_gives_its_runs_up(world: World) -> None:
    entered = asyncio.Event()

    async def hangs(call: ToolCall) -> ToolOutput:
        entered.set()
        await asyncio.sleep(60)
        return ToolOutput("too late")

    tool = send(action=hangs)
    sup = supervisor(world, tool, "replica-b")
    run_id = world.start(sup.runtime)
    world.clock.advance(LEASE_S + 1)

    async def scenario() -> RunState:
        sup.start()
        await entered.wait()
        assert sup.advancing == {run_id}
        await sup.stop(grace_s=0.1)  # the call would take a minute: cut off
        assert not sup.advancing
        queued = world.start(sup.runtime)
        world.clock.advance(LEASE_S + 1)
        await asyncio.sleep(sup.interval_s * 5)  # stopped: it looks no more
        return world.journal.load(queued).state

    assert run(scenario()) is RunState.QUEUED
    row = summary_row(world.journal, run_id)
    assert (row.holder, row.lease_expires_at) == (None, None)  # free for another replica


def test_a_run_paused_before_the_upgrade_stays_paused(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    config = alembic_config()
    at = "2026-01-01 00:00:00.000000"
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0007")
        for run_id, last in (("paused", "continue_requested"), ("working", "tool_requested")):
            conn.execute(text(
                "INSERT INTO runs (run_id, state, seq, turn, input_tokens, output_tokens, "
                "cache_creation_input_tokens, cache_read_input_tokens, created_at, updated_at) "
                "VALUES (:id, 'running', 2, 1, 0, 0, 0, 0, :at, :at)"), {"id": run_id, "at": at})
            for seq, kind in ((1, "run_created"), (2, last)):
                conn.execute(text("INSERT INTO run_events (run_id, seq, kind, at, data) "
                                  "VALUES (:id, :seq, :kind, :at, 'sealed')"),
                             {"id": run_id, "seq": seq, "kind": kind, "at": at})
    upgrade(engine)
    with engine.connect() as conn:
        paused: dict[str, bool] = dict(conn.execute(text("SELECT run_id, paused FROM runs")).all())
    assert paused == {"paused": True, "working": False}
