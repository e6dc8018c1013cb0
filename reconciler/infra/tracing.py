"""OpenTelemetry spans for what the reconciler does to an operation, in the agent's own trace.

Off unless configured: without the `opentelemetry` extra nothing here does anything, and with
it the spans go to whatever tracer provider the process set (a worker's own: Logfire,
Langfuse, Phoenix, an OTLP exporter), a no-op until one is. The sidecar sets one from the
standard `OTEL_*` variables (`configure_from_env`).

    worker:  execute_tool charge ─┬─ reconciler.intent (client) ──traceparent──▶ sidecar:
                                  │                                reconciler.intent (server)
                                  ├─ reconciler.retry_check ──▶ reconciler.retry_check
                                  │                               ├─ reconciler.probe_read
                                  │                               └─ reconciler.verdict
                                  └─ reconciler.attempt ──▶ reconciler.attempt

The tool span is named and attributed as OpenTelemetry's GenAI conventions name a tool
execution (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-agent-spans/
#execute-tool-span): `execute_tool {gen_ai.tool.name}`, `gen_ai.operation.name`,
`gen_ai.tool.name`, `gen_ai.tool.call.id`; the conventions' opt-in arguments and result are
never recorded. Every attribute goes through `ATTRIBUTES`, a list of names whose values are
identities, hashes, verdicts and counts (SPEC section 2: never a secret, a body or an
argument); any other name is dropped.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
except ImportError:  # the extra is not installed: tracing is off
    otel_context = propagate = trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from reconciler.client.calls import RecordedOut
    from reconciler.client.effects import Recorder
    from reconciler.core.schemas import AttemptIn, IntentIn, OperationOut, RetryIn, RetryOut

#: The attributes a span may carry: identities, verdicts, counts; never a value of the call.
ATTRIBUTES = frozenset({
    "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.tool.type",
    "reconciler.operation_id", "reconciler.run_id", "reconciler.provider",
    "reconciler.action", "reconciler.effect", "reconciler.verdict", "reconciler.findings",
    "reconciler.next_action", "reconciler.escalated", "reconciler.attempt",
    "reconciler.outcome", "reconciler.status", "reconciler.retry.allowed",
    "reconciler.probe", "reconciler.authority", "reconciler.matches",
    "reconciler.verdict.changed", "http.request.method", "http.route",
    "http.response.status_code",
})
TRACER = "reconciler"
#: Any of these set means the operator configured an exporter (the SDK's own variables).
_CONFIGURED_BY = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                  "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def enabled() -> bool:
    """Whether spans go anywhere: the OpenTelemetry API is installed and a tracer provider is
    set (by `configure_from_env`, or by the worker's own set-up). Installed but not set up,
    nothing is traced, and no span costs the hot path anything."""
    return trace is not None and not isinstance(trace.get_tracer_provider(),
                                                trace.ProxyTracerProvider)


def attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` as span attributes: the names in `ATTRIBUTES` whose values are plain (a str,
    number or bool, or a sequence of str); everything else left out."""
    kept: dict[str, Any] = {}
    for name, value in values.items():
        if name not in ATTRIBUTES or value is None:
            continue
        if isinstance(value, str | bool | int | float):
            kept[name] = value
        elif isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
            kept[name] = list(value)
    return kept


@contextmanager
def span(name: str, values: Mapping[str, Any], *, kind: str = "internal",
         context: Any = None) -> Iterator[Span | None]:
    """A span `name` (current while the block runs) with `values` as its attributes; None
    when tracing is off. `kind`: internal, client or server; `context`: the parent
    (`extract`), else the current span."""
    if not enabled():
        yield None
        return
    kinds = {"internal": trace.SpanKind.INTERNAL, "client": trace.SpanKind.CLIENT,
             "server": trace.SpanKind.SERVER}
    with trace.get_tracer(TRACER).start_as_current_span(
            name, context=context, kind=kinds[kind], attributes=attributes(values)) as current:
        yield current


def annotate(current: Span | None, values: Mapping[str, Any]) -> None:
    """Add attributes learned once the work is done (a verdict, an outcome)."""
    if current is not None:
        current.set_attributes(attributes(values))


def tool_span(tool: str, call_id: str, values: Mapping[str, Any]) -> Any:
    """The GenAI tool-execution span of one call of `tool`."""
    if not enabled():
        return nullcontext(None)
    return span(f"execute_tool {tool}", {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "function", **values})


def probe_read(probe: str, operation_id: str, answer: Any, seconds: float) -> None:
    """A span for one probe read that took `seconds` and answered `answer` (an observation:
    its authority and how many effects it matched; else a receipt), ending now."""
    if not enabled():
        return
    end = time.time_ns()
    authority = getattr(answer, "authority", None)
    read = trace.get_tracer(TRACER).start_span(
        "reconciler.probe_read", start_time=end - int(seconds * 1e9), attributes=attributes({
            "reconciler.operation_id": operation_id, "reconciler.probe": probe,
            "reconciler.authority": authority.value if authority is not None else "receipt",
            "reconciler.matches": len(getattr(answer, "matches", ()))}))
    read.end(end_time=end)


def verdict_changed(judgement: Any) -> None:
    """A span for a verdict the ledger entered (`ledger.Judgement`, `changed`)."""
    if not enabled():
        return
    with trace.get_tracer(TRACER).start_as_current_span("reconciler.verdict") as current:
        if not current.is_recording():
            return  # no exporter: the operation id would cost a read of its facts
        decision = judgement.decision
        annotate(current, {
            "reconciler.operation_id": judgement.snapshot.facts.intent.operation_id,
            "reconciler.verdict": decision.verdict.value,
            "reconciler.findings": list(decision.findings),
            "reconciler.next_action": decision.next_action,
            "reconciler.escalated": judgement.escalated, "reconciler.verdict.changed": True})


def inject(headers: MutableMapping[str, str]) -> None:
    """Put the current trace context in `headers` (W3C `traceparent`, `tracestate`)."""
    if propagate is not None:
        propagate.inject(headers)


def extract(headers: Mapping[str, str]) -> Any:
    """The trace context a request carried (None when tracing is off)."""
    return propagate.extract(headers) if propagate is not None else None


def configure_from_env() -> bool:
    """Export spans as the standard `OTEL_*` variables say (OTLP by default: the endpoint,
    protocol, headers and service name are the SDK's own variables), once per process.
    Nothing is set up when none of them names an exporter, when `OTEL_SDK_DISABLED` is
    true, when the SDK is not installed, or when the process already has a provider.
    True when spans are exported."""
    if trace is None or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")[0].strip()
    if exporter == "none" or not any(os.environ.get(name) for name in _CONFIGURED_BY):
        return False
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return True  # configured already (by this process's own setup, or a second app)
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        return False
    provider = TracerProvider()  # the resource from OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    provider.add_span_processor(BatchSpanProcessor(_exporter(exporter)))
    trace.set_tracer_provider(provider)
    return True


def _exporter(name: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter
        return ConsoleSpanExporter()
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                              os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"))
    if protocol != "http/protobuf":
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r}: the sidecar exports "
                         "OTLP over HTTP (http/protobuf) only")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter()  # endpoint, headers, timeout: OTEL_EXPORTER_OTLP_* variables



