"""`reconciler check-config`: is a configuration file one the service would run as meant?

It builds every provider and probe through `probes.config.parse_config` (the parser the service
uses), one provider and one probe at a time so that every mistake is reported, not only the first,
each with the file and the line of its table; an `[mcp_proxy]` table's options and its tools'
tables are read as `reconciler mcp-proxy` reads them (reconciler/mcpproxy/options.py), every mistake
reported too. A provider without probes is a warning: its operations are decided only from evidence
posted to the service, and escalate at their deadline. Then whether the probes can see the actions
the workers perform (SPEC section 3, `reconciler/cli/configsight.py`): those of the agent `[service]
agent` names, of an `[mcp_proxy]` table, and, given a store, every action recorded in it.
`live_check` then runs each probe of one recorded operation's provider once, and records nothing.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from probes.base import Probe, ProbeResult, ProbeTarget
from probes.config import ProviderSetup, parse_config
from probes.errors import ProbeConfigError
from probes.http_json import HttpJsonProbe
from probes.runner import ref_returned, seen
from reconciler.cli.configsight import (
    SeenAction,
    agent_actions,
    proxy_actions,
    recorded_actions,
    sight_problems,
    sightless,
)
from reconciler.core.domain import Receipt
from reconciler.core.errors import ReconcilerError, StoreUrlError
from reconciler.core.ports import Store
from reconciler.mcpproxy.options import read_proxy_table, read_proxy_tool
from reconciler.service.settings import SettingsError, load_settings
from reconciler.store.schema import make_engine
from reconciler.store.sql import SqlStore

#: Exit codes: 0 valid (warnings allowed), 1 errors found, 2 the check could not run.
EXIT_OK, EXIT_ERRORS, EXIT_CANNOT_CHECK = 0, 1, 2

KNOWN_TABLES = frozenset({"service", "providers", "mcp_proxy"})


class CannotCheckError(ReconcilerError):
    """The check could not run (file unreadable, store or operation missing); nothing was
    judged."""


@dataclass(frozen=True, slots=True)
class Problem:
    level: Literal["error", "warning"]
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.level}: {self.message}"


@dataclass
class ConfigReport:
    path: Path
    providers: dict[str, ProviderSetup] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(p.level == "error" for p in self.problems)

    @property
    def warnings(self) -> int:
        return sum(p.level == "warning" for p in self.problems)

    def summary(self) -> str:
        probes = sum(len(s.probes) for s in self.providers.values())
        return (f"{self.path}: {len(self.providers)} provider(s), {probes} probe(s) built; "
                f"{self.errors} error(s), {self.warnings} warning(s)")


class _Lines:
    """Where the tables of `[providers.<name>]` and its `[[...probes]]` start in the text."""

    _HEADER = re.compile(r'^\s*\[(\[)?\s*providers\s*\.\s*("[^"]*"|[A-Za-z0-9_-]+)'
                         r'\s*(\.\s*probes\s*)?\]')
    _PROXY = re.compile(r'^\s*\[\s*mcp_proxy\s*'
                        r'(?:\.\s*tools\s*\.\s*("[^"]*"|[A-Za-z0-9_-]+)\s*)?\]')

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.tables: dict[tuple[str, int | None], int] = {}
        self.service: int | None = None
        #: `[mcp_proxy]` (None) and its `[mcp_proxy.tools.NAME]` tables.
        self.proxy: dict[str | None, int] = {}
        counts: dict[str, int] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            if re.match(r"^\s*\[\s*service\s*\]", line):
                self.service = number
            if proxy := self._PROXY.match(line):
                self.proxy.setdefault(proxy[1].strip('"') if proxy[1] else None, number)
            found = self._HEADER.match(line)
            if not found:
                continue
            name = found[2].strip('"')
            if found[1] and found[3]:
                index = counts.get(name, 0)
                counts[name] = index + 1
                self.tables.setdefault((name, index), number)
            elif not found[1]:
                self.tables.setdefault((name, None), number)

    def at(self, line: int | None) -> str:
        return f"{self.path}:{line}" if line else str(self.path)

    def of(self, provider: str, probe: int | None = None) -> str:
        line = self.tables.get((provider, probe))
        return self.at(line or self.tables.get((provider, None)))


def check_config(path: Path, env: Mapping[str, str] | None = None,
                 store: SqlStore | None = None) -> ConfigReport:
    """Every problem of the configuration at `path`, the actions recorded in `store` checked
    against its probes too; CannotCheckError if it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CannotCheckError(f"{path}: cannot read: {exc}") from None
    report = ConfigReport(path)
    lines = _Lines(path, text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        report.problems.append(Problem("error", _toml_where(path, exc), f"not valid TOML: {exc}"))
        return report
    for key in sorted(set(data) - KNOWN_TABLES):
        report.problems.append(Problem("error", str(path), f"unknown top-level key {key!r}; "
                                       "the file holds [service] and [providers.*]"))
    agent: str | None = None
    if "service" in data:
        try:
            agent = load_settings({"config": path}, env).agent
        except SettingsError as exc:
            report.problems.append(Problem("error", lines.at(lines.service),
                                           str(exc).removeprefix(f"{path}: ")))
    providers = data.get("providers", {})
    if not isinstance(providers, dict):
        report.problems.append(Problem("error", str(path), "'providers' must hold tables "
                                       "([providers.<name>])"))
        return report
    if not providers:
        report.problems.append(Problem("warning", str(path), "no [providers.*] table: no "
                                       "operation has probes or a contract"))
    for name, table in providers.items():
        _check_provider(report, lines, name, table, env)
    _check_sight(report, lines, _actions(report, lines, data, agent, env, store),
                 broken=set(providers) - set(report.providers))
    return report


def _actions(report: ConfigReport, lines: _Lines, data: Mapping[str, Any], agent: str | None,
             env: Mapping[str, str] | None, store: SqlStore | None) -> list[SeenAction]:
    """The actions the workers perform, as far as this check can see them."""
    actions: list[SeenAction] = []
    if agent is not None:
        try:
            actions += agent_actions(agent, os.environ if env is None else env)
        except Exception as exc:  # the user's module: any failure is a failure to list it
            report.problems.append(Problem("warning", lines.at(lines.service), (
                f"cannot list the agent's tools ({type(exc).__name__}: {exc}): its actions "
                "are not checked against the probes")))
    proxy = data.get("mcp_proxy")
    if proxy is not None:
        _check_proxy(report, lines, proxy)
    if isinstance(proxy, Mapping):
        actions += proxy_actions(proxy)
    if store is not None:
        try:
            actions += recorded_actions(store)
        except SQLAlchemyError as exc:
            raise CannotCheckError(f"cannot read the store's actions: {exc}") from None
    return actions


def _check_sight(report: ConfigReport, lines: _Lines, actions: list[SeenAction],
                 broken: set[str]) -> None:
    """SPEC section 3 on the providers that built: probes that see nothing, actions no probe
    sees (a provider with errors is left out: its mistakes are listed already)."""
    found = sightless(report.providers) + sight_problems(
        report.providers, [a for a in actions if a.provider not in broken])
    for problem in found:
        where = lines.of(problem.provider, problem.probe) \
            if problem.provider in report.providers else str(report.path)
        report.problems.append(Problem(problem.level, where, problem.message))


#: The option an error is about (probes.options: "option 'url' must be a string").
_OPTION = re.compile(r"option '([^']+)'")


def _every_error(name: str, piece: dict[str, Any], env: Mapping[str, str] | None,
                 source: str) -> list[str]:
    """Every error of one piece of a provider's table (the contract, or one probe)."""
    entries = piece.get("probes")
    if entries is not None and not isinstance(entries[0], Mapping):
        entries, table = None, piece  # not a table: nothing to set aside, one error
    else:
        table = dict(entries[0]) if entries else dict(piece)
    return _errors_of(table, lambda options: parse_config(
        {"providers": {name: {"probes": [options]} if entries else options}}, env,
        source=source))


def _errors_of(table: dict[str, Any], build: Callable[[dict[str, Any]], object]) -> list[str]:
    """Every error `build` raises for `table`, not only the first: the option an error names
    is set aside and the table built again, until it builds, an error names no option of it,
    or names one set aside (a required option it now lacks: not a mistake of its own).
    Bounded by the table's options."""
    errors: list[str] = []
    for _ in range(len(table) + 1):
        try:
            build(table)
            break
        except ProbeConfigError as exc:
            message = str(exc)
        named = _OPTION.search(message)
        if named is not None and named.group(1) not in table and errors:
            break  # a follow-on of an option set aside
        errors.append(message)
        if named is None or named.group(1) not in table:
            break
        del table[named.group(1)]
    return errors


def _check_proxy(report: ConfigReport, lines: _Lines, table: Any) -> None:
    """Every mistake of the `[mcp_proxy]` table and of each of its tools' tables, as
    `reconciler mcp-proxy` would refuse them (reconciler/mcpproxy/options.py)."""
    if not isinstance(table, dict):
        report.problems.append(Problem("error", str(report.path), "'mcp_proxy' must be a "
                                       "table ([mcp_proxy])"))
        return
    tools = table.get("tools", {})
    pieces: list[tuple[str | None, dict[str, Any], Callable[[dict[str, Any]], object]]] = []
    if isinstance(tools, dict) and all(isinstance(t, dict) for t in tools.values()):
        # Each tool alone and the table without them: one mistake does not hide the next.
        pieces = [(tool, dict(spec), partial(read_proxy_tool, tool))
                  for tool, spec in tools.items()]
        table = {k: v for k, v in table.items() if k != "tools"}
    pieces.insert(0, (None, dict(table), read_proxy_table))
    for tool, piece, build in pieces:
        for error in _errors_of(piece, build):
            report.problems.append(Problem("error", lines.at(lines.proxy.get(tool)), error))


def _check_provider(report: ConfigReport, lines: _Lines, name: str, table: Any,
                    env: Mapping[str, str] | None) -> None:
    source = str(report.path)
    if not isinstance(table, dict):
        report.problems.append(Problem("error", lines.of(name), f"providers.{name} must be a "
                                       "table"))
        return
    entries = table.get("probes", [])
    parts_ok = True
    # The contract alone, then each probe alone: one mistake does not hide the next.
    pieces: list[tuple[int | None, dict[str, Any]]] = [
        (None, {k: v for k, v in table.items() if k != "probes"})]
    if isinstance(entries, list):
        pieces += [(i, {"probes": [entry]}) for i, entry in enumerate(entries)]
    for index, piece in pieces:
        for error in _every_error(name, piece, env, source):
            parts_ok = False
            message = error.removeprefix(f"{source}: ")
            if index is not None:
                message = message.replace(f"providers.{name}.probes[0]",
                                          f"providers.{name}.probes[{index}]", 1)
            report.problems.append(Problem("error", lines.of(name, index), message))
    if not parts_ok:
        return
    try:
        setup = parse_config({"providers": {name: table}}, env, source=source)[name]
    except ProbeConfigError as exc:
        report.problems.append(Problem("error", lines.of(name),
                                       str(exc).removeprefix(f"{source}: ")))
        return
    report.providers[name] = setup
    for index, probe in enumerate(setup.probes):
        for variable in _unset_credentials(probe):
            report.problems.append(Problem(
                "warning", lines.of(name, index), f"providers.{name}.probes[{index}] "
                f"({probe.name}): {variable} is not set here: the probe sends no request and "
                "reads `unavailable` (no credentials), so it proves neither an effect nor its "
                "absence, and the provider's doubtful operations go to a human"))
    if not setup.probes:
        report.problems.append(Problem(
            "warning", lines.of(name), f"provider {name!r} has no probe: its operations are "
            "decided only from posted evidence and escalate at their deadline"))


def _unset_credentials(probe: Probe) -> tuple[str, ...]:
    """The credential variables a probe reads (a token and, for HTTP Basic, the user: Twilio's
    Account SID) that are unset; a recipe's come from its preset, not the file's table."""
    if isinstance(probe, HttpJsonProbe) and probe.spec.credential is not None:
        return probe.spec.credential.unset()
    return ()


def _toml_where(path: Path, exc: tomllib.TOMLDecodeError) -> str:
    line = getattr(exc, "lineno", None)
    if line is None:
        found = re.search(r"at line (\d+)", str(exc))
        line = int(found[1]) if found else None
    return f"{path}:{line}" if line else str(path)


@dataclass(frozen=True, slots=True)
class ProbeReading:
    """What one probe read for the operation, as it would be recorded (but is not)."""

    probe: str
    authority: str
    refs: tuple[str, ...]
    hashes: tuple[str | None, ...]
    error: str | None


def open_for_reading(url: str) -> SqlStore:
    """The store at `url` as it is: not migrated, and a SQLite file is never created."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise CannotCheckError(f"--db is not a database URL: {exc}") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:") \
            and not Path(parsed.database).is_file():
        raise CannotCheckError(f"no store at {parsed.database}")
    try:
        return SqlStore(make_engine(url))
    except StoreUrlError as exc:
        raise CannotCheckError(f"--db: {exc}") from None


def live_check(report: ConfigReport, store: Store, operation_id: str) -> list[ProbeReading]:
    """Run each probe of the operation's provider once against its recorded intent. Nothing is
    recorded. CannotCheckError if the operation is unknown or its provider is not configured."""
    try:
        facts = store.facts(operation_id)
    except (ReconcilerError, SQLAlchemyError) as exc:
        raise CannotCheckError(f"cannot read operation {operation_id!r}: {exc}") from None
    intent = facts.intent
    setup = report.providers.get(intent.provider)
    if setup is None:
        raise CannotCheckError(
            f"operation {operation_id!r} belongs to provider {intent.provider!r}, which "
            f"{report.path} does not configure (or configures with errors)")
    target = ProbeTarget.of(intent)
    readings: list[ProbeReading] = []
    for probe in setup.probes:
        try:
            result = probe.probe(target)
        except Exception as exc:  # a probe must not raise; show it rather than stop the check
            readings.append(ProbeReading(probe.name, "raised", (), (),
                                         f"{type(exc).__name__}: {exc}"))
            continue
        # As the sweep would record it: an empty read by a probe blind to it proves nothing.
        readings.append(_reading(probe.name, seen(probe, intent, result,
                                                  lambda: ref_returned(facts))))
    return readings


def _reading(name: str, result: ProbeResult) -> ProbeReading:
    if isinstance(result, Receipt):
        return ProbeReading(name, "receipt", (result.provider_ref,), (result.request_hash,),
                            None)
    return ProbeReading(name, result.authority.value,
                        tuple(m.provider_ref for m in result.matches),
                        tuple(m.request_hash for m in result.matches), result.error)
