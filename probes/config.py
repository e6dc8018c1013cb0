"""The probe configuration file (TOML): per provider, its contract and its probes.

    [providers.stripe]
    idempotency_keys = true
    key_retention_s = 86400
    [[providers.stripe.probes]]
    use = "stripe.payment_intents.list"   # a registered probe name
    name = "stripe.list"                  # optional; the name evidence is recorded under
    actions = ["payment_intents.create"]  # the actions whose effects it reads (none: none)
    base_url = "https://api.stripe.com"
    token_env = "STRIPE_SECRET_KEY"       # the variable's name: secrets never go in the file

`visibility_lag_s`, when not set, is the largest documented lag of the provider's lagging
probes (a recipe's `least_lag_s`); a value below it is refused, since a zero read sooner than
the provider documents could open a retry that duplicates the effect. Every error names the
file and the provider, and never shows a secret's value.

`actions`, in any probe's table whatever its `use`, names the actions whose effects appear where
the probe reads (SPEC section 3, *scope*): an empty read of another action's operation proves
no zero, and a probe that names none covers none.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probes.base import Probe
from probes.credentials import reject_inline_secrets
from probes.errors import ProbeConfigError
from probes.options import Options
from probes.registry import ProbeRegistry, default_registry
from reconciler.core.domain import ProviderContract

_DEFAULT = ProviderContract(name="")


@dataclass(frozen=True, slots=True)
class ProviderSetup:
    """One provider's contract and its probes, in the order the file lists them."""

    contract: ProviderContract
    probes: tuple[Probe, ...]


def load_config(path: str | Path, env: Mapping[str, str] | None = None,
                registry: ProbeRegistry | None = None) -> dict[str, ProviderSetup]:
    """Read and build a configuration file; `env` defaults to the process environment."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProbeConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProbeConfigError(f"{path}: not valid TOML: {exc}") from exc
    return parse_config(data, env, registry, source=str(path))


def parse_config(data: Mapping[str, Any], env: Mapping[str, str] | None = None,
                 registry: ProbeRegistry | None = None,
                 source: str = "<config>") -> dict[str, ProviderSetup]:
    """Build the providers of an already parsed configuration."""
    top = Options(data, source)
    providers = top.sections("providers")
    top.finish()
    env = os.environ if env is None else env
    registry = default_registry() if registry is None else registry
    return {name: _provider(name, table, env, registry, f"{source}: providers.{name}")
            for name, table in providers.items()}


def _provider(name: str, table: Mapping[str, Any], env: Mapping[str, str],
              registry: ProbeRegistry, where: str) -> ProviderSetup:
    reject_inline_secrets({k: v for k, v in table.items() if k != "probes"}, where)
    opts = Options(table, where)
    probes: list[Probe] = []
    for index, entry in enumerate(opts.tables("probes")):
        probes.append(_probe(entry, env, registry, f"{where}.probes[{index}]"))
    least = max((_least_lag(p) for p in probes), default=0.0)
    lag = opts.number("visibility_lag_s", max(least, _DEFAULT.visibility_lag_s))
    if lag < least:
        slowest = next(p.name for p in probes if _least_lag(p) == least)
        raise ProbeConfigError(
            f"{where}: visibility_lag_s = {lag:g} is below the {least:g} s the provider "
            f"documents for probe {slowest!r}: a zero it reads sooner proves nothing")
    contract = ProviderContract(
        name=name,
        idempotency_keys=opts.boolean("idempotency_keys", _DEFAULT.idempotency_keys),
        key_retention_s=opts.number("key_retention_s", _DEFAULT.key_retention_s),
        visibility_lag_s=lag,
        max_attempts=opts.integer("max_attempts", _DEFAULT.max_attempts, minimum=1),
        # A provider's own figure when its recipes know it (Stripe's libraries wait 80 s):
        # the longest of its probes', never below the cautious default.
        inflight_s=opts.number("inflight_s", max(
            [_DEFAULT.inflight_s] + [_declared(p, "inflight_s") for p in probes])),
        reconcile_deadline_s=opts.number("reconcile_deadline_s", _DEFAULT.reconcile_deadline_s),
        compensable=opts.boolean("compensable", _DEFAULT.compensable),
    )
    opts.finish()
    names = [probe.name for probe in probes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ProbeConfigError(
            f"{where}: probe name(s) {', '.join(duplicates)} used twice; give each a 'name'")
    return ProviderSetup(contract, tuple(probes))


def _least_lag(probe: Probe) -> float:
    return _declared(probe, "least_lag_s")


def _declared(probe: Probe, figure: str) -> float:
    """A provider figure a probe knows (a recipe's `least_lag_s`, `inflight_s`); 0 if none."""
    value = getattr(probe, figure, None)
    return float(value) if isinstance(value, int | float) else 0.0


def _probe(entry: Mapping[str, Any], env: Mapping[str, str], registry: ProbeRegistry,
           where: str) -> Probe:
    options = dict(entry)
    use, name = options.pop("use", None), options.pop("name", None)
    actions = options.pop("actions", None)
    if not isinstance(use, str) or not use:
        raise ProbeConfigError(f"{where}: 'use' (the probe's registered name) is required")
    if name is not None and (not isinstance(name, str) or not name):
        raise ProbeConfigError(f"{where}: 'name' must be a non-empty string")
    if actions is not None and not (isinstance(actions, list)
                                    and all(isinstance(a, str) and a for a in actions)):
        raise ProbeConfigError(f"{where}: 'actions' must be a list of action names (the "
                               "actions whose effects this probe reads)")
    try:
        return registry.build(use, options, env, name=name, actions=actions)
    except ProbeConfigError as exc:
        raise ProbeConfigError(f"{where}: {exc}") from exc
