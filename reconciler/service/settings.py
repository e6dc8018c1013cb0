"""The service's configuration: defaults < TOML `[service]` table < environment < CLI flags.

    [service]                         # in the same file as the [providers.*] tables
    host = "127.0.0.1"
    db = "postgresql+psycopg://reconciler@db/reconciler"
    token_env = "RECONCILER_SIDECAR_TOKEN"   # the variable's name: secrets never go in the file

Every setting `name` can be set with `RECONCILER_<NAME>` (`RECONCILER_DB`, `RECONCILER_PORT`,
...). The bearer token comes only from `RECONCILER_TOKEN` or the variable `token_env` names:
never from a flag (it would show in `ps` and in shell history) and never from the file. Named
credentials come from `RECONCILER_CREDENTIAL_<NAME>` variables and from the hashes in
`credentials_file` (see service.credentials).

Serving beyond loopback needs a credential, and a credential is not sent over plain HTTP
there: give `tls_cert` and `tls_key`, or say `behind_tls_proxy` when a proxy terminates TLS.
It also needs `allowed_hosts`, the names clients use, so that no other Host is answered.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from probes.config import ProviderSetup, parse_config
from reconciler.core.errors import ReconcilerError, StoreUrlError
from reconciler.core.schedule import DEFAULT_POLICY
from reconciler.infra.logs import LogFormat, LogLevel
from reconciler.service.credentials import (
    Credential,
    CredentialError,
    check_token,
    read_file,
)
from reconciler.service.credentials import from_env as credentials_from_env
from reconciler.store.schema import DEFAULT_POOL_SIZE, DEFAULT_URL, supported_store_url

ENV_PREFIX = "RECONCILER_"
TOKEN_ENV = ENV_PREFIX + "TOKEN"


class SettingsError(ReconcilerError):
    """The service's configuration is invalid; the message names the setting and its source."""


#: What /docs needs from a Swagger UI distribution (service.openapi serves them).
SWAGGER_FILES = ("swagger-ui-bundle.js", "swagger-ui.css")


def missing_docs_assets(directory: Path) -> list[str]:
    """The Swagger UI files `directory` lacks (empty when /docs can be served from it)."""
    return [name for name in SWAGGER_FILES if not (directory / name).is_file()]


