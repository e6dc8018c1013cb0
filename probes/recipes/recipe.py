"""What a recipe is: a preset of `http_json` options and what its endpoint can prove."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from probes.errors import ProbeConfigError
from reconciler.core.domain import Authority, ProviderContract

#: A recipe's own options (not `http_json`'s), turned into `http_json` options; the second
#: argument names the probe for error messages.
Adapt = Callable[[dict[str, Any], str], dict[str, Any]]


def by_account(field: str, account: str, why: str) -> Adapt:
    """The adapt of a recipe whose effects count only when the worker's own account made them:
    the required option `account` becomes the `author` check on `field`. `account` says what
    the option holds, `why` why anyone else's item proves nothing."""

    def adapt(options: dict[str, Any], where: str) -> dict[str, Any]:
        named = options.pop("account", None)
        if not isinstance(named, str) or not named.strip():
            raise ProbeConfigError(f"{where}: 'account' ({account}) is required: {why}")
        return {"author": {field: named}, **options}

    return adapt


#: SPEC section 4's cautious defaults, for a provider that documents nothing: how long it may
#: still be applying a request whose caller stopped waiting, and how far its reads may lag.
CAUTIOUS_INFLIGHT_S = ProviderContract(name="").inflight_s
CAUTIOUS_LAG_S = ProviderContract(name="").visibility_lag_s


@dataclass(frozen=True, slots=True)
class Inflight:
    """A provider's `inflight_s` default and where it comes from: the provider's documentation
    or, where it documents nothing, a line that says so (and the cautious default)."""

    seconds: float
    source: str


@dataclass(frozen=True, slots=True)
class Recipe:
    """`preset`: `http_json` options, the default authority included; `strongest`: the cap;
    `least_lag_s`: the provider's documented lag (lagging reads); `adapt`: recipe options;
    `cite`: where the provider documents the endpoint's consistency and lag (or says nothing
    of it, which the recipe's module then states); `inflight`: the provider's `inflight_s`
    default, which a provider whose table leaves `inflight_s` out takes from its probes."""

    preset: Mapping[str, Any]
    strongest: Authority
    cite: str
    least_lag_s: float = 0.0
    adapt: Adapt | None = None
    inflight: Inflight = Inflight(CAUTIOUS_INFLIGHT_S, "undocumented: the cautious default")
