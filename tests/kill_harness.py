"""A worker SIGKILLed between the provider's effect and its record, then restarted, for
`@effect` on a plain function, every framework adapter and the MCP proxy: the restarted worker
finishes the same run, the provider holds exactly one charge for it, and the model (the
caller) is told that charge.

    zygote (spawned once, every framework imported) ─fork─▶ worker 1: the run, SIGKILL at the
                                                             plan's (point, n-th time reached)
                                                    ─fork─▶ worker 2: the same run, unkilled
    sandbox objects by request hash ─▶ one charge for the run's operation; worker 2's tool
                                       results name it

A run asks for the charge twice (the second a new tool call with the same arguments, as a model
told "try again" would), so a plan can kill on the first call, on the repeat, or on the send a
retry grant allows. The kill points are the worker's own steps, reached in a fixed order:

    before/after record_intent   before/after reconcile   before/after ask_retry
    sending (the POST about to leave)   mid-response (the provider committed and answered its
    headers, the body unread)   before/after record_attempt (the effect done, not recorded)

and one plan kills from a timer while the provider holds the request, which it commits after
the worker died. The worker kills itself with SIGKILL (reconciler.chaos.worker's `killer`, the
chaos runner's), so the process that made the effect is the one that dies, with nothing
flushed. The restarted worker runs under the same holder name, as a supervisor restarts a
worker (ToolEffects.holder).

What the worker sends (since 90de639): its charge tool is declared keyed and tagged, and each
request carries what its intent records, the operation id as `Idempotency-Key` and in
`metadata[operation_id]`, where the probes find it (a key recorded and not sent would be a
false statement of the intent, SPEC section 3); the MCP run's upstream sends the key the proxy
gives it in `_meta` on (mcp_charges.py). So the sandbox deduplicates a resend of the same
charge: while the first request is in flight it answers 409, once that one committed it
replays it (docs/sandbox-api.md, as Stripe does:
https://docs.stripe.com/api/idempotent_requests). One charge at the sandbox therefore shows
that nothing after a kill charged twice; it would not show a resend the gate should have
refused, which the key absorbs. A test of the gate itself reads the worker's gate log
(below), or runs a keyless worker.

`Job.keyless` runs a worker whose tool sends neither (no key, no operation id in the
metadata: worker_log.UntaggedPayments), and every worker writes its gate log (`gate_log`: each
write it sent, each attempt's dispatch, each verdict and retry answer, timed), for tests of the
gate's answers rather than of kills (test_e2e_late_commit.py).
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import re
import signal
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

from probes.base import Probe
from reconciler.chaos.worker import Kill, killer
from reconciler.client.calls import RecordedOut
from reconciler.client.effects import Recorder
from reconciler.core.errors import RetryRefusedError
from reconciler.core.hashing import request_hash
from reconciler.core.schemas import AttemptIn, IntentIn, OperationOut, RetryIn, RetryOut
from reconciler.effect import effect
from reconciler.effect.backends import EmbeddedBackend
from reconciler.integrations.tool_calls import ToolEffects, tool_operation
from reconciler.runtime.toolgate import Hook, no_hook
from reconciler.sandbox import RunningSandbox
from reconciler.sandbox.credentials import SANDBOX_ENV
from reconciler.service.settings import load_providers
from reconciler.testing.patience import PATIENCE_S

EXAMPLES = Path(__file__).parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

from sandbox_charge import ARGUMENTS, Payments, charge_body, stripe_auth  # noqa: E402
from worker_log import Logged as Logged  # noqa: E402  (the gate log's entries, for its readers)
from worker_log import UntaggedPayments, logged, untagged  # noqa: E402

PROVIDER = "stripe"
#: A worker that outlives this is killed by the harness and its run counted as failed.
WORKER_TIMEOUT_S = PATIENCE_S


@dataclass(frozen=True)
class Plan:
    """Kill the worker the `nth` time it reaches `point` (or `after_s` later, from another
    thread: while the provider holds the request), its first send meeting `fault`. `settle_s`
    is how long the provider may still be committing a killed worker's request: the restart
    waits that long, since the examples' configuration says the sandbox settles at once
    (inflight_s 0), so a zero read before the orphan commits would count and open a retry
    (the settle time closes that race where inflight_s is set: test_e2e_late_commit.py)."""

    point: str
    nth: int = 1
    fault: str | None = None
    after_s: float = 0.0
    settle_s: float = 0.0

    def __str__(self) -> str:
        later = f" +{self.after_s}s" if self.after_s else ""
        return f"{self.point} #{self.nth}{later}" + (f" ({self.fault})" if self.fault else "")

    def hook(self) -> Hook:
        kill = killer(Kill(self.point, self.nth))
        if not self.after_s:
            return kill

        def later(point: str, run_id: str, tool_call_id: str | None) -> None:
            threading.Timer(self.after_s, kill, (point, run_id, tool_call_id)).start()

        return later


#: 21 kill points; each is reached on its path (a plan the worker survives fails the test).
PLANS: tuple[Plan, ...] = (
    # The first call: nothing recorded yet, then the effect, then its record.
    Plan("before record_intent"), Plan("after record_intent"), Plan("sending"),
    # Killed while the provider holds the request; it commits after the worker died.
    Plan("sending", fault="delay=0.3", after_s=0.1, settle_s=0.5),
    Plan("mid-response"), Plan("before record_attempt"), Plan("after record_attempt"),
    # The repeat: the gate reconciles and answers from the record.
    Plan("before record_intent", 2), Plan("after record_intent", 2), Plan("before reconcile"),
    Plan("after reconcile"), Plan("before ask_retry"), Plan("after ask_retry"),
    # The first send fails before the provider commits: the grant, then the granted send.
    Plan("after record_attempt", fault="fail_before_commit"),
    Plan("after ask_retry", fault="fail_before_commit"),
    Plan("sending", 2, fault="fail_before_commit"),
    Plan("mid-response", 2, fault="fail_before_commit"),
    Plan("before record_attempt", 2, fault="fail_before_commit"),
    # The provider commits, then answers an error: applied, and the answer says otherwise.
    Plan("mid-response", fault="error_after_commit"),
    Plan("before record_attempt", fault="error_after_commit"),
    Plan("after reconcile", fault="error_after_commit"),
)


class KillingRecorder:
    """`backend`, reaching `hook` before and after each of its calls, and logging its
    dispatches, verdicts and retry answers in `log`."""

    def __init__(self, backend: Recorder, hook: Hook, log: list[Logged] | None = None) -> None:
        self.backend, self.hook = backend, hook
        self.log = [] if log is None else log

    def _around(self, name: str, *args: Any) -> Any:
        self.hook(f"before {name}", "", None)
        result = getattr(self.backend, name)(*args)
        if (entry := logged(name, result, *args)) is not None:
            self.log.append(entry)
        self.hook(f"after {name}", "", None)
        return result

    def record_intent(self, intent: IntentIn) -> RecordedOut[OperationOut]:
        return self._around("record_intent", intent)  # type: ignore[no-any-return]

    def record_attempt(self, operation_id: str, attempt: AttemptIn) -> RecordedOut[OperationOut]:
        return self._around("record_attempt", operation_id, attempt)  # type: ignore[no-any-return]

    def reconcile(self, operation_id: str) -> OperationOut:
        return self._around("reconcile", operation_id)  # type: ignore[no-any-return]

    def ask_retry(self, operation_id: str, retry: RetryIn) -> RetryOut:
        return self._around("ask_retry", operation_id, retry)  # type: ignore[no-any-return]


class KillingTransport(httpx.HTTPTransport):
    """HTTP to the provider, reaching `hook` as a write leaves and once its answer's headers
    are in (the provider has committed by then; the body is not read yet)."""

    def __init__(self, hook: Hook) -> None:
        super().__init__(verify=False)  # plain HTTP on loopback: no CA bundle to load
        self.hook = hook

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        write = request.method == "POST"
        if write:
            self.hook("sending", "", None)
        response = super().handle_request(request)
        if write:
            self.hook("mid-response", "", None)
        return response


@dataclass
class Worker:
    """What an adapter's run gets in the forked worker. `probes` overrides, per provider, the
    configuration's probes (the MCP proxy reads its upstream instead)."""

    run_id: str
    payments: Payments
    backend: Recorder
    probes: dict[str, Sequence[Probe]] = field(default_factory=dict)
    #: The charge sends no key and no operation id (Job.keyless).
    keyless: bool = False

    @property
    def holder(self) -> str:
        return f"worker-{self.run_id}"

    def effects(self) -> ToolEffects:
        sends = frozenset() if self.keyless else frozenset({"charge"})
        return ToolEffects(PROVIDER, backend=self.backend, requests={"charge": charge_body},
                           holder=self.holder, keyed=sends, tagged=sends)


