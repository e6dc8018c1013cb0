"""A DBOS application whose workflow charges through a reconciled step, run in a process of its
own (DBOS is one per process): started, SIGKILLed at a point of the step, then launched again
on the same system database, where DBOS's recovery runs the workflow on.

    process 1: DBOS.launch ─ start pay(order) ─ charge step ─ POST ─ provider commits ─ SIGKILL
    process 2: DBOS.launch ─ recovery re-runs the charge step ─ the gate ─ the workflow's end

The charge is the examples' PaymentIntent at the sandbox (examples/sandbox_charge.py); the
reconciler is an embedded store probing it (examples/reconciler.toml's probes). Kill points
are kill_harness.py's: `mid-response` (the provider committed and answered; nothing recorded
anywhere) and `after record_attempt` (the reconciler holds the answer, DBOS does not).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from dbos import DBOS, SetWorkflowID

from reconciler.chaos.worker import Kill, killer
from reconciler.core.errors import RetryRefusedError
from reconciler.effect import Applied, current_call, use_backend
from reconciler.effect.backends import EmbeddedBackend
from reconciler.integrations.dbos import reconciled_step, step_operation
from reconciler.integrations.durable import engine_operation
from reconciler.runtime.toolgate import no_hook

from kill_harness import KillingRecorder, KillingTransport

sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
from sandbox_charge import Payments, charge_body
from worker_log import untagged

AMOUNT = 1200
STRIPE_KEY = "sk_test_sandbox"
#: A process that outlives this is killed and its run counted as failed.
PROCESS_TIMEOUT_S = 90.0


def body(order: str, keyed: bool, operation_id: str = "") -> dict[str, Any]:
    """The PaymentIntent a charge sends: a keyed step's carries its operation id in the
    metadata, a keyless one's nothing of it."""
    sent = charge_body(operation_id, {"order": order, "amount": AMOUNT})
    return sent if keyed else untagged(sent)


@dataclass
class _World:
    payments: Payments | None = None
    #: The POSTs this process sent to the provider.
    sends: int = 0

    def send(self, order: str, keyed: bool) -> dict[str, Any]:
        call = current_call()
        assert self.payments is not None and call is not None
        self.sends += 1
        return self.payments.send(body(order, keyed, call.operation_id),
                                  call.intent.idempotency_key)


WORLD = _World()


def replayed(applied: Applied) -> dict[str, Any]:
    """The step's output when the provider already did it: the charge's reference, as the
    step would have returned it (its `id`)."""
    return {"id": applied.provider_ref, "replayed": True}


@reconciled_step(provider="stripe", action="payment_intents.create", replay=replayed,
                 params=lambda order: body(order, keyed=False))
def charge_keyless(order: str) -> dict[str, Any]:
    """Sends neither an idempotency key nor the operation id: a resend would charge again."""
    return WORLD.send(order, keyed=False)


@reconciled_step(provider="stripe", action="payment_intents.create", replay=replayed,
                 keyed=True, tagged=True, retries_allowed=True, max_attempts=3,
                 interval_seconds=0.05,
                 params=lambda order: body(order, keyed=True, operation_id=step_operation()))
def charge_keyed(order: str) -> dict[str, Any]:
    """Sends the operation id as its Idempotency-Key and in `metadata[operation_id]`; DBOS
    retries it on an error."""
    return WORLD.send(order, keyed=True)


@DBOS.workflow()
def pay(order: str, keyed: bool) -> str:
    charged = charge_keyed(order) if keyed else charge_keyless(order)
    return str(charged["id"])


@dataclass(frozen=True)
class Job:
    """One process's run of workflow `workflow_id` (`start`: it starts it; else DBOS's
    recovery at launch does), killed at `kill_at` the first time it is reached."""

    workflow_id: str
    order: str
    keyed: bool
    start: bool
    dbos_db: str
    store_db: str
    config: Path
    sandbox_url: str
    out: Path
    kill_at: str | None = None
    fault: str | None = None


def run(job: Job) -> None:
    """The process's whole life: launch DBOS, run or recover the workflow, write its end."""
    hook = killer(Kill(job.kill_at, 1)) if job.kill_at else no_hook
    store = EmbeddedBackend(job.store_db, config=job.config)
    use_backend(KillingRecorder(store, hook))
    # A well-formed Stripe secret key, for the charge and the probes: the sandbox checks its
    # form, as Stripe would its value.
    os.environ["STRIPE_SECRET_KEY"] = STRIPE_KEY
    http = httpx.Client(timeout=5.0, transport=KillingTransport(hook),
                        headers={"Authorization": f"Bearer {STRIPE_KEY}"})
    WORLD.payments = Payments(job.sandbox_url, [job.fault] if job.fault else [], keyed=True,
                              http=http)
    DBOS(config={"name": "reconciled-steps", "system_database_url": job.dbos_db})
    DBOS.launch()
    try:
        if job.start:
            with SetWorkflowID(job.workflow_id):
                handle = DBOS.start_workflow(pay, job.order, job.keyed)
        else:
            handle = DBOS.retrieve_workflow(job.workflow_id)
        end: dict[str, Any] = {"result": handle.get_result()}
    except RetryRefusedError as refused:
        end = {"refused": refused.verdict}
    steps = DBOS.list_workflow_steps(job.workflow_id)
    # The charge is the workflow's first step (step number 1).
    end |= {"order": job.order, "operation_id": engine_operation("dbos", job.workflow_id, "1"),
            "sends": WORLD.sends, "steps": [
        {"name": s["function_name"], "output": s["output"],
         "error": type(s["error"]).__name__ if s["error"] else None} for s in steps]}
    job.out.write_text(json.dumps(end))
    DBOS.destroy()
    store.close()


def in_process(job: Job) -> int:
    """Run `job` in a fresh process; its exit code (-9: SIGKILLed)."""
    process = multiprocessing.get_context("spawn").Process(target=run, args=(job,))
    process.start()
    process.join(PROCESS_TIMEOUT_S)
    if process.is_alive():
        process.kill()
        process.join()
        raise TimeoutError(f"the DBOS process of {job.workflow_id} ran past "
                           f"{PROCESS_TIMEOUT_S} s")
    return int(process.exitcode or 0)
