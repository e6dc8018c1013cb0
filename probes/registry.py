"""Probes by name: the built-ins, and third-party factories found through entry points.

A package adds a probe by declaring, in its pyproject.toml,

    [project.entry-points."reconciler.probes"]
    "acme.ledger" = "acme_probe:make_probe"

where `make_probe` is a `ProbeFactory`. Discovery only reads package metadata; a plugin's code is
imported when a probe of that name is built, so a broken plugin breaks only its own probes.

Every probe built here gets its `Sight` (SPEC section 3): it covers the actions the
configuration names for it (none named: none), and finds effects by what its reads are derived
to find them by (`probes/sight.py`) or, for a plugin, by what its own `sight.finds_by` declares.
A plugin probe that declares no `sight` finds effects by nothing: its empty reads never count
as a zero (a warning says so, once per probe name).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from probes import sight as derived
from probes.base import Probe, ProbeFactory
from probes.credentials import reject_inline_secrets
from probes.errors import ProbeConfigError, UnknownProbeError
from probes.http_json import http_json
from probes.mcp_read import mcp_read
from probes.recipes import RECIPES, RENAMED, recipe_factory
from reconciler.core.sight import Sight

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "reconciler.probes"

#: The probe names already warned about for declaring no sight.
_SIGHTLESS: set[str] = set()


class ProbeRegistry:
    """Factories by name; `build` turns a name and its options into a probe."""

    def __init__(self) -> None:
        self._factories: dict[str, ProbeFactory] = {}
        self._plugins: dict[str, list[EntryPoint]] = {}

    def register(self, name: str, factory: ProbeFactory) -> None:
        if name in self._factories:
            raise ProbeConfigError(f"a probe named {name!r} is already registered")
        self._factories[name] = factory

    def discover(self, group: str = ENTRY_POINT_GROUP) -> None:
        """Note the entry points installed now in `group` (read again on every call)."""
        self._plugins = {}
        for point in entry_points(group=group):
            if point.name in self._factories:
                # Registered names win: an installed package must not swap a built-in silently.
                log.warning("ignoring plugin probe %r (%s): the name is taken", point.name,
                            point.value)
                continue
            self._plugins.setdefault(point.name, []).append(point)

    def names(self) -> list[str]:
        return sorted({*self._factories, *self._plugins})

    def factory(self, use: str) -> ProbeFactory:
        if use in self._factories:
            return self._factories[use]
        points = self._plugins.get(use)
        if not points and use in RENAMED:
            raise UnknownProbeError(
                f"probe {use!r} was renamed: use {RENAMED[use]}; the *_like recipes read the "
                "old sandbox's shapes, the new ones speak the provider's real API "
                "(docs/probes.md)")
        if not points:
            raise UnknownProbeError(
                f"no probe named {use!r}; known probes: {', '.join(self.names())}")
        if len(points) > 1:
            sources = ", ".join(p.dist.name if p.dist else p.value for p in points)
            raise ProbeConfigError(
                f"probe {use!r} is provided by several packages ({sources}); keep one")
        try:
            loaded = points[0].load()
        except Exception as exc:
            raise ProbeConfigError(
                f"probe {use!r}: cannot load {points[0].value}: {type(exc).__name__}: {exc}"
            ) from exc
        if not callable(loaded):
            raise ProbeConfigError(f"probe {use!r}: {points[0].value} is not a factory")
        factory: ProbeFactory = loaded
        return factory

    def build(self, use: str, options: Mapping[str, Any], env: Mapping[str, str],
              name: str | None = None, actions: Iterable[str] | None = None) -> Probe:
        """The probe `use` configured by `options`, named `name` (by default `use`), covering
        `actions` (None: the actions the probe itself declares, if any)."""
        name = name or use
        reject_inline_secrets(options, f"probe {name!r}")
        factory = self.factory(use)
        try:
            probe = factory(name, options, env)
        except ProbeConfigError:
            raise
        except Exception as exc:
            raise ProbeConfigError(
                f"probe {name!r} ({use}): the factory failed: {type(exc).__name__}: {exc}"
            ) from exc
        # What makes a Probe but its sight, which is given to it here.
        if not callable(getattr(probe, "probe", None)) or getattr(probe, "name", None) != name:
            raise ProbeConfigError(
                f"probe {name!r} ({use}): the factory must return a Probe named {name!r}")
        _see(probe, use, name, actions)
        return probe


def _see(probe: Probe, use: str, name: str, actions: Iterable[str] | None) -> None:
    """Give the built probe its sight: `actions`, and what it finds effects by."""
    declared = getattr(probe, "sight", None)
    declared = declared if isinstance(declared, Sight) else None
    needed = derived.needs(probe)
    if needed is not None:
        finds_by = derived.finds_by(needed)
    elif declared is not None:
        finds_by = declared.finds_by
    else:
        finds_by = frozenset()
        if use not in _SIGHTLESS:
            _SIGHTLESS.add(use)
            log.warning("probe %r declares no sight (what it finds effects by): none of its "
                        "empty reads counts as a zero (docs/probes.md, \"What a probe sees\")",
                        use)
    covers = frozenset(actions) if actions is not None else (
        declared.covers if declared is not None else frozenset())
    try:
        probe.sight = Sight(covers, finds_by)
    except (AttributeError, TypeError) as exc:
        raise ProbeConfigError(f"probe {name!r} ({use}): cannot set its sight "
                               f"({type(exc).__name__}); give it a writable `sight`") from exc


def default_registry() -> ProbeRegistry:
    """The built-in probes plus every plugin installed now."""
    registry = ProbeRegistry()
    registry.register("http_json", http_json)
    registry.register("mcp_read", mcp_read)
    for recipe in RECIPES:
        registry.register(recipe, recipe_factory(recipe))
    registry.discover()
    return registry
