"""The reconciling MCP proxy: the upstream's tools, re-exported, each call an effect.

    client ── tools/call ──▶ proxy ── intent ── tools/call ──▶ upstream
                               │      attempt: result, timeout, dropped connection
                               └── a repeat of the same call: the gate first; answered from
                                   the record when applied, forwarded only on a grant

MCP cannot tell "never arrived" from "executed, answer lost" (SEP-3182), so an upstream
timeout or a dropped connection is ambiguous, and the operation is reconciled before the
client is told anything. A tool's class comes from its annotations (readOnlyHint: read_only,
passed through; idempotentHint: idempotent_write; else non_idempotent), overridable per tool.

The proxy sends each call's key to the upstream in `_meta`, but only the upstream decides
whether it goes on to the provider, and most upstreams (an SDK's MCP server) send none. So an
intent records the key only for the tools the configuration says send it (`keyed`; likewise
the operation id, sent as `_meta` to the `tagged` ones); any other call records none, as SPEC
section 3 asks, and is never sent twice: a null key gets no retry grant (SPEC section 4, rule
6), so a doubtful call is answered "not retried" and waits for a human.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import mcp.types as types
from mcp import Client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from reconciler.client.effects import Recorder
from reconciler.core.domain import Effect, Outcome, Verdict
from reconciler.core.outcomes import read_result
from reconciler.core.schemas import MatchIn
from reconciler.effect import current_call
from reconciler.integrations.tool_calls import ToolEffects, ToolOutcome

#: Where a caller names the run its calls belong to, in a request's `_meta`. Without it, the
#: proxy's own `scope` is the run (a stdio proxy serves one client): MCP requests need not
#: share a session, and a client's retry may come on a new connection.
RUN_META = "io.reconciler/run_id"
#: Where a forwarded call carries its intent's idempotency key, in the request's `_meta`: the
#: same key on the first send and on a granted retry, for an upstream that deduplicates by it.
#: SEP-3182 would put it in `params.idempotencyKey` behind a `tools.idempotency` capability;
#: the `mcp` package can neither send that field nor read that capability (both dropped by its
#: types), so `_meta`, which it passes through, is the only place (docs/integrations/mcp.md).
KEY_META = "io.reconciler/idempotency_key"
#: Where a call of a tool whose upstream tags the provider's object with the operation id (in
#: Stripe's `metadata[operation_id]`, say) gets that id: probes can then find it by the id.
OPERATION_META = "io.reconciler/operation_id"


class UpstreamToolError(Exception):
    """The upstream tool answered with `isError`: a response, and no claim of success."""

    #: As a gateway would say it: the upstream answered, with an error.
    status_code = 502

    def __init__(self, result: types.CallToolResult) -> None:
        super().__init__("the upstream tool answered with an error")
        self.result = result


def upstream_outcome(exc: BaseException) -> Outcome | None:
    """An upstream request that timed out, or a connection to it that closed, is ambiguous:
    the tool may have run."""
    if isinstance(exc, MCPError):
        if exc.error.code == types.REQUEST_TIMEOUT:
            return Outcome.TIMEOUT
        if exc.error.code == types.CONNECTION_CLOSED:
            return Outcome.CONNECTION_ERROR
    if isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream):
        return Outcome.CONNECTION_ERROR
    return None


def result_receipt(result: Any) -> MatchIn | None:
    """The provider's reference in a tool result: the `id` of its first text block read as
    JSON, else of its structured content."""
    if not isinstance(result, types.CallToolResult):
        return None
    text = next((c.text for c in result.content if isinstance(c, types.TextContent)), None)
    found = read_result(text).receipt if text else None
    if found is None and result.structured_content:
        return read_result(result.structured_content).receipt
    return found


def effect_of(tool: types.Tool) -> Effect:
    hints = tool.annotations
    if hints is not None and hints.read_only_hint:
        return Effect.READ_ONLY
    if hints is not None and hints.idempotent_hint:
        return Effect.IDEMPOTENT_WRITE
    return Effect.NON_IDEMPOTENT


@dataclass
class ProxySettings:
    """What the proxy needs besides its upstream: the provider the upstream's effects are at,
    per-tool overrides of the effect class and action name, and the upstream call timeout."""

    provider: str
    effects: Mapping[str, Effect] = field(default_factory=dict)
    actions: Mapping[str, str] = field(default_factory=dict)
    #: Per tool, the arguments that are references probes need (see ToolEffects.correlate).
    correlate: Mapping[str, Sequence[str]] = field(default_factory=dict)
    call_timeout_s: float = 30.0
    #: The run of calls that name none (default: one per proxy process).
    scope: str = field(default_factory=lambda: f"mcp-proxy-{uuid.uuid4().hex}")
    #: The retry gate's holder (see ToolEffects.holder): a proxy restarted under the same name.
    holder: str | None = None
    #: The tools whose upstream sends the key it gets in `_meta` on to the provider as the
    #: provider's idempotency key; the others' intents record no key.
    keyed: frozenset[str] = frozenset()
    #: The tools whose upstream attaches the operation id it gets in `_meta` where the
    #: provider keeps metadata; the others' intents say they carry no operation id.
    tagged: frozenset[str] = frozenset()
    #: The variables the upstream is started with (None: the proxy's but RECONCILER_*;
    #: serve.upstream_target).
    pass_env: Sequence[str] | None = None


def not_retried(tool: str, answer: ToolOutcome) -> ToolOutcome:
    """What a call of a tool that sends no key is told when it failed and the provider does
    not show it done, or when its repeat is refused: the gate never grants such a call a
    retry (its intent has no key), so it is never sent again, whatever the probes read."""
    verdict = answer.verdict.value if answer.verdict else "none"
    return ToolOutcome(tool, answer.operation_id, answer.verdict, (
        f"{tool}: not retried: the effect may have happened; a human decides. {tool} sends "
        "the provider no idempotency key, so a second send could repeat the effect, and the "
        f"proxy makes none (verdict {verdict}). Do not call {tool} again with these "
        "arguments and do not tell the user it failed."))


class ReconcilingProxy:
    """Serves `server()` in front of a connected upstream `Client`."""

    def __init__(self, upstream: Client, settings: ProxySettings,
                 backend: Recorder | None = None) -> None:
        self.upstream = upstream
        self.settings = settings
        self.backend = backend
        self.classes: dict[str, Effect] = {}

    def server(self) -> Server[Any]:
        return Server("reconciler-mcp-proxy", on_list_tools=self.list_tools,
                      on_call_tool=self.call_tool)

    def _effects(self) -> ToolEffects:
        return ToolEffects(self.settings.provider, backend=self.backend,
                           effects={**self.classes, **self.settings.effects},
                           actions=self.settings.actions, classify=upstream_outcome,
                           receipt=result_receipt, correlate=self.settings.correlate,
                           passthrough=(UpstreamToolError,), holder=self.settings.holder,
                           keyed=self.settings.keyed, tagged=self.settings.tagged)

    def scope(self, params: types.CallToolRequestParams) -> str:
        meta: Mapping[str, Any] = params.meta or {}
        given = meta.get(RUN_META)
        return given if isinstance(given, str) and given else self.settings.scope

    async def list_tools(self, ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        listed = await self.upstream.list_tools(cursor=params.cursor if params else None)
        self.classes.update({tool.name: effect_of(tool) for tool in listed.tools})
        # A gated tool may answer with what happened instead of its result, which no output
        # schema of the upstream's describes: its schema is not re-exported.
        return listed.model_copy(update={"tools": [
            tool if self._effects().effect_of(tool.name) is Effect.READ_ONLY
            else tool.model_copy(update={"output_schema": None}) for tool in listed.tools]})

    async def call_tool(self, ctx: ServerRequestContext[Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in self.classes:  # a client that calls without listing first
            await self.list_tools(ctx, None)
        arguments = dict(params.arguments or {})
        sent = False

        async def forward() -> types.CallToolResult:
            nonlocal sent
            sent = True
            call = current_call()
            meta: dict[str, str] = {}
            if call is not None and call.intent.idempotency_key:
                meta[KEY_META] = call.intent.idempotency_key
            if call is not None and params.name in self.settings.tagged:
                meta[OPERATION_META] = call.operation_id
            result = await self.upstream.call_tool(
                params.name, arguments, read_timeout_seconds=self.settings.call_timeout_s,
                meta=cast(types.RequestParamsMeta, meta) if meta else None)
            if result.is_error:
                raise UpstreamToolError(result)
            return result

        try:
            answer = await self._effects().arun(self.scope(params), params.name,
                                                arguments, forward)
        except UpstreamToolError as failed:
            return failed.result
        if isinstance(answer, ToolOutcome):
            # Told "you may call again" (it will be refused) or refused without a send.
            if params.name not in self.settings.keyed and answer.verdict is not \
                    Verdict.VERIFIED_APPLIED and (not answer.final or not sent):
                answer = not_retried(params.name, answer)
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=answer.message)],
                is_error=answer.final)
        return answer
