"""What the framework examples share: the sandbox provider's Stripe API (PaymentIntents) as a
charge tool, and an embedded reconciler store probing it (examples/reconciler.toml's probes).

Each `examples/<framework>_agent.py` drives its framework with the framework's own scripted
model, which calls `charge` and then calls it again, as a model told "try again" would. The
first send meets the fault the example is run with:

    lose_response        the sandbox charges and the answer never arrives (a read timeout)
    fail_before_commit   the sandbox fails before charging
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from reconciler.core.domain import ProviderContract
from reconciler.effect import current_call
from reconciler.effect.backends import EmbeddedBackend
from reconciler.integrations.tool_calls import ToolEffects
from reconciler.sandbox import RunningSandbox, running_sandbox
from reconciler.sandbox.credentials import SANDBOX_ENV

CONFIG = Path(__file__).with_name("reconciler.toml")
ARGUMENTS = {"order": "A-17", "amount": 1200}
#: Where the charge tool and the probes read Stripe's key, as a deployment's would.
KEY_ENV = "STRIPE_SECRET_KEY"


def stripe_auth() -> dict[str, str]:
    """Stripe's key as Stripe takes it: the environment's, else the sandbox's (no secret)."""
    return {"Authorization": f"Bearer {os.environ.get(KEY_ENV, SANDBOX_ENV[KEY_ENV])}"}


def charge_body(operation_id: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The request a charge call sends; its hash is the intent's, which the sandbox echoes.
    The operation id goes where Stripe keeps metadata, `metadata[operation_id]`, the key the
    `stripe.payment_intents.*` probes search and match by (probes/recipes/stripe.py): the
    charge tool is declared `tagged`, so its intent says it carries the operation id."""
    return {"amount": arguments["amount"], "currency": "eur", "confirm": True,
            "payment_method": "pm_card_visa",
            "metadata": {"operation_id": operation_id, "order": arguments["order"]}}


@dataclass
class Payments:
    """The sandbox's charge endpoint; `faults` are used up, one per send."""

    url: str
    faults: list[str] = field(default_factory=list)
    #: False: send no Idempotency-Key, as to a provider without keys (a resend charges again).
    keyed: bool = True
    http: httpx.Client = field(
        default_factory=lambda: httpx.Client(timeout=1.0, headers=stripe_auth()))

    def charge(self, order: str, amount: int) -> dict[str, Any]:
        """Charge the customer for an order (amount in cents)."""
        call = current_call()
        if call is None:
            raise RuntimeError("charge runs through the reconciler only")
        # The operation id in the body's metadata (`tagged`), the key as Idempotency-Key
        # (`keyed`): what the intent says the request carries.
        return self.send(charge_body(call.operation_id, {"order": order, "amount": amount}),
                         call.intent.idempotency_key)

    def send(self, body: Mapping[str, Any], key: str | None) -> dict[str, Any]:
        """POST one PaymentIntent; an error status raises."""
        headers = {"Idempotency-Key": key} if key and self.keyed else {}
        if self.faults:
            headers["X-Sandbox-Fault"] = self.faults.pop(0)
        response = self.http.post(f"{self.url}/pay/v1/payment_intents", headers=headers,
                                  json=dict(body))
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer


@dataclass
class World:
    sandbox: RunningSandbox
    payments: Payments
    effects: ToolEffects

    def charges(self) -> list[str]:
        return [r.ref for r in self.sandbox.state.objects()
                if r.provider == "pay" and r.ref.startswith("pi_")]


@contextmanager
def sandbox_world(fault: str | None, contracts: Sequence[ProviderContract] = ()
                  ) -> Iterator[World]:
    """A sandbox provider on a loopback port, and a store in a temporary folder (`contracts`
    in place of the configuration's). The charge tool sends the key it is given and tags the
    PaymentIntent with the operation id, and its `ToolEffects` says so. Both send Stripe's key
    from STRIPE_SECRET_KEY; unset, the sandbox's is set (a key of Stripe's form, no secret: the
    sandbox checks keys as Stripe does, docs/sandbox-api.md)."""
    os.environ.setdefault(KEY_ENV, SANDBOX_ENV[KEY_ENV])
    with running_sandbox() as sandbox, tempfile.TemporaryDirectory() as folder:
        sandbox.state.configure(hold_s=2.0)  # a lost answer outlives the client's timeout
        config = Path(folder) / "reconciler.toml"
        config.write_text(CONFIG.read_text().replace("http://127.0.0.1:8081", sandbox.url))
        with EmbeddedBackend(f"sqlite:///{folder}/receipts.db", config=config,
                             contracts=contracts) as store:
            yield World(sandbox, Payments(sandbox.url, [fault] if fault else []),
                        ToolEffects("stripe", backend=store, requests={"charge": charge_body},
                                    keyed={"charge"}, tagged={"charge"}))


@dataclass(frozen=True)
class Report:
    """What the model was told, call by call, and the charges the provider holds."""

    answers: list[str]
    charges: list[str]

    def __str__(self) -> str:
        lines = [f"tool result {n}: {answer}" for n, answer in enumerate(self.answers, 1)]
        return "\n".join([*lines, f"charges at the provider: {self.charges}"])


def report(world: World, answers: list[str]) -> Report:
    return Report(answers, world.charges())