@dataclass(frozen=True)
class Adapter:
    """`run` ("module:function") runs one agent run: an example's `drive(payments, effects,
    run_id)` (examples/<framework>_agent.py), else a `drive(worker)`; `body(run_id)` is the
    request its charge sends (its hash is what the sandbox records)."""

    run: str
    body: Callable[[str], Mapping[str, Any]]
    example: bool = True

    @property
    def module(self) -> str:
        return self.run.partition(":")[0]

    def drive(self, worker: Worker) -> list[str]:
        run = getattr(importlib.import_module(self.module), self.run.partition(":")[2])
        answers: list[str] = (run(worker.payments, worker.effects(), worker.run_id)
                              if self.example else run(worker))
        return answers


def example_body(run_id: str) -> Mapping[str, Any]:
    """The examples' charge, as a run with scope `run_id` sends it."""
    return charge_body(tool_operation(run_id, "charge", ARGUMENTS), ARGUMENTS)


def mcp_body(run_id: str) -> Mapping[str, Any]:
    return importlib.import_module("mcp_charges").body(run_id)  # type: ignore[no-any-return]


def effect_body(run_id: str) -> Mapping[str, Any]:
    return charge_body(run_id, ARGUMENTS)


def drive_effect(worker: Worker) -> list[str]:
    """`@effect` on a plain function, called twice, as a caller that tries again would (a
    failed call's error is its answer: the provider's, a timeout, or the gate's refusal)."""
    body = effect_body(worker.run_id)

    @effect(provider=PROVIDER, action="payment_intents.create", operation_id=worker.run_id,
            key=None if worker.keyless else worker.run_id, params=body,
            backend=worker.backend, holder=worker.holder, tagged=not worker.keyless)
    def charge() -> dict[str, Any]:
        return worker.payments.send(body, worker.run_id)

    answers = []
    for _ in range(2):
        try:
            answers.append(str(charge()))
        except (httpx.HTTPError, RetryRefusedError) as failed:
            answers.append(f"failed: {failed}")
    return answers


