"""The worker of tests/test_effect_kill.py: one `@effect` charge through the embedded store, in
a process of its own that the test may SIGKILL.

Workers are forked from a forkserver that has `reconciler.effect` (and so its store) and httpx
imported: a worker costs a fork, not an interpreter start-up and 1-2 s of imports,
and a start-up cost no longer dilutes the kill points (ready is sent once the store is open).
As in reconciler/chaos/runner.py. The forkserver is one per process: if another test started it
first with other modules preloaded, the workers import these themselves (slower, same result).
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

from reconciler.effect import current_call, effect
from reconciler.effect_backends import EmbeddedBackend

#: What a worker that never answers is given before it is killed and the test fails.
TIMEOUT_S = 60.0
BODY = {"amount": 1200, "currency": "eur", "confirm": True, "payment_method": "pm_card_visa",
        "metadata": {"operation_id": "order-77"}}


def charge_once(db: str, config: str, provider: str, fault: str, conn: Connection) -> None:
    """Open the store, send "ready", charge order-77 once and send its result."""
    with EmbeddedBackend(db, config=Path(config)) as store:

        @effect(provider="stripe", action="payment_intents.create", key="order-77",
                params=BODY, backend=store)
        def charge() -> dict[str, Any]:
            call = current_call()
            headers = {"Idempotency-Key": call.intent.idempotency_key}
            if fault:
                headers["X-Sandbox-Fault"] = fault
            response = httpx.post(f"{provider}/pay/v1/payment_intents", json=BODY,
                                  headers=headers, timeout=5.0)
            result: dict[str, Any] = response.json()
            return result

        conn.send("ready")
        conn.send(("result", charge()))


def forkserver() -> Any:
    """The forkserver context, with what this module imports to preload (if it has not started
    yet). By package name: Python 3.11's forkserver does not take on the caller's sys.path
    (Lib/multiprocessing/forkserver.py, `main` ignores `sys_path`), so this folder's modules
    would not import there; a forked worker then imports this small module itself."""
    context = multiprocessing.get_context("forkserver")
    # The forkserver is one per process and keeps the list it started with: the chaos runner's
    # worker (tests/test_faults_worker_kill.py, maybe on the same xdist worker) is preloaded
    # too, so that its workers fork warm if this test started the forkserver first.
    context.set_forkserver_preload(["httpx", "reconciler.effect", "reconciler.chaos.worker"])
    return context
