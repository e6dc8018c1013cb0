"""An agent: what the sidecar needs to run runs (a model and its tools), and loading one by name.

    reconciler serve --agent mypackage.agents:support     # an Agent, or a function making one

The name is looked up like uvicorn's `module:app`: the current directory first, then the
installed packages. RECONCILER_MODEL, when set, replaces the agent's model (`model_choice`).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from reconciler.core.errors import AgentLoadError
from reconciler.runtime.guards import RunConfig
from reconciler.runtime.model_choice import model_from_environment
from reconciler.runtime.models import Model
from reconciler.runtime.tools import Tool, by_name


@dataclass(frozen=True)
class Agent:
    """A model, the tools it may call, and the run configuration every run starts from (a run's
    own configuration overrides it key by key)."""

    model: Model
    tools: Sequence[Tool]
    config: Mapping[str, Any] = field(default_factory=dict)
    #: Configuration keys a caller of the runs API may set beyond its bounds (e.g. "system",
    #: or a budget it may then raise); by default none (runtime.guards.caller_limits).
    caller_may_set: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # Checked here so that a bad agent stops the sidecar at start, not its first run.
        by_name(self.tools)
        RunConfig.of(self.config)


def load_agent(spec: str, environ: Mapping[str, str] = os.environ) -> Agent:
    """The agent `spec` names as "package.module:attribute", where the attribute is an Agent or a
    zero-argument callable returning one, with the model RECONCILER_MODEL in `environ` names,
    if any. Raises AgentLoadError saying what is wrong."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise AgentLoadError(f"agent {spec!r}: name it as package.module:attribute")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = _import(module_name, spec)
    try:
        target = functools.reduce(getattr, attribute.split("."), module)
    except AttributeError:
        raise AgentLoadError(f"agent {spec!r}: module {module_name!r} has no attribute "
                             f"{attribute!r}") from None
    if not isinstance(target, Agent) and callable(target):
        try:
            target = target()
        except Exception as exc:  # the user's factory: any failure is a failure to load
            raise AgentLoadError(f"agent {spec!r}: calling {attribute}() failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(target, Agent):
        raise AgentLoadError(f"agent {spec!r} is a {type(target).__name__}, not an Agent; point "
                             "it at a reconciler.runtime.agent.Agent or a function returning one")
    model = model_from_environment(environ)
    return target if model is None else replace(target, model=model)


def _import(module_name: str, spec: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise AgentLoadError(f"agent {spec!r}: no module named {missing!r} (searched the "
                                 f"current directory {os.getcwd()} and the installed "
                                 "packages)") from None
        raise AgentLoadError(f"agent {spec!r}: importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:  # the user's module: any failure is a failure to load
        raise AgentLoadError(f"agent {spec!r}: importing {module_name!r} failed: "
                             f"{type(exc).__name__}: {exc}") from exc
