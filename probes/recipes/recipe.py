"""What a recipe is: a preset of `http_json` options and what its endpoint can prove."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.domain import Authority

#: A recipe's own options (not `http_json`'s), turned into `http_json` options; the second
#: argument names the probe for error messages.
Adapt = Callable[[dict[str, Any], str], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Recipe:
    """`preset`: `http_json` options, the default authority included; `strongest`: the cap;
    `least_lag_s`: the provider's documented lag (lagging reads); `adapt`: recipe options;
    `cite`: where the provider documents the endpoint's consistency and lag."""

    preset: Mapping[str, Any]
    strongest: Authority
    cite: str
    least_lag_s: float = 0.0
    adapt: Adapt | None = None