ADAPTERS: dict[str, Adapter] = {
    "effect": Adapter("kill_harness:drive_effect", effect_body, example=False),
    "openai-agents": Adapter("openai_agents_agent:drive", example_body),
    "langgraph": Adapter("langgraph_agent:drive", example_body),
    "pydantic-ai": Adapter("pydantic_ai_agent:drive", example_body),
    "anthropic": Adapter("anthropic_agent:drive", example_body),
    "mcp-proxy": Adapter("mcp_charges:drive", mcp_body, example=False),
}


@dataclass(frozen=True)
class Job:
    """One worker: `adapter`'s run `run_id`, killed by `plan` (None: runs to its end); its
    charge tool `keyless` (sends no key and no operation id) or keyed and tagged."""

    adapter: str
    run_id: str
    plan: Plan | None
    db: str
    config: Path
    sandbox_url: str
    out: Path
    keyless: bool = False

    @property
    def log(self) -> Path:
        """Where the worker writes its gate log (`gate_log`)."""
        return self.out.with_suffix(".gate.json")


def gate_log(job: Job) -> list[Logged]:
    """What `job`'s worker sent ({"call": "send"}), recorded and was answered, in order."""
    return json.loads(job.log.read_text())  # type: ignore[no-any-return]


def work(job: Job) -> None:
    """The forked worker's whole life: the run, its tool results written to `job.out`."""
    plan = job.plan
    kill = plan.hook() if plan else no_hook
    log: list[Logged] = []

    def hook(point: str, run_id: str, tool_call_id: str | None) -> None:
        if point == "sending":
            log.append({"call": "send", "at": time.time()})
        kill(point, run_id, tool_call_id)

    # The worker sends the key its intents record (a key recorded and not sent would be a
    # false statement of the intent, SPEC section 3; a retry grant needs one, SPEC rule 6).
    payments = (UntaggedPayments if job.keyless else Payments)(
        job.sandbox_url, [plan.fault] if plan and plan.fault else [], keyed=True,
        http=httpx.Client(timeout=1.0, transport=KillingTransport(hook), headers=stripe_auth()))
    configured = load_providers(job.config)
    probes: dict[str, Sequence[Probe]] = {}

    def probes_for(name: str) -> Sequence[Probe]:
        return probes.get(name) or configured[name].probes

    with EmbeddedBackend(job.db, probes_for=probes_for,
                         contracts=[setup.contract for setup in configured.values()]) as store:
        worker = Worker(job.run_id, payments, KillingRecorder(store, hook, log), probes,
                        job.keyless)
        answers = ADAPTERS[job.adapter].drive(worker)
    job.out.write_text(json.dumps(answers))
    job.log.write_text(json.dumps(log))