def judged(operation: OperationOut) -> dict[str, Any]:
    """An operation's verdict as span attributes."""
    return {"reconciler.operation_id": operation.intent.operation_id,
            "reconciler.verdict": operation.verdict.value,
            "reconciler.findings": list(operation.findings),
            "reconciler.next_action": operation.next_action,
            "reconciler.escalated": operation.escalated}


@contextmanager
def traced_call(call: Any) -> Iterator[None]:
    """The tool span of one `@effect` call (`reconciler.effect.EffectCall`): its intent's
    action is the tool, its tool call id (else the operation id) the call; the verdict the
    call ended on is added when it ends."""
    intent: IntentIn = call.intent
    with tool_span(intent.action, intent.tool_call_id or intent.operation_id, {
            "reconciler.operation_id": intent.operation_id, "reconciler.run_id": intent.run_id,
            "reconciler.provider": intent.provider, "reconciler.effect": intent.effect.value,
    }) as current:
        try:
            yield
        finally:
            if call.standing is not None:
                annotate(current, judged(call.standing))
            if call.last_outcome is not None:
                annotate(current, {"reconciler.outcome": call.last_outcome.value,
                                   "reconciler.attempt": call.attempts})


def traced(backend: Recorder) -> Recorder:
    """`backend` with a client span around each of its calls, and, when it speaks HTTP (a
    `ReconcilerClient`), the trace context in each request it sends, so that the sidecar's
    spans join the caller's trace. `backend` itself when tracing is off."""
    if trace is None or isinstance(backend, TracedRecorder):
        return backend
    http = getattr(backend, "http", None)
    hooks = getattr(http, "event_hooks", None)
    if isinstance(hooks, dict) and _inject_request not in hooks.get("request", []):
        hooks.setdefault("request", []).append(_inject_request)
        http.event_hooks = hooks  # type: ignore[union-attr]
    return TracedRecorder(backend)


def _inject_request(request: Any) -> None:
    inject(request.headers)


class TracedRecorder:
    """A `Recorder` whose every call is a client span named after what it records."""

    def __init__(self, backend: Recorder) -> None:
        self.backend = backend

    def record_intent(self, intent: IntentIn) -> RecordedOut[OperationOut]:
        with span("reconciler.intent", {
                "reconciler.operation_id": intent.operation_id,
                "reconciler.provider": intent.provider, "reconciler.action": intent.action,
                "reconciler.effect": intent.effect.value}, kind="client") as current:
            recorded = self.backend.record_intent(intent)
            annotate(current, judged(recorded.value))
            return recorded

    def record_attempt(self, operation_id: str, attempt: AttemptIn) -> RecordedOut[OperationOut]:
        with span("reconciler.attempt", {
                "reconciler.operation_id": operation_id, "reconciler.attempt": attempt.attempt,
                "reconciler.outcome": attempt.outcome.value, "reconciler.status": attempt.status,
        }, kind="client") as current:
            recorded = self.backend.record_attempt(operation_id, attempt)
            annotate(current, judged(recorded.value))
            return recorded

    def reconcile(self, operation_id: str) -> OperationOut:
        with span("reconciler.reconcile", {"reconciler.operation_id": operation_id},
                  kind="client") as current:
            operation = self.backend.reconcile(operation_id)
            annotate(current, judged(operation))
            return operation

    def ask_retry(self, operation_id: str, retry: RetryIn) -> RetryOut:
        with span("reconciler.retry_check", {"reconciler.operation_id": operation_id},
                  kind="client") as current:
            answer = self.backend.ask_retry(operation_id, retry)
            annotate(current, {"reconciler.retry.allowed": answer.allowed,
                               "reconciler.verdict": answer.verdict.value,
                               "reconciler.findings": list(answer.findings)})
            return answer
