"""The sandbox provider on a manual clock, for tests outside pytest or inside it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from reconciler.infra.clock import ManualClock
from reconciler.sandbox import RunningSandbox, running_sandbox


def on_manual_clock(sandbox: RunningSandbox, clock: ManualClock | None = None) -> ManualClock:
    """Reset `sandbox` to empty (no objects, keys or config) and run it on `clock` (a new
    `ManualClock` if none): what each test against a shared sandbox server starts from."""
    sandbox.state.reset()
    sandbox.state.clock = installed = clock or ManualClock()
    return installed


@contextmanager
def manual_sandbox(
        clock: ManualClock | None = None) -> Iterator[tuple[RunningSandbox, ManualClock]]:
    """A sandbox server on an ephemeral loopback port, on a manual clock, for the `with` block.

        with manual_sandbox() as (sandbox, clock):
            # the sandbox checks credentials as each provider does: SandboxAuth sends them
            httpx.post(sandbox.url + "/pay/v1/charges", auth=SandboxAuth(), ...)
            clock.advance(11)          # past a 10 s search lag, without sleeping
    """
    with running_sandbox() as sandbox:
        yield sandbox, on_manual_clock(sandbox, clock)
