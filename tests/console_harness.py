"""A sidecar with something for the operator console to show: an operation escalated to a
human ("late", provider "slow", deadline 0) and a run waiting for approval ("r1": its send
timed out), served over HTTP with a token, and a headless Chromium to drive it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver

from reconciler.domain import Effect, ProviderContract
from reconciler.ledger import Ledger
from reconciler.runs.messages import ToolSpec
from reconciler.runtime.agent import Agent
from reconciler.runtime.scripted import ScriptedModel, call, say, tool_use
from reconciler.runtime.tools import Tool, ToolCall, ToolOutput
from reconciler.service import Settings, create_app
from reconciler.store.schema import open_store
from reconciler.store.sql import SqlStore

from service_harness import serving
from sidecar_client import TOKEN, H

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


class FirstSendTimesOut:
    def __init__(self) -> None:
        self.attempts: list[int] = []
        self.tool = Tool(ToolSpec("send", "send a message", {"type": "object"}),
                         Effect.NON_IDEMPOTENT, self, provider="chat", uses_key=True)

    async def __call__(self, tool_call: ToolCall) -> ToolOutput:
        self.attempts.append(tool_call.attempt)
        if len(self.attempts) == 1:
            raise httpx.ReadTimeout("no answer")
        return ToolOutput("sent", status=200)


@dataclass
class Console:
    url: str
    store: SqlStore
    send: FirstSendTimesOut
    api: httpx.Client


@contextmanager
def console_sidecar(tmp_path: Path) -> Iterator[Console]:
    store = open_store(f"sqlite:///{tmp_path / 'console.db'}")
    store.put_contract(ProviderContract("chat", idempotency_keys=True))
    store.put_contract(ProviderContract("slow", idempotency_keys=True, reconcile_deadline_s=0))
    send = FirstSendTimesOut()
    agent = Agent(ScriptedModel([call(tool_use("send", {"text": "hi"})), say("done")]),
                  [send.tool], {"reconcile_rounds": 1, "reconcile_wait_s": 0.0})
    app = create_app(Settings(sweep_interval_s=0, token=TOKEN), ledger=Ledger(store),
                     agent=agent)
    try:
        with serving(app) as url, httpx.Client(
                base_url=url, timeout=20, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
            api.post("/v1/operations", json={
                "operation_id": "late", "request_hash": H, "idempotency_key": "k-late",
                "provider": "slow", "action": "charge", "effect": "non_idempotent"})
            api.post("/v1/operations/late/attempts", json={
                "attempt": 1, "idempotency_key": "k-late", "request_hash": H,
                "outcome": "timeout"})
            run = api.post("/v1/runs", json={"input": "say hi", "run_id": "r1"}).json()
            assert run["state"] == "awaiting_approval", run
            yield Console(url, store, send, api)
    finally:
        store.engine.dispose()


def chromium_missing() -> str | None:
    if not (Path(CHROMIUM).exists() and shutil.which(DRIVER)):
        return "needs Debian's chromium and chromium-driver (.ci/run installs them)"
    return None


@contextmanager
def browser() -> Iterator[WebDriver]:
    """A headless Chromium under chromedriver (skipped, saying why, when not installed)."""
    if reason := chromium_missing():
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1280,1600", "--disable-gpu"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
