"""The `mcp_read` probe: read the provider through one of its MCP server's read-only tools.

For a `send_message` tool, `list_messages` with an argument template, and a rule for which
items are the operation's effects, so a provider that ships an MCP server needs no HTTP recipe:

    [[providers.chat.probes]]
    use = "mcp_read"
    command = "chat-mcp-server"            # stdio; or url = "http://127.0.0.1:9000/mcp"
    pass_env = ["CHAT_TOKEN"]              # its variables (default: all but RECONCILER_*)
    tool = "list_messages"
    arguments = { channel = "{correlation[channel]}" }
    items = "messages"                     # where the list is in the tool's JSON answer
    ref = "ts"
    where = { "metadata.operation_id" = "{operation_id}" }
    authority = "lagging"

The tool's first text block is read as JSON, else its structured content. Any failure (the
server unreachable, a tool error, an answer without the list) is an `unavailable` observation,
and a list as long as `page_size` may continue on a next page: a cut read proves no zero
(SPEC section 3), so with nothing matched it is `unavailable`; its matches keep their authority.

A server started by `command` gets the environment the probe was given (the sidecar's) but
the reconciler's own variables (`RECONCILER_*`: its store's URL and key, its tokens), or
exactly the variables `pass_env` names, read at each call so a rotated token is used from
the next one on. The `mcp` package alone would give it almost nothing:
`StdioServerParameters(env=None)` starts the server with `get_default_environment()` only (mcp
2.3.0, mcp/client/stdio.py: HOME, LOGNAME, PATH, SHELL, TERM and USER on POSIX), and merges a
given `env` over that set; a server that reads its token from the environment then dies with
KeyError before answering, and its client sees "Connection closed".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from probes.base import ProbeResult, ProbeTarget, utc_now
from probes.credentials import MissingCredential
from probes.matching import Extraction, FieldCheck, UnusableResponse
from probes.options import Options
from probes.templates import MissingValue, Template
from reconciler.core.domain import Authority, Observation
from reconciler.core.sight import Sight

#: Opens a client to the MCP server (an `mcp.Client`, not yet entered).
Connect = Callable[[], Any]
#: The reconciler's own variables (a store URL with its password, the sealing key, API tokens):
#: no upstream needs them, so only a `pass_env` that names one passes it.
OWN_ENV = "RECONCILER_"
_AUTHORITIES = {"authoritative": Authority.AUTHORITATIVE, "lagging": Authority.LAGGING}


@dataclass
class McpReadProbe:
    """Reads matches through `tool` of the MCP server `connect` opens."""

    name: str
    connect: Connect
    tool: str
    arguments: Mapping[str, Template | str | int | float | bool]
    extraction: Extraction
    authority: Authority = Authority.LAGGING
    timeout_s: float = 10.0
    #: The longest list the tool answers in one call: a list that long may be cut.
    page_size: int | None = None
    #: What it covers and finds effects by: set by the registry (probes/sight.py).
    sight: Sight = field(default_factory=Sight)

    def probe(self, target: ProbeTarget) -> ProbeResult:
        try:
            arguments = {k: v.render(target) if isinstance(v, Template) else v
                         for k, v in self.arguments.items()}
            body = anyio.run(self._read, arguments)
            found = self.extraction.found(body, target)
            cut = self.page_size is not None and len(
                self.extraction.items(body)) >= self.page_size
        except (MissingValue, UnusableResponse, MissingCredential) as exc:
            return self._unavailable(target, str(exc))
        except Exception as exc:  # the server's trouble is evidence of nothing
            return self._unavailable(target, f"{type(exc).__name__} calling {self.tool}")
        if not found.matches and (cut or found.undecided):
            return self._unavailable(target, f"{self.tool} answered a list that may continue "
                                     "past this page, or undecided items: no zero")
        return Observation(target.operation_id, utc_now(), self.name, self.authority,
                           found.matches)

    def _unavailable(self, target: ProbeTarget, why: str) -> Observation:
        return Observation(target.operation_id, utc_now(), self.name, Authority.UNAVAILABLE,
                           error=why[:500])

    async def _read(self, arguments: dict[str, Any]) -> Any:
        with anyio.fail_after(self.timeout_s):
            async with self.connect() as client:
                result = await client.call_tool(self.tool, arguments)
        if result.is_error:
            raise UnusableResponse(f"{self.tool} answered with an error")
        # The text is the tool's answer as it wrote it; the SDK's structured content may wrap
        # a plain return value ({"result": "..."}), so it comes second.
        text = next((c.text for c in result.content if getattr(c, "type", "") == "text"), None)
        if text is not None:
            try:
                return json.loads(text)
            except ValueError:
                pass
        if result.structured_content is not None:
            return result.structured_content
        raise UnusableResponse(f"{self.tool} answered no JSON")


def passed_environment(env: Mapping[str, str], names: Sequence[str] | None) -> dict[str, str]:
    """The variables a stdio MCP server is started with: `env` but the reconciler's own, or
    those `names` names (raises MissingCredential naming the unset ones). The `mcp` package
    adds its default set (PATH, HOME, ...) to either, which is how it finds the command."""
    if names is None:
        return {name: value for name, value in env.items() if not name.startswith(OWN_ENV)}
    missing = [name for name in names if name not in env]
    if missing:
        raise MissingCredential(f"not set, for the MCP server: {', '.join(missing)}")
    return {name: env[name] for name in names}


def _connector(options: Options, env: Mapping[str, str]) -> Connect:
    try:
        from mcp import Client, StdioServerParameters  # the `mcp` extra, needed only here
    except ImportError:
        raise options.error("the mcp_read probe needs the MCP client, an optional extra: "
                            "pip install 'effect-reconciler[mcp]'") from None

    url = options.string("url")
    command = options.string("command")
    args = options.list_of_strings("args")
    names = options.list_of_strings("pass_env") if options.has("pass_env") else None
    if (url is None) == (command is None):
        raise options.error("give the MCP server as `url` or as `command` (and `args`)")
    if url is not None:
        return lambda: Client(url)
    return lambda: Client(StdioServerParameters(command=command or "", args=args,
                                                env=passed_environment(env, names)))


def mcp_read(name: str, options: Mapping[str, Any], env: Mapping[str, str], *,
             connect: Connect | None = None) -> McpReadProbe:
    """The `mcp_read` factory; `connect` is for tests and embedding (an in-process server)."""
    where = f"probe {name!r}"
    read = Options(options, where)
    connector = connect or _connector(read, env)
    arguments = {k: Template.parse(v, where) if isinstance(v, str) else v
                 for k, v in read.table("arguments", scalars=True).items()}
    authority = read.string("authority", "lagging") or "lagging"
    if authority not in _AUTHORITIES:
        raise read.error("option 'authority' must be 'authoritative' or 'lagging'")
    extraction = Extraction(
        path=read.string("items", "") or "", single=False, ref=read.required_string("ref"),
        where=FieldCheck.table(read.table("where", scalars=True), where))
    probe = McpReadProbe(name, connector, read.required_string("tool"), arguments, extraction,
                         _AUTHORITIES[authority], read.number("timeout_s", 10.0),
                         read.integer("page_size", 0, minimum=0) or None)
    read.finish()
    return probe
