"""The probe configuration: contracts and probes from a config file, clear errors, and inline
secrets refused.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from probes.config import load_config, parse_config
from probes.errors import ProbeConfigError, UnknownProbeError
from probes.http_json import http_json
from probes.recipes import recipe_factory
from probes.registry import ProbeRegistry, default_registry

from probe_harness import BASE, SECRET, observe


@pytest.mark.parametrize(("key", "value"), [
    ("token", SECRET), ("api_key", SECRET), ("password", SECRET), ("client_secret", SECRET),
    ("authorization", f"Bearer {SECRET}"), ("headers", {"X-Api-Key": SECRET}),
    ("base_url", f"https://user:{SECRET}@pay.test/"),
])
def test_inline_secrets_in_the_config_are_refused(key: str, value: Any) -> None:
    config = {"providers": {"payments": {"probes": [
        {"use": "stripe.payment_intents.search", "base_url": BASE, key: value}]}}}
    with pytest.raises(ProbeConfigError) as caught:
        parse_config(config, env={}, registry=registry())
    message = str(caught.value)
    assert "token_env" in message and "payments" in message
    assert SECRET not in message


def test_an_inline_secret_at_provider_level_is_refused() -> None:
    with pytest.raises(ProbeConfigError, match="inline secret"):
        parse_config({"providers": {"mail": {"api_key": "abc"}}}, env={}, registry=registry())


def registry() -> ProbeRegistry:
    """The built-ins only, so an installed plugin cannot change these tests."""
    built = ProbeRegistry()
    built.register("http_json", http_json)
    for name in ("stripe.payment_intents.search", "stripe.payment_intents.list", "slack.history"):
        built.register(name, recipe_factory(name))
    return built


CONFIG = """
[providers.payments]
idempotency_keys = true
key_retention_s = 86400
visibility_lag_s = 90
max_attempts = 3
reconcile_deadline_s = 600
compensable = false
[[providers.payments.probes]]
use = "stripe.payment_intents.search"
base_url = "http://127.0.0.1:8081/pay"
token_env = "PAYMENTS_API_KEY"
[[providers.payments.probes]]
use = "stripe.payment_intents.list"
name = "payments.key_record"
base_url = "http://127.0.0.1:8081/pay"

[providers.chat]
[[providers.chat.probes]]
use = "http_json"
name = "chat.history"
base_url = "http://127.0.0.1:8081/chat"
path = "/api/conversations.history"
params = { channel = "{correlation[channel]}" }
items = "messages"
ref = "ts"
where = { "metadata.event_payload.operation_id" = "{operation_id}" }
authority = "weak"
"""


def test_a_config_file_gives_contracts_and_probes(tmp_path: Path) -> None:
    path = tmp_path / "probes.toml"
    path.write_text(CONFIG)
    providers = load_config(path, env={}, registry=registry())
    payments, chat = providers["payments"], providers["chat"]
    assert (payments.contract.idempotency_keys, payments.contract.visibility_lag_s,
            payments.contract.reconcile_deadline_s, payments.contract.compensable) == (
        True, 90.0, 600.0, False)
    assert [p.name for p in payments.probes] == [
        "stripe.payment_intents.search", "payments.key_record"]
    assert chat.contract.visibility_lag_s == 60.0  # the cautious default
    assert [p.name for p in chat.probes] == ["chat.history"]
    # Built without its credentials: the probe answers, unavailable, and names the variable.
    assert observe(payments.probes[0]).error == "credentials not set: PAYMENTS_API_KEY"


@pytest.mark.parametrize(("config", "error"), [
    ({"providers": {"p": {"probes": [{"use": "nope"}]}}}, "known probes: http_json, slack"),
    ({"providers": {"p": {"max_atempts": 3}}}, "unknown option.s.: max_atempts"),
    ({"providers": {"p": {"max_attempts": 0}}}, "'max_attempts' must be at least 1"),
    ({"providers": {"p": {"compensable": "no"}}}, "'compensable' must be true or false"),
    ({"providers": {"p": {"probes": [{"base_url": BASE}]}}}, "'use' .* is required"),
    ({"providers": {"p": {"probes": [
        {"use": "stripe.payment_intents.search", "base_url": BASE}] * 2}}}, "used twice"),
    ({"providers": {"p": {"visibility_lag_s": 5, "probes": [
        {"use": "stripe.payment_intents.search", "base_url": BASE}]}}},
     "visibility_lag_s = 5 is below the 60 s the provider documents"),
    ({"providers": {"p": {"probes": [{"use": "http_json", "base_url": BASE, "method": "POST",
                                      "items": "", "ref": "id", "authority": "weak"}]}}},
     "'method' must be one of: GET"),
    ({"providers": {"p": {"probes": [{"use": "http_json", "base_url": BASE, "path": "/{op}",
                                      "items": "", "ref": "id", "authority": "weak"}]}}},
     "unknown placeholder {op}"),
    ({"providers": {"p": {"probes": [{"use": "http_json", "base_url": BASE, "ref": "id",
                                      "authority": "weak"}]}}}, "exactly one of 'items'"),
    ({"providers": {"p": {"probes": [{"use": "http_json", "base_url": BASE, "item": "",
                                      "ref": "id", "authority": "sure"}]}}},
     "'authority' must be one of: authoritative, lagging, weak"),
])
def test_config_errors_are_clear(config: dict[str, Any], error: str) -> None:
    with pytest.raises(ProbeConfigError, match=error) as caught:
        parse_config(config, env={}, registry=registry())
    assert str(caught.value).startswith("<config>: providers.p")


def test_a_lagging_recipe_sets_the_providers_lag_to_what_the_provider_documents() -> None:
    registry = default_registry()
    config = {"providers": {"issues": {"probes": [
        {"use": "github.issue", "base_url": BASE, "account": "octo-bot"},
        {"use": "github.search", "base_url": BASE, "account": "octo-bot"}]}}}
    setup = parse_config(config, env={}, registry=registry)["issues"]
    assert setup.contract.visibility_lag_s == 300.0


def test_an_old_sandbox_shaped_name_says_what_replaced_it() -> None:
    with pytest.raises(UnknownProbeError, match=r"'slack_like.history' was renamed: use "
                                                r"slack\.history"):
        default_registry().build("slack_like.history", {}, {})
    with pytest.raises(UnknownProbeError, match="Stripe has no idempotency-key lookup"):
        default_registry().build("stripe_like.idempotency_record", {}, {})


def test_an_unknown_probe_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownProbeError, match=r"known probes: http_json, slack\.history"):
        registry().build("stripe.paymnt_intent", {}, {})


def test_the_documented_configuration_for_the_real_providers_loads() -> None:
    # docs/probes.md's example is the one users paste: it must stay valid as recipes change.
    doc = (Path(__file__).parent.parent / "docs" / "probes.md").read_text()
    example = doc.split("### Configuration (TOML)", 1)[1].split("```toml\n", 1)[1]
    providers = parse_config(tomllib.loads(example.split("```", 1)[0]), env={},
                             registry=default_registry())
    assert set(providers) == {"stripe", "slack", "github", "postmark", "twilio"}
    assert providers["stripe"].contract.visibility_lag_s == 60.0
    assert providers["github"].contract.visibility_lag_s == 300.0
