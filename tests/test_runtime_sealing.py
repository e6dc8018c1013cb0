"""Agent runs keep their conversation sealed in the store (RECONCILER_RUN_KEY)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from reconciler.core.domain import Effect
from reconciler.core.errors import RunKeyError
from reconciler.core.runs.messages import ToolSpec
from reconciler.ledger import Ledger
from reconciler.ledger.gate import RetryGate
from reconciler.runtime.loop import AgentRuntime
from reconciler.runtime.scripted import ScriptedModel, call, say, tool_use
from reconciler.runtime.tools import Tool, ToolCall, ToolOutput
from reconciler.store.journal import SqlJournal
from reconciler.store.leases import SqlLeases
from reconciler.store.schema import open_store
from reconciler.store.sealing import KEY_ENV, Sealer, new_key

SECRET_TASK = "the vault code is 8841-SWORDFISH"
SECRET_ARG = "card 4242424242424242"
SECRET_RESULT = "session token tok_live_ZZTOP"


def _runtime(url: str, sealer: Sealer) -> AgentRuntime:
    store = open_store(url)
    ledger = Ledger(store)

    async def pay(tool_call: ToolCall) -> ToolOutput:
        return ToolOutput(SECRET_RESULT)

    tools = [Tool(ToolSpec("pay", "pay", {"type": "object"}), Effect.NON_IDEMPOTENT, pay,
                  provider="payments")]
    model = ScriptedModel([call(tool_use("pay", {"card": SECRET_ARG})), say("paid")])
    return AgentRuntime(SqlJournal(store, sealer), ledger, RetryGate(ledger, SqlLeases(store)),
                        model, tools, reconcile=lambda op: None)


def test_a_run_leaves_no_readable_task_argument_or_result_in_the_database(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    runtime = _runtime(url, Sealer([new_key()]))
    run = runtime.create(SECRET_TASK)
    assert asyncio.run(runtime.advance(run.run_id)).view.output == "paid"
    runtime.journal.load(run.run_id)  # still readable with the key

    written = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    for secret in (SECRET_TASK, SECRET_ARG, SECRET_RESULT, "SWORDFISH", "4242424242424242"):
        assert secret.encode() not in written


def test_events_sealed_under_an_old_key_open_after_rotation() -> None:
    old, new = new_key(), new_key()
    sealed = Sealer([old]).seal(b"payload")
    assert Sealer([new, old]).open(sealed) == b"payload"


def test_another_key_cannot_open_a_sealed_event() -> None:
    sealed = Sealer([new_key()]).seal(b"payload")
    with pytest.raises(RunKeyError, match="another key, or altered"):
        Sealer([new_key()]).open(sealed)


def test_a_missing_key_is_a_clear_error_naming_the_variable() -> None:
    with pytest.raises(RunKeyError, match=f"{KEY_ENV} is not set.*reconciler run-key"):
        Sealer.from_env({})


def test_a_malformed_key_is_refused_without_echoing_it() -> None:
    with pytest.raises(RunKeyError) as refused:
        Sealer.from_env({KEY_ENV: "hunter2-not-a-key"})
    assert "hunter2" not in str(refused.value)
