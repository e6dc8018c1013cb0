"""`@effect` on plain functions (sync and async), over both backends: what each call records,
and what a repeat call gets from the retry gate."""

from __future__ import annotations

import asyncio
import urllib.error
from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.client import ReconcilerClient, intent
from reconciler.client.effects import Recorder
from reconciler.core.domain import Outcome, Verdict
from reconciler.core.errors import IntentConflictError, RetryRefusedError, ServiceError
from reconciler.core.outcomes import outcome_of
from reconciler.core.schemas import AttemptOut, MatchIn, OperationOut
from reconciler.effect import Applied, EffectSite, current_call, effect
from reconciler.effect.backends import EmbeddedBackend

from effect_harness import CONTRACT, PROVIDER, Lost, Provider, backend


def charging(recorder: Recorder, provider: Provider, **options: Any) -> Any:
    """The decorated function of these tests: one charge per order id."""
    @effect(provider=PROVIDER, action="charge", key=lambda order, amount: f"order-{order}",
            backend=recorder, **options)
    def charge(order: str, amount: int) -> dict[str, Any]:
        return provider.charge(f"order-{order}", amount)
    return charge


def operation(recorder: Recorder, operation_id: str) -> OperationOut:
    return recorder.reconcile(operation_id)


def only_attempt(recorder: Recorder, operation_id: str) -> AttemptOut:
    [attempt] = operation(recorder, operation_id).attempts
    return attempt


def test_a_returned_value_is_a_response_with_its_receipt(recorder: Recorder,
                                                         provider: Provider) -> None:
    assert charging(recorder, provider)("1", 1200) == {"id": "ch_1", "amount": 1200}
    attempt = only_attempt(recorder, "order-1")
    assert (attempt.outcome, attempt.status) == (Outcome.RESPONSE, 200)
    assert attempt.receipt is not None and attempt.receipt.provider_ref == "ch_1"


def test_an_sdk_object_without_status_code_is_recorded(recorder: Recorder) -> None:
    class Charge:  # what an SDK returns: an object with an id, no HTTP surface
        id = "ch_sdk"

    @effect(provider=PROVIDER, action="charge", key="k-sdk", params={"amount": 1},
            backend=recorder)
    def charge() -> Charge:
        return Charge()

    assert isinstance(charge(), Charge)
    attempt = only_attempt(recorder, "k-sdk")
    assert attempt.status == 200 and attempt.receipt is not None
    assert attempt.receipt.provider_ref == "ch_sdk"


def test_the_client_records_a_send_that_returns_no_httpx_response(tmp_path: Path) -> None:
    """The issue's bug: `track().dispatch` with an SDK's send raised AttributeError after the
    charge and recorded no attempt."""
    with backend("sidecar", Provider(), tmp_path) as client:
        assert isinstance(client, ReconcilerClient)
        op = intent("op-sdk", provider=PROVIDER, action="charge", effect="non_idempotent",
                    params={"amount": 1}, idempotency_key="k")
        with client.track(op, receipt=lambda r: MatchIn(provider_ref=r["id"])  # type: ignore[index]
                         ) as call:
            call.dispatch(lambda: {"id": "ch_9"})  # type: ignore[arg-type, return-value]
        [attempt] = client.get("op-sdk").attempts
        assert attempt.status == 200 and attempt.receipt is not None
        assert attempt.receipt.provider_ref == "ch_9"


def test_a_receipt_reader_that_fails_costs_no_attempt(recorder: Recorder,
                                                      provider: Provider) -> None:
    def broken(result: Any) -> MatchIn | None:
        raise KeyError("no such field")

    charging(recorder, provider, receipt=broken)("2", 5)
    attempt = only_attempt(recorder, "order-2")
    assert attempt.outcome is Outcome.RESPONSE and attempt.receipt is None


class StatusError(Exception):
    """An SDK's error for a 4xx answer (stripe's carry `http_status`)."""

    http_status = 402


