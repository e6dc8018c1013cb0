"""What a repeat `@effect` call answers when the gate lets nothing be sent: `Applied` (the
provider did it already, with the references it shows) or the gate's refusal, a
`RetryRefusedError` that names the verdict and what to do next (`NEXT_STEP`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from reconciler.core.domain import Verdict
from reconciler.core.errors import RetryRefusedError
from reconciler.core.schemas import OperationOut, RetryOut

#: What to do after a refusal, by verdict: said to the caller (and to a model, by adapters).
NEXT_STEP: Mapping[Verdict, str] = {
    Verdict.INDETERMINATE: "the provider may or may not have done it: do not send it again; "
    "wait for reconciliation or a human resolution, then call again with the same operation id "
    "(that sends nothing unless the provider shows it not done and a same-key retry is open; a "
    "call without a key never gets one)",
    Verdict.DUPLICATE_EFFECT: "the provider did it more than once: stop, and compensate the "
    "extra effect or hand it to a human",
    Verdict.UNSAFE_RETRY: "a retry broke the provider's rules: halt this operation and hand it "
    "to a human",
    Verdict.FALSE_SUCCESS: "the provider answered success but shows no effect: mark the run "
    "unhealthy and hand it to a human",
    Verdict.VERIFIED_NOT_APPLIED: "the provider did not do it, yet no retry is open (no "
    "idempotency key, the retry budget or window spent, or another caller holds the lease)",
    Verdict.VERIFIED_APPLIED: "it is done: use the recorded outcome",
}


@dataclass(frozen=True, slots=True)
class Applied:
    """A repeat call answered without sending: the provider already did it."""

    operation_id: str
    provider_ref: str | None
    verdict: Verdict = Verdict.VERIFIED_APPLIED

    def __str__(self) -> str:
        ref = f" as {self.provider_ref}" if self.provider_ref else ""
        return (f"operation {self.operation_id} was already applied by the provider{ref}; "
                "it was not sent again")


def refs_of(operation: OperationOut) -> list[str]:
    """The distinct provider references an operation's attempts and evidence name."""
    refs = [a.receipt.provider_ref for a in operation.attempts if a.receipt]
    for e in operation.evidence:
        refs += [m.provider_ref for m in e.matches]
        if e.kind == "receipt" and e.provider_ref:
            refs.append(e.provider_ref)
    return list(dict.fromkeys(refs))


def refusal(operation_id: str, answer: RetryOut) -> RetryRefusedError:
    """The error a refused retry raises: the verdict, the gate's reason, and what to do."""
    step = NEXT_STEP.get(answer.verdict, "hand it to a human")
    return RetryRefusedError(operation_id, answer.verdict.value,
                             f"verdict {answer.verdict.value}: {answer.reason}. Next: {step}",
                             answer.findings)
