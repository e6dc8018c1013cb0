"""A Temporal activity whose charge goes through the reconciler, offline: temporalio's own
`ActivityEnvironment` runs the activity attempt after attempt, as a worker does under the
activity's retry policy (no Temporal server), and the sandbox provider takes the charge
(examples/sandbox_charge.py).

    python examples/temporal_charge.py error_after_commit   # charged, answered 500: the
                                                            # reconcile shows it done: one charge
    python examples/temporal_charge.py fail_before_commit   # not charged: attempt 2 is granted
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from typing import Any, cast

from sandbox_charge import ARGUMENTS, Payments, Report, charge_body, report, sandbox_world
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from reconciler.effect import Applied, use_backend
from reconciler.integrations.temporal import activity_operation, reconciled_activity

PAYMENTS: list[Payments] = []  # the sandbox's charge endpoint, once main has started it


def replayed(applied: Applied) -> dict[str, Any]:
    """The activity's result when the provider shows the charge done: its id."""
    return {"id": applied.provider_ref, "replayed": True}


@activity.defn(name="charge")
@reconciled_activity("stripe", action="payment_intents.create", keyed=True, tagged=True,
                     replay=replayed,
                     params=lambda order, amount: charge_body(
                         activity_operation(), {"order": order, "amount": amount}))
async def charge(order: str, amount: int) -> dict[str, Any]:
    # Sends the operation id as Idempotency-Key (keyed) and in metadata (tagged).
    return await asyncio.to_thread(PAYMENTS[0].charge, order, amount)


def attempts(order: str, amount: int, most: int = 3) -> list[str]:
    """Run `charge` as Temporal's retry policy would: attempt after attempt until one
    succeeds or fails non-retryable. What each attempt came to."""
    came_to: list[str] = []
    for attempt in range(1, most + 1):
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, workflow_id="order-A-17", activity_id="1",
                                       activity_type="charge", attempt=attempt)
        try:
            result = asyncio.run(env.run(charge, order, amount))
        except ApplicationError as failed:
            came_to.append(f"attempt {attempt}: {failed.type}, non_retryable="
                           f"{failed.non_retryable}, {failed.details[0]['verdict']}")
            if failed.non_retryable:
                break
        except Exception as failed:  # the provider's own error: Temporal retries it
            came_to.append(f"attempt {attempt}: {type(failed).__name__}")
        else:
            came_to.append(f"attempt {attempt}: {result['id']}"
                           + (" (replayed)" if result.get("replayed") else ""))
            break
    return came_to


def main(fault: str | None) -> Report:
    with sandbox_world(fault) as world:
        use_backend(world.effects.backend)
        PAYMENTS[:] = [world.payments]
        try:
            came_to = attempts(cast(str, ARGUMENTS["order"]), cast(int, ARGUMENTS["amount"]))
        finally:
            use_backend(None)
        return report(world, came_to)


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else None))