OUTCOMES = [
    pytest.param(ConnectionRefusedError(), Outcome.NOT_SENT, None, id="refused-not_sent"),
    pytest.param(httpx.ConnectError("x"), Outcome.NOT_SENT, None, id="httpx-connect-not_sent"),
    pytest.param(urllib.error.URLError(ConnectionRefusedError()), Outcome.NOT_SENT, None,
                 id="urllib-refused-not_sent"),
    pytest.param(httpx.ReadTimeout("x"), Outcome.TIMEOUT, None, id="httpx-read-timeout"),
    pytest.param(TimeoutError(), Outcome.TIMEOUT, None, id="socket-timeout"),
    pytest.param(httpx.RemoteProtocolError("x"), Outcome.CONNECTION_ERROR, None,
                 id="httpx-dropped-connection_error"),
    pytest.param(ConnectionResetError(), Outcome.CONNECTION_ERROR, None,
                 id="reset-connection_error"),
    pytest.param(ValueError("unknown"), Outcome.CONNECTION_ERROR, None,
                 id="unknown-is-ambiguous"),
    pytest.param(StatusError(), Outcome.RESPONSE, 402, id="sdk-status-error-response"),
]


@pytest.mark.parametrize(("error", "outcome", "status"), OUTCOMES)
def test_an_exception_is_recorded_as_its_transport_outcome(
        recorder: Recorder, error: Exception, outcome: Outcome, status: int | None) -> None:
    @effect(provider=PROVIDER, action="charge", key="k-err", params={}, backend=recorder)
    def send() -> None:
        raise error

    with pytest.raises(type(error)):
        send()
    attempt = only_attempt(recorder, "k-err")
    assert (attempt.outcome, attempt.status) == (outcome, status)


def test_the_classify_hook_names_the_outcome_of_an_unknown_exception(
        recorder: Recorder) -> None:
    class Unsent(Exception):
        pass

    @effect(provider=PROVIDER, action="charge", key="k-hook", params={}, backend=recorder,
            classify=lambda exc: Outcome.NOT_SENT if isinstance(exc, Unsent) else None)
    def send() -> None:
        raise Unsent

    with pytest.raises(Unsent):
        send()
    assert only_attempt(recorder, "k-hook").outcome is Outcome.NOT_SENT


def test_a_repeat_after_a_lost_answer_returns_the_recorded_outcome_and_sends_nothing(
        recorder: Recorder, provider: Provider) -> None:
    provider.faults = ["lose_response"]
    charge = charging(recorder, provider)
    with pytest.raises(Lost):
        charge("3", 1200)
    again = charge("3", 1200)
    assert again == Applied("order-3", "ch_1")
    assert (provider.calls, provider.refs("order-3")) == (1, ["ch_1"])


def test_a_repeat_after_a_failed_send_is_granted_and_charges_once(
        recorder: Recorder, provider: Provider) -> None:
    provider.faults = ["fail_before_commit"]
    charge = charging(recorder, provider)
    with pytest.raises(Lost):
        charge("4", 1200)
    assert charge("4", 1200) == {"id": "ch_1", "amount": 1200}
    assert provider.refs("order-4") == ["ch_1"]
    done = operation(recorder, "order-4")
    assert [a.attempt for a in done.attempts] == [1, 2]
    # Reported with its grant's holder and token: sent under the grant, not a blind retry.
    assert done.verdict is Verdict.VERIFIED_APPLIED, done.findings


def test_a_refused_retry_raises_with_the_verdict_and_what_to_do(tmp_path: Path) -> None:
    provider = Provider(faults=["lose_response"])
    # No probe: nothing can show whether the lost charge happened.
    with EmbeddedBackend(f"sqlite:///{tmp_path / 'r.db'}", contracts=[CONTRACT]) as recorder:
        charge = charging(recorder, provider)
        with pytest.raises(Lost):
            charge("5", 1200)
        with pytest.raises(RetryRefusedError) as refused:
            charge("5", 1200)
    assert refused.value.verdict == Verdict.INDETERMINATE.value
    assert "verdict indeterminate" in str(refused.value)
    assert "do not send it again" in str(refused.value)
    assert provider.calls == 1


def test_a_changed_request_under_the_same_key_is_refused(recorder: Recorder,
                                                         provider: Provider) -> None:
    charge = charging(recorder, provider)
    charge("6", 1200)
    with pytest.raises((IntentConflictError, ServiceError)) as conflict:
        charge("6", 9999)
    assert "new operation id" in str(conflict.value) or (
        isinstance(conflict.value, ServiceError) and conflict.value.status == 409)
    assert provider.calls == 1