def _serve(conn: Connection, modules: Sequence[str]) -> None:
    """The zygote: import the frameworks once, then fork one worker per job and report its
    pid and exit code (-9: killed by SIGKILL). The workers' probes read the providers'
    credentials from the environment, as a deployment's do: the sandbox's (it checks them)."""
    os.environ.update(SANDBOX_ENV)
    for module in modules:
        importlib.import_module(module)
    while (job := conn.recv()) is not None:
        pid = os.fork()
        if pid == 0:  # the worker
            code = 0
            try:
                work(job)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        conn.send(pid)
        _, status = os.waitpid(pid, 0)
        conn.send(os.waitstatus_to_exitcode(status))


class Zygote:
    """A spawned process with the adapters imported, forking workers on demand."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, theirs = context.Pipe()
        modules = sorted({a.module for a in ADAPTERS.values()})
        self.process = context.Process(target=_serve, args=(theirs, modules), daemon=True)
        self.process.start()

    def run(self, job: Job) -> int:
        """Run one worker to its end or its death: its exit code (-1000: timed out)."""
        self.conn.send(job)
        # The first fork waits for the zygote's imports.
        if not self.conn.poll(WORKER_TIMEOUT_S * 2):
            raise TimeoutError("the zygote forked no worker")
        pid = self.conn.recv()
        if self.conn.poll(WORKER_TIMEOUT_S):
            return int(self.conn.recv())
        os.kill(pid, signal.SIGKILL)
        self.conn.recv()
        return -1000

    def close(self) -> None:
        self.conn.send(None)
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()


@dataclass(frozen=True)
class KillRun:
    """What one plan came to: the first worker's exit, the charges for the run at the
    provider, and what the restarted worker's tool calls answered the model."""

    plan: Plan
    first_exit: int
    second_exit: int
    charges: list[str]
    answers: list[str]

    @property
    def killed(self) -> bool:
        return self.first_exit == -signal.SIGKILL

    @property
    def told(self) -> bool:
        """Every answer the restarted run gave the model names the one charge."""
        return len(self.charges) == 1 and bool(self.answers) and all(
            self.charges[0] in answer for answer in self.answers)


def kill_and_restart(zygote: Zygote, sandbox: RunningSandbox, adapter: str, config: Path,
                     folder: Path, plans: Sequence[Plan] = PLANS) -> list[KillRun]:
    """Every plan as a fresh run of `adapter`: killed, restarted, counted."""
    db = f"sqlite:///{folder / f'{adapter}.db'}"
    nonce = uuid.uuid4().hex[:6]
    runs = []
    for index, plan in enumerate(plans):
        run_id = f"{adapter}-{nonce}-{index:02d}"
        out = folder / f"{run_id}.json"
        first = zygote.run(Job(adapter, run_id, plan, db, config, sandbox.url, out))
        time.sleep(plan.settle_s)
        second = zygote.run(Job(adapter, run_id, None, db, config, sandbox.url, out))
        charges = charges_of(sandbox, adapter, run_id)
        answers = json.loads(out.read_text()) if second == 0 else []
        runs.append(KillRun(plan, first, second, charges, answers))
    return runs


def charges_of(sandbox: RunningSandbox, adapter: str, run_id: str,
               keyless: bool = False) -> list[str]:
    """The charges at the sandbox for `adapter`'s run `run_id`: by the hash of the body sent."""
    body = dict(ADAPTERS[adapter].body(run_id))
    wanted = request_hash(untagged(body) if keyless else body)
    return [r.ref for r in sandbox.state.objects() if r.request_hash == wanted]


def sandbox_config(sandbox: RunningSandbox, folder: Path, **contract: float) -> Path:
    """examples/reconciler.toml, reading `sandbox`, with the provider contract's fields in
    `contract` (inflight_s=3.0, reconcile_deadline_s=1.5) in place of the file's."""
    text = (EXAMPLES / "reconciler.toml").read_text().replace("http://127.0.0.1:8081",
                                                              sandbox.url)
    for name, value in contract.items():
        text, found = re.subn(rf"^{name} = .*$", f"{name} = {value}", text, flags=re.MULTILINE)
        if found != 1:
            raise ValueError(f"examples/reconciler.toml sets {name} {found} times, not once")
    config = folder / "reconciler.toml"
    config.write_text(text)
    return config