class Settings(BaseModel):
    """Everything `serve` needs. Construct with `load_settings` to honour every source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field("127.0.0.1", min_length=1)
    port: int = Field(8765, ge=0, le=65535, description="0: any free port")
    db: str = Field(DEFAULT_URL, min_length=1, description="SQLAlchemy URL of the store")
    db_pool_size: int = Field(DEFAULT_POOL_SIZE, ge=1, le=1000, description="store connections "
                              "kept open, opened at start (the request threads and the sweep "
                              "share them)")
    token: SecretStr | None = None
    sweep_interval_s: float = Field(5.0, ge=0, description="0: probe only on demand")
    probe_concurrency: int = Field(DEFAULT_POLICY.concurrency, ge=1, le=256)
    probe_timeout_s: float = Field(DEFAULT_POLICY.probe_timeout_s, gt=0)
    probe_budget: int = Field(DEFAULT_POLICY.probe_budget, ge=1)
    retry_lease_ttl_s: float = Field(60.0, gt=0)
    max_body_bytes: int = Field(64 * 1024, ge=1024)
    shutdown_timeout_s: float = Field(30.0, gt=0, description="bound on in-flight requests")
    config: Path | None = Field(None, description="TOML file with [service] and [providers.*]")
    agent: str | None = Field(None, min_length=1, description="package.module:attribute of the "
                              "agent /v1/runs runs (see runtime.agent.load_agent)")
    run_lease_s: float = Field(30.0, ge=1, le=3600, description="an agent run's lease, renewed "
                               "every third of it while a worker advances the run: a dead "
                               "worker's run is taken over this long after its last renewal")
    supervise_interval_s: float = Field(2.0, ge=0, le=3600, description="with an agent: "
                                        "seconds between the supervisor's looks for queued "
                                        "runs and runs whose worker died; 0: no supervisor")
    supervise_batch: int = Field(8, ge=1, le=1000, description="runs the supervisor picks up "
                                 "per look, at most")
    supervise_concurrency: int = Field(32, ge=1, le=10_000, description="runs the supervisor "
                                       "advances at once, at most")
    credentials_file: Path | None = Field(None, description="JSON file of credential hashes "
                                          "(reconciler credential add)")
    #: From RECONCILER_CREDENTIAL_<NAME> variables (hashes only; never a flag or the file).
    credentials: tuple[Credential, ...] = ()
    allowed_hosts: tuple[str, ...] = Field((), description="Host header names served (DNS "
                                           "rebinding), beside the loopback names; required "
                                           "when `host` is not loopback; default: `host`")
    tls_cert: Path | None = Field(None, description="PEM certificate chain: serve HTTPS")
    tls_key: Path | None = Field(None, description="PEM private key of tls_cert")
    behind_tls_proxy: bool = Field(False, description="a proxy in front terminates TLS: "
                                   "credentials may cross plain HTTP to this address")
    max_concurrency: int = Field(256, ge=1, le=100_000, description="requests in flight; "
                                 "more get 503 with Retry-After")
    hot_queue_max: int = Field(128, ge=1, le=100_000, description="requests to the hot "
                               "routes in flight (each waits on the store's writer); more get "
                               "503 with Retry-After")
    hot_queue_wait_s: float = Field(0.5, gt=0, le=600, description="while the oldest hot "
                                    "request in flight has waited this long, new ones get 503 "
                                    "with Retry-After")
    max_header_bytes: int = Field(16 * 1024, ge=1024, le=1024 * 1024,
                                  description="request line and headers, in all")
    max_headers: int = Field(100, ge=8, le=1000, description="header fields per request")
    request_read_timeout_s: float = Field(10.0, gt=0, le=600, description="to receive a "
                                          "request's headers, and between its body's chunks")
    docs_assets: Path | None = Field(None, description="directory with Swagger UI's "
                                     "swagger-ui-bundle.js and swagger-ui.css (e.g. npm's "
                                     "swagger-ui-dist): /docs serves them from here; unset, "
                                     "/docs is off (never a CDN)")
    log_level: LogLevel = Field("info", description="debug shows every probe HTTP call")
    log_format: LogFormat = Field("text", description="json: one object per line")
    access_log: bool = Field(True, description="one line per request (logger "
                                               "reconciler.access: method, path, masked "
                                               "query, status, duration_ms, request_id); "
                                               "off: 40-80 us less CPU a request")
    retain_settled_days: float | None = Field(None, gt=0, description="the sweep removes "
                                              "settled operations decided longer ago, a small "
                                              "batch at a time (as `reconciler prune`); unset: "
                                              "kept for ever")

    @model_validator(mode="after")
    def _check(self) -> Settings:
        try:
            make_url(self.db)
        except ArgumentError as exc:
            raise ValueError(f"db is not a database URL: {exc}") from None
        try:
            supported_store_url(self.db)
        except StoreUrlError as exc:
            raise ValueError(f"db: {exc}") from None
        if self.docs_assets is not None and (missing := missing_docs_assets(self.docs_assets)):
            raise ValueError(f"docs_assets: {self.docs_assets} lacks {', '.join(missing)} "
                             "(a Swagger UI 5 distribution, e.g. npm's swagger-ui-dist)")
        if self.token is not None:
            try:
                check_token(self.token.get_secret_value(), TOKEN_ENV)
            except CredentialError as exc:
                raise ValueError(str(exc)) from None
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("give tls_cert and tls_key together")
        if is_loopback(self.host):
            return self
        if not self.has_credentials():
            raise ValueError(
                f"refusing to serve on {self.host} without a credential: anyone who can "
                f"reach it could grant retries; set {TOKEN_ENV} (or token_env in [service]), "
                "a RECONCILER_CREDENTIAL_<NAME>, or credentials_file, or serve on 127.0.0.1")
        if self.tls_cert is None and not self.behind_tls_proxy:
            raise ValueError(
                f"refusing to take bearer tokens over plain HTTP on {self.host}: give "
                "tls_cert and tls_key (--tls-cert, --tls-key), or behind_tls_proxy "
                "(--behind-tls-proxy) when a proxy in front terminates TLS")
        if not self.allowed_hosts:
            # Beyond loopback the names clients use are not known here, and a wildcard bind
            # would answer any Host: a page a browser visits could rebind its own name to
            # this address (DNS rebinding) and talk to the service.
            raise ValueError(
                f"serving on {self.host} needs allowed_hosts: the host names clients reach "
                "the service by (--allowed-hosts sidecar.internal,10.0.0.5, "
                "RECONCILER_ALLOWED_HOSTS or [service] allowed_hosts); loopback names are "
                "always served")
        return self

    def has_credentials(self) -> bool:
        return self.token is not None or bool(self.credentials) or (
            self.credentials_file is not None and bool(self.file_credentials()))

    def file_credentials(self) -> list[Credential]:
        """The credentials of `credentials_file` (read anew: `credential add` may have run)."""
        if self.credentials_file is None:
            return []
        try:
            return read_file(self.credentials_file)
        except CredentialError as exc:
            raise ValueError(str(exc)) from None

    def served_hosts(self) -> frozenset[str]:
        """The Host names a request may carry: `allowed_hosts` (required beyond loopback),
        else `host`, and the loopback names (a rebinding page cannot send those as its own
        Host, and the container's health check on 127.0.0.1 does)."""
        named = self.allowed_hosts or (self.host,)
        return frozenset({"localhost", "127.0.0.1", "::1", *(h.lower() for h in named)})


#: The settings a flag or a variable may set (the token and credentials have their own rules).
PLAIN_FIELDS = tuple(name for name in Settings.model_fields
                     if name not in ("token", "credentials"))


def is_loopback(host: str) -> bool:
    """True for addresses only this machine reaches. Other host names may resolve anywhere."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_settings(flags: Mapping[str, object] | None = None,
                  env: Mapping[str, str] | None = None) -> Settings:
    """The effective settings. `flags` holds CLI values by field name (None: not given);
    `env` defaults to the process environment. Raises SettingsError naming what is wrong."""
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    env = os.environ if env is None else env
    if "token" in flags:
        raise SettingsError(f"the token is never taken from a flag; set {TOKEN_ENV}")
    unknown = sorted(set(flags) - set(PLAIN_FIELDS))
    if unknown:
        raise SettingsError(f"unknown setting(s): {', '.join(unknown)}")
    from_env = {name: env[ENV_PREFIX + name.upper()] for name in PLAIN_FIELDS
                if env.get(ENV_PREFIX + name.upper())}
    config = flags.get("config", from_env.get("config"))
    from_file = _service_table(Path(str(config)), env) if config is not None else {}
    values: dict[str, Any] = {**from_file, **from_env, **flags}
    if TOKEN_ENV in env:
        # Set but empty is refused, not read as "no token": it would silently open the service.
        values["token"] = env[TOKEN_ENV]
    if isinstance(values.get("allowed_hosts"), str):
        values["allowed_hosts"] = [h.strip() for h in values["allowed_hosts"].split(",")
                                   if h.strip()]
    try:
        values["credentials"] = credentials_from_env(env)
        return Settings.model_validate(values)
    except CredentialError as exc:
        raise SettingsError(str(exc)) from None
    except ValidationError as exc:
        raise SettingsError(_describe(exc)) from None


def _service_table(path: Path, env: Mapping[str, str]) -> dict[str, Any]:
    section = read_config(path).get("service", {})
    if not isinstance(section, dict):
        raise SettingsError(f"{path}: 'service' must be a table ([service])")
    table = dict(section)
    if "token" in table:
        raise SettingsError(f"{path}: [service] token: secrets never go in the file; "
                            "name the variable that holds it with token_env")
    token_env = table.pop("token_env", None)
    unknown = sorted(set(table) - set(PLAIN_FIELDS) | ({"config"} & set(table)))
    if unknown:
        raise SettingsError(f"{path}: [service]: unknown setting(s): {', '.join(unknown)}")
    if token_env is not None:
        if not isinstance(token_env, str) or not env.get(token_env):
            raise SettingsError(f"{path}: [service] token_env names {token_env!r}, which is "
                                "not set in the environment")
        table["token"] = env[token_env]
    return table


def read_config(path: Path) -> dict[str, Any]:
    """The parsed TOML configuration file."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: not valid TOML: {exc}") from None


def load_providers(path: Path, env: Mapping[str, str] | None = None) -> dict[str, ProviderSetup]:
    """The `[providers.*]` tables of the configuration file: contracts and probes, by provider.
    probes.config owns that format; the `[service]` table is ours, so it is taken out first."""
    data = {k: v for k, v in read_config(path).items() if k != "service"}
    return parse_config(data, env, source=str(path))


def _describe(exc: ValidationError) -> str:
    # Only field names and messages: the input may be the token.
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}"
                     for e in exc.errors(include_input=False, include_url=False))


def render_settings(settings: Settings) -> str:
    """The effective settings for printing at start, secrets masked."""
    shown: dict[str, object] = settings.model_dump(exclude={"token", "db", "credentials"})
    shown["db"] = make_url(settings.db).render_as_string(hide_password=True)
    shown["token"] = "***set***" if settings.token is not None else "(none)"
    shown["credentials"] = ", ".join(
        f"{c.name} ({'+'.join(sorted(c.roles))})" for c in settings.credentials) or "(none)"
    width = max(map(len, shown))
    return "\n".join(f"{name.ljust(width)} = {shown[name]}" for name in Settings.model_fields)