def test_a_restarted_worker_is_answered_from_the_provider(recorder: Recorder,
                                                          provider: Provider) -> None:
    """Killed after the send and before its record: the intent is there, no attempt is."""
    site: EffectSite[Any] = effect(provider=PROVIDER, action="charge", key="order-7",
                                   params={"order": "7", "amount": 1200}, backend=recorder)
    with site:
        provider.charge("order-7", 1200)  # sent by the process that died
    charge = charging(recorder, provider)
    assert charge("7", 1200) == Applied("order-7", "ch_1")
    assert provider.refs("order-7") == ["ch_1"]


def test_replay_turns_the_recorded_outcome_into_the_functions_type(
        recorder: Recorder, provider: Provider) -> None:
    provider.faults = ["lose_response"]
    charge = charging(recorder, provider, replay=lambda done: {"id": done.provider_ref})
    with pytest.raises(Lost):
        charge("8", 1200)
    assert charge("8", 1200) == {"id": "ch_1"}


def test_the_context_manager_records_the_intent_before_the_call(
        recorder: Recorder, provider: Provider) -> None:
    with effect(provider=PROVIDER, action="charge", key="order-9",
                params={"amount": 1}, backend=recorder) as call:
        assert operation(recorder, "order-9").attempts == []
        assert call.run(provider.charge, "order-9", 1) == {"id": "ch_1", "amount": 1}
    receipt = only_attempt(recorder, "order-9").receipt
    assert receipt is not None and receipt.provider_ref == "ch_1"


def test_a_read_only_call_is_neither_recorded_nor_gated(recorder: Recorder) -> None:
    calls: list[int] = []

    @effect(provider=PROVIDER, action="list", effect="read_only", key="k-read", params={},
            backend=recorder)
    def read() -> int:
        calls.append(1)
        return len(calls)

    assert (read(), read()) == (1, 2)


def test_async_a_lost_answer_is_not_sent_twice(recorder: Recorder,
                                               provider: Provider) -> None:
    provider.faults = ["lose_response"]

    @effect(provider=PROVIDER, action="charge", key=lambda order: f"order-{order}",
            backend=recorder)
    async def charge(order: str) -> dict[str, Any]:
        await asyncio.sleep(0)
        return provider.charge(f"order-{order}", 1)

    with pytest.raises(Lost):
        asyncio.run(charge("10"))
    assert asyncio.run(charge("10")) == Applied("order-10", "ch_1")
    assert provider.calls == 1


def test_async_a_cancelled_call_is_recorded_as_a_timeout(recorder: Recorder) -> None:
    sent = asyncio.Event()

    @effect(provider=PROVIDER, action="charge", key="k-cancel", params={}, backend=recorder)
    async def slow() -> None:
        sent.set()
        await asyncio.sleep(10)

    async def cancel_it() -> None:
        task = asyncio.create_task(slow())
        await asyncio.wait_for(sent.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_it())
    assert only_attempt(recorder, "k-cancel").outcome is Outcome.TIMEOUT


def test_a_wrapped_cause_refines_an_ambiguous_wrapper() -> None:
    try:
        try:
            raise ConnectionRefusedError
        except ConnectionRefusedError as refused:
            raise ConnectionError("could not reach the provider") from refused
    except ConnectionError as wrapper:
        assert outcome_of(wrapper) is Outcome.NOT_SENT


def test_an_error_raised_while_handling_another_is_not_refined_by_it() -> None:
    """An earlier refusal in the context says nothing about the send that failed later."""
    try:
        try:
            raise ConnectionRefusedError
        except ConnectionRefusedError:
            raise ConnectionResetError  # noqa: B904
    except ConnectionResetError as later:
        assert outcome_of(later) is Outcome.CONNECTION_ERROR


def test_the_running_call_tells_the_function_its_key(recorder: Recorder) -> None:
    @effect(provider=PROVIDER, action="charge", key="k-current", params={}, backend=recorder)
    def send() -> str | None:
        call = current_call()
        return call.intent.idempotency_key if call else None

    assert send() == "k-current"
    assert current_call() is None
