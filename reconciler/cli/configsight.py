"""`check-config`'s question of SPEC section 3: can the configured probes see the actions the
workers perform? A zero counts only where the probe could have seen the effect, so an action no
probe covers never gets one (its doubtful operations go to a human), and a probe that finds
effects by something the request did not carry reads a blind zero.

The actions it can see: the tools of the agent `[service] agent` names (the runtime's), the
tools of an `[mcp_proxy]` table (the proxy's configuration, with its `[providers.*]`), and, given
a store, every action recorded there (what `@effect`, the adapters and the client have sent).
For each:

    no probe of its provider covers it           error (side-effecting), else warning
    a probe covers it, finds effects by nothing
      the action's requests carry                 error; a warning for a probe that reads by a
                                                  returned reference only (it sees requests
                                                  that were answered)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Table, select
from sqlalchemy.exc import SQLAlchemyError

from probes.base import sight_of
from probes.config import ProviderSetup
from reconciler.core.domain import Carried, Effect
from reconciler.store.sql import SqlStore
from reconciler.store.tables import IntentRow

Level = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class SeenAction:
    """An action a worker performs at a provider, and what its requests carry."""

    provider: str
    action: str
    #: None: not configured (an MCP tool the proxy classifies by its annotations).
    effect: Effect | None
    carried: frozenset[Carried]
    #: Where check-config saw it, for the message.
    source: str

    @property
    def side_effecting(self) -> bool:
        return self.effect is not Effect.READ_ONLY


@dataclass(frozen=True, slots=True)
class SightProblem:
    level: Level
    provider: str
    #: The probe's index in its provider's list; None: the provider's table.
    probe: int | None
    message: str


def agent_actions(spec: str, env: Mapping[str, str]) -> list[SeenAction]:
    """The side-effecting tools of the agent `spec` names (raises AgentLoadError), each with
    what its intents say the request carries (`Tool.carries`: the key when the tool sends it,
    the operation id when it is `tagged`)."""
    from reconciler.runtime.agent import load_agent  # imports the user's module: only here

    agent = load_agent(spec, env)
    return [SeenAction(tool.provider, tool.action or tool.name, tool.effect, tool.carries,
                       f"agent tool {tool.name!r}")
            for tool in agent.tools
            if tool.effect is not Effect.READ_ONLY and tool.provider is not None]


def proxy_actions(table: Mapping[str, Any]) -> list[SeenAction]:
    """The tools of an `[mcp_proxy]` table: its `provider`, each tool's `action` (default: the
    tool's name) and `effect`; a tool whose upstream sends the key on (`sends_key`) carries it,
    one whose upstream attaches the operation id (`sends_operation_id`) carries that."""
    provider, tools = table.get("provider"), table.get("tools", {})
    if not isinstance(provider, str) or not isinstance(tools, Mapping):
        return []
    seen = []
    for name, spec in tools.items():
        if not isinstance(spec, Mapping):
            continue
        effect = spec.get("effect")
        try:
            known = Effect(effect) if effect is not None else None
        except ValueError:
            continue  # the proxy itself refuses it, with its own message
        carried = {c for c, flag in ((Carried.IDEMPOTENCY_KEY, "sends_key"),
                                     (Carried.OPERATION_ID, "sends_operation_id"))
                   if spec.get(flag) is True}
        seen.append(SeenAction(provider, str(spec.get("action", name)), known,
                               frozenset(carried), f"[mcp_proxy.tools.{name}]"))
    return seen


def recorded_actions(store: SqlStore) -> list[SeenAction]:
    """Every (provider, action, effect, what was carried) recorded in the store's intents. A
    store from before intents said what they carried reads as SPEC section 3 reads a worker
    that did not say: its recorded key alone."""
    table: Table = IntentRow.__table__  # type: ignore[attr-defined]
    carries = table.c.get("carries")  # a store from before intents said what they carried
    columns = [table.c.provider, table.c.action, table.c.effect,
               table.c.idempotency_key.is_not(None)]
    rows: Sequence[Any] | None = None
    if carries is not None:
        try:
            with store.engine.connect() as connection:
                rows = connection.execute(select(*columns, carries).distinct()).all()
        except SQLAlchemyError:  # the column not migrated into this store yet
            rows = None
    if rows is None:
        with store.engine.connect() as connection:
            rows = [(*row, None) for row in connection.execute(select(*columns).distinct())]
    seen: dict[tuple[Any, ...], SeenAction] = {}
    for provider, action, effect, has_key, said in rows:
        carried = frozenset(Carried(v) for v in said.split(",") if v) if said is not None \
            else frozenset({Carried.IDEMPOTENCY_KEY}) if has_key else frozenset()
        seen.setdefault((provider, action, effect, carried), SeenAction(
            provider, action, Effect(effect), carried, "recorded in the store"))
    return list(seen.values())


def sight_problems(providers: Mapping[str, ProviderSetup],
                   actions: Iterable[SeenAction]) -> list[SightProblem]:
    """What SPEC section 3 finds wrong with `providers`' probes for `actions` (each distinct
    provider, action and carried set once)."""
    problems: list[SightProblem] = []
    for seen in actions:
        setup = providers.get(seen.provider)
        covering = [(index, probe) for index, probe in enumerate(setup.probes if setup else ())
                    if sight_of(probe).covers_action(seen.action)]
        what = (f"action {seen.action!r} of provider {seen.provider!r} "
                f"({seen.effect.value if seen.effect else 'effect not configured'}, "
                f"{seen.source})")
        if not covering:
            problems.append(SightProblem(
                "error" if seen.side_effecting else "warning", seen.provider, None,
                f"{what} is covered by no probe: no read proves it was not applied, so a "
                "lost answer is never retried and goes to a human; name it in the `actions` "
                "of a probe that reads where its effects appear"))
            continue
        carried = ", ".join(sorted(seen.carried)) or "nothing"
        for index, probe in covering:
            finds_by = sight_of(probe).finds_by
            if finds_by & seen.carried:
                continue
            by = ", ".join(sorted(finds_by)) or "nothing a request can carry"
            ref_only = finds_by == {Carried.PROVIDER_REF}
            problems.append(SightProblem(
                "warning" if ref_only or not seen.side_effecting else "error", seen.provider,
                index, f"probe {probe.name!r} covers {what} but finds effects by {by}, and its "
                f"requests carry {carried}: " + (
                    "it sees only requests the provider answered" if ref_only else
                    "its empty reads prove nothing (attach the operation id where the "
                    "provider keeps metadata, or send the key, and say so in `carries`)")))
    return problems


def sightless(providers: Mapping[str, ProviderSetup]) -> list[SightProblem]:
    """Probes that can prove no zero whatever the workers do: they cover no action, or find
    effects by nothing a request can carry."""
    problems = []
    for provider, setup in providers.items():
        for index, probe in enumerate(setup.probes):
            sight = sight_of(probe)
            if not sight.covers:
                problems.append(SightProblem(
                    "warning", provider, index, f"probe {probe.name!r} names no `actions`: it "
                    "covers none, and its empty reads prove nothing (SPEC section 3)"))
            elif not sight.finds_by:
                problems.append(SightProblem(
                    "warning", provider, index, f"probe {probe.name!r} finds effects by nothing "
                    "a request can carry (no {operation_id} or {idempotency_key} it reads by "
                    "alone, no read by a returned reference): its empty reads prove nothing"))
    return problems
