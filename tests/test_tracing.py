"""OpenTelemetry: a worker's tool call and the sidecar's work on it are one trace
(reconciler.infra.tracing, reconciler.service.trace_context). The worker, in this process, keeps its
spans in an in-memory exporter; the sidecar, a process of its own configured by the standard
`OTEL_*` variables only, exports OTLP over HTTP to a receiver in this test. The charge is the
examples' PaymentIntent at the sandbox, which the sidecar's probes read."""

from __future__ import annotations

import http.server
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from reconciler.effect import Applied
from reconciler.infra import tracing
from reconciler.sandbox import RunningSandbox

from kill_harness import sandbox_config
from service_harness import serving_process

sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
from sandbox_charge import Payments, charge_body

ORDER = "A-17-traced"
OPERATION = f"charge-{ORDER}"
DOCS = Path(__file__).parent.parent / "docs" / "integrations" / "opentelemetry.md"
STRIPE_KEY = "sk_test_sandbox"
TOKEN = "tracing-test-token-0123456789abcdef"
#: The sidecar's spans this test waits for, one of each at least.
SIDECAR_SPANS = {"reconciler.intent", "reconciler.attempt", "reconciler.reconcile",
                 "reconciler.retry_check", "reconciler.probe_read", "reconciler.verdict"}


@dataclass
class Received:
    """A span the receiver was sent, as OTLP carries it."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


@dataclass
class Receiver:
    """An OTLP/HTTP trace receiver (POST /v1/traces, protobuf) on a loopback port."""

    url: str
    spans: list[Received] = field(default_factory=list)

    def names(self) -> set[str]:
        return {s.name for s in self.spans}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got = Receiver("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            export = ExportTraceServiceRequest()
            export.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
            for resource in export.resource_spans:
                for scope in resource.scope_spans:
                    got.spans += [Received(
                        s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                        {a.key: _value(a.value) for a in s.attributes}) for s in scope.spans]
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    got.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield got
    server.shutdown()
    thread.join(10)


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@pytest.fixture(scope="module")
def worker_spans() -> InMemorySpanExporter:
    """The worker's spans: this process's tracer provider, kept in memory."""
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def sidecar_settings() -> dict[str, str]:
    """The sidecar's variables, as docs/integrations/opentelemetry.md sets them."""
    block = DOCS.read_text().split("```sh\n", 1)[1].split("```", 1)[0]
    return dict(line.split("=", 1) for line in block.splitlines())


def hex_id(number: int, width: int) -> str:
    return f"{number:0{width}x}"


def test_a_tool_call_and_the_sidecars_work_on_it_are_one_trace(
        sandbox: RunningSandbox, tmp_path: Path, receiver: Receiver,
        worker_spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    # The sidecar's tracing: the variables docs/integrations/opentelemetry.md sets, the
    # endpoint the receiver's.
    env = {"RECONCILER_DB": f"sqlite:///{tmp_path / 'r.db'}",
           "RECONCILER_CONFIG": str(sandbox_config(sandbox, tmp_path)),
           "RECONCILER_TOKEN": TOKEN, "RECONCILER_SWEEP_INTERVAL_S": "0",
           "STRIPE_SECRET_KEY": STRIPE_KEY,  # what the sidecar's probes send the sandbox
           **sidecar_settings(),
           "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{receiver.url}/v1/traces"}
    payments = Payments(sandbox.url, ["error_after_commit"], keyed=True, http=httpx.Client(
        timeout=5.0, headers={"Authorization": f"Bearer {STRIPE_KEY}"}))
    with serving_process(env, cwd=tmp_path) as sidecar:
        monkeypatch.setenv("RECONCILER_URL", sidecar.url)
        monkeypatch.setenv("RECONCILER_TOKEN", TOKEN)
        # The worker is docs/integrations/opentelemetry.md's, as it stands.
        worker: dict[str, Any] = {"payments": payments, "charge_body": charge_body}
        exec(compile(DOCS.read_text().split("```python", 1)[1].split("\n", 1)[1].split("```")[0],
                     str(DOCS), "exec"), worker)
        charge = worker["charge"]

        agent = trace.get_tracer("the agent")
        with agent.start_as_current_span("invoke_agent checkout") as run:
            with pytest.raises(httpx.HTTPStatusError):  # committed, then answered 502
                charge(ORDER, 1200)
            again = charge(ORDER, 1200)  # the gate asks the sidecar, which probes the sandbox
        assert isinstance(again, Applied)

        deadline = time.monotonic() + 30
        while not receiver.names() >= SIDECAR_SPANS and time.monotonic() < deadline:
            time.sleep(0.05)
    trace_id = hex_id(run.get_span_context().trace_id, 32)
    # The worker's spans: the agent's and the reconciler's (the sandbox, serving in this
    # process too, is the provider: its web framework's spans are not the worker's).
    ours = [s for s in worker_spans.get_finished_spans() if s.instrumentation_scope
            and s.instrumentation_scope.name in ("the agent", tracing.TRACER)]
    theirs = receiver.spans
    assert receiver.names() >= SIDECAR_SPANS, receiver.names()
    # One trace: every span of the worker's run and every span the sidecar made for it.
    assert {hex_id(s.context.trace_id, 32) for s in ours if s.context} == {trace_id}
    assert {s.trace_id for s in theirs} == {trace_id}, [(s.name, s.trace_id) for s in theirs]
    # The tool span, as the GenAI conventions name a tool execution.
    tools = [s for s in ours if s.name == "execute_tool payment_intents.create"]
    assert len(tools) == 2
    assert {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "payment_intents.create",
            "gen_ai.tool.call.id": f"call-{ORDER}", "reconciler.operation_id": OPERATION
            }.items() <= dict(tools[0].attributes or {}).items()
    assert (tools[1].attributes or {})["reconciler.verdict"] == "verified_applied"
    # Each sidecar call is the child of the worker's client span that sent it.
    clients = {hex_id(s.context.span_id, 16): s.name for s in ours
               if s.context and s.kind is trace.SpanKind.CLIENT}
    for server in (s for s in theirs if s.name in clients.values()):
        assert clients.get(server.parent_id) == server.name, server
    probes = [s for s in theirs if s.name == "reconciler.probe_read"]
    assert any(p.attributes["reconciler.matches"] == 1 for p in probes), probes
    verdicts = [s.attributes["reconciler.verdict"] for s in theirs
                if s.name == "reconciler.verdict"]
    assert "verified_applied" in verdicts
    # Identities and verdicts only (the order is in the operation id the caller chose): no
    # other argument, body field or credential anywhere.
    values = repr([dict(s.attributes or {}) for s in ours] + [s.attributes for s in theirs])
    for secret in ("1200", "eur", "pm_card_visa", STRIPE_KEY, TOKEN):
        assert secret not in values, secret


def test_spans_keep_only_the_attributes_named_for_identities_and_verdicts() -> None:
    kept = tracing.attributes({"reconciler.verdict": "indeterminate", "amount": 1200,
                               "gen_ai.tool.call.arguments": '{"order": "A-17"}',
                               "reconciler.findings": ["probe_blind"],
                               "reconciler.status": {"nested": "body"}})
    assert kept == {"reconciler.verdict": "indeterminate",
                    "reconciler.findings": ["probe_blind"]}



@pytest.mark.parametrize("variables", [
    {}, {"OTEL_SERVICE_NAME": "reconciler-sidecar"},
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"},
    {"OTEL_TRACES_EXPORTER": "none"}])
def test_the_sidecar_exports_nothing_unless_a_variable_names_an_exporter(
        variables: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert tracing.configure_from_env() is False
