"""A provider's `inflight_s` (SPEC section 4, settle time: how long after a dispatch the provider
may still apply a request whose caller stopped waiting) is configured beside the other contract
fields, and takes the cautious 60 s when left out."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from probes.config import parse_config
from probes.errors import ProbeConfigError
from probes.registry import default_registry


def test_inflight_s_is_read_from_the_providers_table_and_defaults_to_60_s() -> None:
    providers = parse_config({"providers": {"slow": {"inflight_s": 80}, "plain": {}}}, env={},
                             registry=default_registry())
    assert providers["slow"].contract.inflight_s == 80.0
    assert providers["plain"].contract.inflight_s == 60.0


def test_a_negative_inflight_s_is_refused_with_its_name() -> None:
    with pytest.raises(ProbeConfigError, match="'inflight_s' must not be negative"):
        parse_config({"providers": {"p": {"inflight_s": -1}}}, env={},
                     registry=default_registry())


def test_the_documented_stripe_configuration_waits_as_long_as_stripes_libraries() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "probes.md").read_text()
    example = doc.split("### Configuration (TOML)", 1)[1].split("```toml\n", 1)[1]
    providers = parse_config(tomllib.loads(example.split("```", 1)[0]), env={},
                             registry=default_registry())
    assert providers["stripe"].contract.inflight_s == 80.0
