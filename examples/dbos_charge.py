"""A DBOS workflow whose charge step goes through the reconciler, offline: DBOS Transact on a
SQLite system database, the sandbox provider takes the charge (examples/sandbox_charge.py).

    python examples/dbos_charge.py error_after_commit   # charged, answered 500: DBOS's retry
                                                        # asks the gate, nothing sent: one charge
    python examples/dbos_charge.py fail_before_commit   # not charged: the retry is granted

The same step, re-run by DBOS's recovery after a crash between the charge and DBOS's record of
it, asks the gate the same way (tests/test_integration_dbos.py kills a process there).
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any, cast

from dbos import DBOS
from sandbox_charge import ARGUMENTS, Payments, Report, charge_body, report, sandbox_world

from reconciler.effect import Applied, use_backend
from reconciler.integrations.dbos import reconciled_step, step_operation

PAYMENTS: list[Payments] = []  # the sandbox's charge endpoint, once main has started it


def replayed(applied: Applied) -> dict[str, Any]:
    """The step's output when the provider shows the charge done: its id, as a charge's."""
    return {"id": applied.provider_ref, "replayed": True}


@reconciled_step(provider="stripe", action="payment_intents.create",
                 keyed=True, tagged=True, replay=replayed,
                 params=lambda order, amount: charge_body(
                     step_operation(), {"order": order, "amount": amount}),
                 retries_allowed=True, max_attempts=3, interval_seconds=0.1)
def charge(order: str, amount: int) -> dict[str, Any]:
    # Sends the operation id as Idempotency-Key (keyed) and in metadata (tagged).
    return PAYMENTS[0].charge(order, amount)


@DBOS.workflow()
def checkout(order: str, amount: int) -> str:
    return str(charge(order, amount)["id"])


def main(fault: str | None) -> Report:
    with sandbox_world(fault) as world, tempfile.TemporaryDirectory() as folder:
        use_backend(world.effects.backend)
        PAYMENTS[:] = [world.payments]
        DBOS(config={"name": "dbos-charge",
                     "system_database_url": f"sqlite:///{folder}/dbos.sqlite"})
        DBOS.launch()
        try:
            charged = checkout(cast(str, ARGUMENTS["order"]), cast(int, ARGUMENTS["amount"]))
        finally:
            DBOS.destroy()
            use_backend(None)
        return report(world, [charged])


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else None))
