"""The service's settings: defaults, precedence (flags > environment > TOML > defaults), where the
token may come from, refusing an open service, and printing them with secrets masked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fastapi import FastAPI
from pydantic import ValidationError

from reconciler.core.domain import ProviderContract
from reconciler.service.server import uvicorn_config
from reconciler.service.settings import (
    Settings,
    SettingsError,
    load_providers,
    load_settings,
    render_settings,
)

SECRET = "s3cret-token-value-of-enough-length"


def config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "reconciler.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults() -> None:
    settings = load_settings({}, env={})
    assert (settings.host, settings.port, settings.db) == (
        "127.0.0.1", 8765, "sqlite:///reconciler.db")
    assert (settings.sweep_interval_s, settings.retry_lease_ttl_s, settings.max_body_bytes) == (
        5.0, 60.0, 64 * 1024)
    assert settings.token is None and settings.config is None


def test_flags_beat_environment_beat_file_beat_defaults(tmp_path: Path) -> None:
    path = config_file(tmp_path, '[service]\nport = 1001\nprobe_budget = 7\n'
                                 'sweep_interval_s = 2.5\nmax_body_bytes = 2048\n')
    env = {"RECONCILER_CONFIG": str(path), "RECONCILER_PORT": "1002",
           "RECONCILER_PROBE_BUDGET": "8"}
    settings = load_settings({"port": 1003, "host": None}, env=env)
    assert settings.port == 1003  # flag
    assert settings.probe_budget == 8  # environment
    assert (settings.sweep_interval_s, settings.max_body_bytes) == (2.5, 2048)  # file
    assert settings.host == "127.0.0.1"  # default: a flag left at None is not given
    assert settings.config == path


def test_the_access_log_is_on_unless_a_flag_the_environment_or_the_file_turns_it_off(
        tmp_path: Path) -> None:
    app = FastAPI()
    assert load_settings({}, env={}).access_log
    # The app writes the line (service.request_log), never uvicorn, whose line shows the query
    # string as sent.
    assert not uvicorn_config(app, load_settings({}, env={})).access_log
    for off in (load_settings({"access_log": False}, env={}),
                load_settings({}, env={"RECONCILER_ACCESS_LOG": "false"}),
                load_settings({}, env={"RECONCILER_CONFIG": str(
                    config_file(tmp_path, "[service]\naccess_log = false\n"))})):
        assert not off.access_log


def test_config_flag_names_the_file(tmp_path: Path) -> None:
    path = config_file(tmp_path, '[service]\ndb = "sqlite:///other.db"\n')
    assert load_settings({"config": path}, env={}).db == "sqlite:///other.db"


def test_token_comes_from_the_environment_or_token_env(tmp_path: Path) -> None:
    assert load_settings({}, env={"RECONCILER_TOKEN": SECRET}).token is not None
    path = config_file(tmp_path, '[service]\ntoken_env = "SIDECAR_TOKEN"\n')
    env = {"RECONCILER_CONFIG": str(path), "SIDECAR_TOKEN": "from-token-env-of-enough-length"}
    token = load_settings({}, env=env).token
    assert token is not None and token.get_secret_value() == "from-token-env-of-enough-length"
    token = load_settings({}, env={**env, "RECONCILER_TOKEN": SECRET}).token
    assert token is not None and token.get_secret_value() == SECRET


def test_token_is_never_taken_from_a_flag_or_the_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="never taken from a flag") as raised:
        load_settings({"token": SECRET}, env={})
    assert SECRET not in str(raised.value)
    path = config_file(tmp_path, f'[service]\ntoken = "{SECRET}"\n')
    with pytest.raises(SettingsError, match="token_env") as raised:
        load_settings({"config": path}, env={})
    assert SECRET not in str(raised.value)


def test_token_env_naming_an_unset_variable_is_an_error(tmp_path: Path) -> None:
    path = config_file(tmp_path, '[service]\ntoken_env = "NOT_SET_ANYWHERE"\n')
    with pytest.raises(SettingsError, match="NOT_SET_ANYWHERE"):
        load_settings({"config": path}, env={})


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "sidecar.internal"])
def test_non_loopback_without_token_is_refused(host: str) -> None:
    with pytest.raises(SettingsError, match="without a credential"):
        load_settings({"host": host}, env={})
    with pytest.raises(ValidationError):
        Settings(host=host)
    with pytest.raises(SettingsError, match="plain HTTP"):
        load_settings({"host": host}, env={"RECONCILER_TOKEN": SECRET})
    assert load_settings({"host": host, "behind_tls_proxy": True, "allowed_hosts": "sidecar"},
                         env={"RECONCILER_TOKEN": SECRET}).host == host


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "sidecar.internal"])
def test_non_loopback_without_allowed_hosts_is_refused(host: str) -> None:
    with pytest.raises(SettingsError, match="needs allowed_hosts"):
        load_settings({"host": host, "behind_tls_proxy": True}, env={"RECONCILER_TOKEN": SECRET})
    served = load_settings({"host": host, "behind_tls_proxy": True},
                           env={"RECONCILER_TOKEN": SECRET,
                                "RECONCILER_ALLOWED_HOSTS": "Sidecar.Internal,10.0.0.5"})
    assert served.served_hosts() == {"sidecar.internal", "10.0.0.5", "localhost", "127.0.0.1",
                                     "::1"}


def test_loopback_serves_its_host_and_the_loopback_names() -> None:
    assert load_settings({"host": "127.0.0.2"}, env={}).served_hosts() == {
        "127.0.0.2", "localhost", "127.0.0.1", "::1"}


@pytest.mark.parametrize("token", ["", "   ", "short-token", " " + SECRET])
def test_an_empty_or_short_token_is_refused_at_start(token: str) -> None:
    with pytest.raises(SettingsError, match="at least 24 characters") as raised:
        load_settings({}, env={"RECONCILER_TOKEN": token})
    assert not token.strip() or token.strip() not in str(raised.value)


def test_tls_cert_and_key_come_together(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="together"):
        load_settings({"tls_cert": tmp_path / "cert.pem"}, env={})
    settings = load_settings({"host": "0.0.0.0", "tls_cert": tmp_path / "cert.pem",
                              "tls_key": tmp_path / "key.pem", "allowed_hosts": "sidecar"},
                             env={"RECONCILER_TOKEN": SECRET})
    assert settings.tls_cert == tmp_path / "cert.pem"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_needs_no_token(host: str) -> None:
    assert load_settings({"host": host}, env={}).token is None


def test_invalid_values_name_the_setting_without_echoing_it(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="port") as raised:
        load_settings({}, env={"RECONCILER_PORT": "eighty"})
    assert "eighty" not in str(raised.value)
    with pytest.raises(SettingsError, match="sweep_interval_s"):
        load_settings({"sweep_interval_s": -1}, env={})
    with pytest.raises(SettingsError, match="token"):
        load_settings({}, env={"RECONCILER_TOKEN": "   "})
    with pytest.raises(SettingsError, match="db"):
        load_settings({"db": "not a url"}, env={})
    with pytest.raises(SettingsError, match="unknown setting"):
        load_settings({"colour": "blue"}, env={})
    path = config_file(tmp_path, "[service]\nprot = 1\n")
    with pytest.raises(SettingsError, match=r"\[service\].*prot"):
        load_settings({"config": path}, env={})


def test_unreadable_or_invalid_config_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings({"config": tmp_path / "missing.toml"}, env={})
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_settings({"config": config_file(tmp_path, "[service\n")}, env={})


def test_render_masks_the_token_and_db_password() -> None:
    settings = load_settings({"db": "postgresql+psycopg://app:hunter2@db.internal/receipts"},
                             env={"RECONCILER_TOKEN": SECRET})
    text = render_settings(settings)
    assert "***set***" in text and SECRET not in text
    assert "hunter2" not in text and "app:***@db.internal/receipts" in text
    assert "port" in text and "8765" in text
    assert SECRET not in repr(settings)


def test_providers_come_from_the_same_file(tmp_path: Path) -> None:
    path = config_file(tmp_path, '[service]\nport = 9000\n\n[providers.pay]\n'
                                 'idempotency_keys = true\nvisibility_lag_s = 5\n')
    assert load_settings({"config": path}, env={}).port == 9000
    setups = load_providers(path, env={})
    assert setups["pay"].contract == ProviderContract(
        "pay", idempotency_keys=True, visibility_lag_s=5.0)
    assert setups["pay"].probes == ()


def test_serving_an_open_non_loopback_address_is_refused_at_start() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "reconciler.service.server"], capture_output=True, text=True,
        env={"PATH": "", "RECONCILER_HOST": "0.0.0.0", "RECONCILER_DB": "sqlite://"},
        timeout=60)
    assert result.returncode == 2
    assert "without a credential" in result.stderr
    assert "serving on" not in result.stdout
