"""A sidecar with something for the operator console to show: an operation escalated to a
human ("late", provider "slow", deadline 0) and a run waiting for approval ("r1": its send
timed out), served over HTTP with a token, and a headless Chromium to drive it. Asked for,
runs waiting for approval before their first send (a `refund` tool marked needs_approval),
duplicates (a charge whose worker got `<id>_1` back while the provider shows `<id>_1` and
`<id>_2`), on SQLite or on another store URL (PostgreSQL)."""

from __future__ import annotations

import re
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

from reconciler.core.domain import Effect, ProviderContract
from reconciler.core.runs.messages import ModelRequest, ModelResponse, TextBlock, ToolSpec
from reconciler.ledger import Ledger
from reconciler.runtime.agent import Agent
from reconciler.runtime.scripted import ScriptedModel, call, say, tool_use
from reconciler.runtime.tools import Tool, ToolCall, ToolOutput
from reconciler.service import Settings, create_app
from reconciler.store.schema import open_store
from reconciler.store.sql import SqlStore
from reconciler.testing.patience import PATIENCE_S

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


class Refund:
    """A tool that runs only with a human's approval: each call is counted where it lands."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.tool = Tool(ToolSpec("refund", "refund a charge", {"type": "object"}),
                         Effect.NON_IDEMPOTENT, self, provider="bank", uses_key=True,
                         needs_approval=True)

    async def __call__(self, tool_call: ToolCall) -> ToolOutput:
        self.sent.append(str(tool_call.input.get("charge")))
        return ToolOutput("refunded", status=200)


def first_step(request: ModelRequest) -> ModelResponse:
    """The script's first step: a task that names a refund calls `refund`, any other `send`."""
    task = " ".join(block.text for block in request.messages[0].content
                    if isinstance(block, TextBlock))
    if task.startswith("refund "):
        return call(tool_use("refund", {"charge": task.removeprefix("refund ")}))
    return call(tool_use("send", {"text": "hi"}))


@dataclass
class Console:
    url: str
    store: SqlStore
    send: FirstSendTimesOut
    refund: Refund
    api: httpx.Client


@contextmanager
def console_sidecar(tmp_path: Path, *, first_sends: tuple[str, ...] = (),
                    duplicates: tuple[str, ...] = (), db: str | None = None) -> Iterator[Console]:
    """The console's sidecar; each run id in `first_sends` waits for approval before the
    first send of its refund (of charge `ch_<run id>`); each operation id in `duplicates` is a
    duplicate_effect; `db` a store URL (default: a SQLite file in `tmp_path`)."""
    store = open_store(db or f"sqlite:///{tmp_path / 'console.db'}")
    store.put_contract(ProviderContract("chat", idempotency_keys=True))
    store.put_contract(ProviderContract("slow", idempotency_keys=True, reconcile_deadline_s=0))
    send, refund = FirstSendTimesOut(), Refund()
    agent = Agent(ScriptedModel([first_step, say("done")]), [send.tool, refund.tool],
                  {"reconcile_rounds": 1, "reconcile_wait_s": 0.0})
    app = create_app(Settings(sweep_interval_s=0, token=TOKEN), ledger=Ledger(store),
                     agent=agent)
    try:
        with serving(app) as url, httpx.Client(
                base_url=url, timeout=PATIENCE_S,
                headers={"Authorization": f"Bearer {TOKEN}"}) as api:
            api.post("/v1/operations", json={
                "operation_id": "late", "request_hash": H, "idempotency_key": "k-late",
                "provider": "slow", "action": "charge", "effect": "non_idempotent"})
            api.post("/v1/operations/late/attempts", json={
                "attempt": 1, "idempotency_key": "k-late", "request_hash": H,
                "outcome": "timeout"})
            run = api.post("/v1/runs", json={"input": "say hi", "run_id": "r1"}).json()
            assert run["state"] == "awaiting_approval", run
            for run_id in first_sends:
                run = api.post("/v1/runs", json={"input": f"refund ch_{run_id}",
                                                  "run_id": run_id}).json()
                assert run["state"] == "awaiting_approval", run
            for op in duplicates:
                record_duplicate(api, op)
            yield Console(url, store, send, refund, api)
    finally:
        store.engine.dispose()


def record_duplicate(api: httpx.Client, op: str) -> None:
    """A charge answered 200 with `<op>_1`, and a read at the provider that shows two."""
    api.post("/v1/operations", json={
        "operation_id": op, "request_hash": H, "idempotency_key": f"k-{op}", "provider": "chat",
        "action": "charge", "effect": "non_idempotent"}).raise_for_status()
    api.post(f"/v1/operations/{op}/attempts", json={
        "attempt": 1, "idempotency_key": f"k-{op}", "request_hash": H, "outcome": "response",
        "status": 200, "receipt": {"provider_ref": f"{op}_1", "request_hash": H},
    }).raise_for_status()
    seen = api.post(f"/v1/operations/{op}/evidence", json={
        "kind": "observation", "probe": "charges", "authority": "authoritative",
        "matches": [{"provider_ref": f"{op}_1"}, {"provider_ref": f"{op}_2"}]})
    seen.raise_for_status()
    assert seen.json()["verdict"] == "duplicate_effect", seen.json()


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


def csrf_of(page: httpx.Response) -> str:
    """The CSRF token of the (first) form on a console page."""
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text[:500]
    return found.group(1)


def login_form(http: httpx.Client) -> str:
    page = http.get("/ui/login")
    assert page.status_code == 200
    return csrf_of(page)


@contextmanager
def signed_in(url: str) -> Iterator[tuple[httpx.Client, str]]:
    with httpx.Client(base_url=url, timeout=PATIENCE_S) as http:
        yield _signed_in(http)


def _signed_in(http: httpx.Client) -> tuple[httpx.Client, str]:
    answer = http.post("/ui/login", data={"csrf": login_form(http), "credential": TOKEN})
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/queue"
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    return http, csrf_of(http.get("/ui/operation?id=late"))
