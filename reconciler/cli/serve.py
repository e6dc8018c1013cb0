"""`reconciler serve`, the sidecar, and `reconciler health`, the question a container's health
check asks it. Registered on the command line by the CLI's `__init__`."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from typer.core import TyperCommand, TyperOption

from reconciler.cli.options import EXIT_FAILED, LogFormatOption, LogLevelOption

if TYPE_CHECKING:
    from typer._click import Context, HelpFormatter


class PolicyHelp(TyperCommand):
    """A command whose options' help names the probe policy's defaults as `{policy.NAME}`,
    filled in from reconciler.core.schedule when the help is shown: building the command line for
    every other command does not import the scheduler."""

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        from reconciler.core.schedule import DEFAULT_POLICY

        for param in self.params:
            if isinstance(param, TyperOption) and param.help and "{policy." in param.help:
                param.help = param.help.format(policy=DEFAULT_POLICY)
        super().format_help(ctx, formatter)


def serve_command(
    ctx: typer.Context,
    db: Annotated[str | None, typer.Option(
        help="SQLAlchemy URL of the receipt store [env RECONCILER_DB; default "
             "sqlite:///reconciler.db]. PostgreSQL: postgresql+psycopg://user@host/db")] = None,
    host: Annotated[str | None, typer.Option(
        help="Address to bind [env RECONCILER_HOST; default 127.0.0.1]. Any other address "
             "needs a credential (RECONCILER_TOKEN, RECONCILER_CREDENTIAL_<NAME> or "
             "--credentials-file), TLS (--tls-cert/--tls-key or --behind-tls-proxy) and "
             "--allowed-hosts.")
    ] = None,
    port: Annotated[int | None, typer.Option(
        help="Port [env RECONCILER_PORT; default 8765; 0 picks a free one].")] = None,
    config: Annotated[Path | None, typer.Option(
        help="TOML file: a [service] table for these settings, [providers.*] for provider "
             "contracts and probes [env RECONCILER_CONFIG].")] = None,
    sweep_interval_s: Annotated[float | None, typer.Option(
        help="Seconds between reconcile sweeps; 0 probes only on demand [default 5].")] = None,
    probe_concurrency: Annotated[int | None, typer.Option(
        help="Operations probed at once [default {policy.concurrency}].")] = None,
    probe_timeout_s: Annotated[float | None, typer.Option(
        help="A probe call still running after this is recorded unavailable "
             "[default {policy.probe_timeout_s:g}].")
    ] = None,
    probe_budget: Annotated[int | None, typer.Option(
        help="Probe rounds per operation before it is escalated "
             "[default {policy.probe_budget}].")] = None,
    retry_lease_ttl_s: Annotated[float | None, typer.Option(
        help="How long a retry grant stays valid [default 60].")] = None,
    max_body_bytes: Annotated[int | None, typer.Option(
        help="Larger request bodies get 413 [default 65536].")] = None,
    shutdown_timeout_s: Annotated[float | None, typer.Option(
        help="On SIGTERM, how long requests in flight may take to finish [default 30].")
    ] = None,
    agent: Annotated[str | None, typer.Option(
        help="The agent /v1/runs runs: package.module:attribute, an Agent or a function "
             "returning one, looked up from the current directory first [env "
             "RECONCILER_AGENT]. Without it /v1/runs answers 404 no-agent.")] = None,
    run_lease_s: Annotated[float | None, typer.Option(
        help="An agent run's lease, heartbeated while a worker advances it; a dead worker's "
             "run is taken over this long after its last renewal [default 30].")] = None,
    supervise_interval_s: Annotated[float | None, typer.Option(
        help="With --agent: seconds between the supervisor's looks for queued runs and runs "
             "whose worker died, which it advances; 0: no supervisor [default 2; "
             "RECONCILER_SUPERVISE_BATCH and _CONCURRENCY bound its work].")] = None,
    credentials_file: Annotated[Path | None, typer.Option(
        help="JSON file of credential hashes, written by `reconciler credential add` [env "
             "RECONCILER_CREDENTIALS_FILE].")] = None,
    allowed_hosts: Annotated[str | None, typer.Option(
        help="Comma-separated Host names served beside the loopback names; others get 421. "
             "Required with a --host other than loopback [env RECONCILER_ALLOWED_HOSTS; "
             "default: --host].")] = None,
    tls_cert: Annotated[Path | None, typer.Option(
        help="PEM certificate (chain): serve HTTPS; with --tls-key.")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key of --tls-cert.")] = None,
    behind_tls_proxy: Annotated[bool, typer.Option(
        "--behind-tls-proxy", help="A proxy in front terminates TLS: serve plain HTTP on a "
                                   "non-loopback address with credentials.")] = False,
    max_concurrency: Annotated[int | None, typer.Option(
        help="Requests in flight; more get 503 with Retry-After [default 256].")] = None,
    retain_settled_days: Annotated[float | None, typer.Option(
        help="The sweep removes settled operations decided longer ago than this, a small "
             "batch per sweep, as `reconciler prune` would (no export) [default: keep].")
    ] = None,
    log_level: LogLevelOption = None,
    log_format: LogFormatOption = None,
    access_log: Annotated[bool | None, typer.Option(
        "--access-log/--no-access-log",
        help="A log line per request (logger reconciler.access: method, path, query with "
             "credentials masked, status, duration_ms, request_id); off saves 40-80 us of CPU "
             "a request [default on; env RECONCILER_ACCESS_LOG].")] = None,
) -> None:
    """Run the sidecar: the HTTP API (SPEC section 6) with the reconcile sweep inside.

    Settings come from flags, then RECONCILER_* variables, then the [service] table of
    --config, then defaults. The bearer token is read from RECONCILER_TOKEN (or the variable
    named by token_env in [service]), never from a flag. Stops gracefully on SIGTERM.
    """
    from reconciler.service.server import main

    main({"db": db, "host": host, "port": port, "config": config,
          "sweep_interval_s": sweep_interval_s, "probe_concurrency": probe_concurrency,
          "probe_timeout_s": probe_timeout_s, "probe_budget": probe_budget,
          "retry_lease_ttl_s": retry_lease_ttl_s, "max_body_bytes": max_body_bytes,
          "shutdown_timeout_s": shutdown_timeout_s, "agent": agent,
          "run_lease_s": run_lease_s, "supervise_interval_s": supervise_interval_s,
          "credentials_file": credentials_file, "allowed_hosts": allowed_hosts,
          "tls_cert": tls_cert, "tls_key": tls_key,
          "behind_tls_proxy": True if behind_tls_proxy else None,
          "max_concurrency": max_concurrency, "retain_settled_days": retain_settled_days,
          "log_level": _value(log_level, ctx, "log_level"),
          "log_format": _value(log_format, ctx, "log_format"), "access_log": access_log})


def _value(given: StrEnum | None, ctx: typer.Context, name: str) -> str | None:
    """A serve flag's value, else the same flag given before the command, else None."""
    chosen = given or (ctx.obj or {}).get(name)
    return None if chosen is None else str(chosen.value)


def health_command(
    url: Annotated[str | None, typer.Option(
        help="The sidecar's readiness URL [default http://127.0.0.1:$RECONCILER_PORT/readyz, "
             "port 8765]. A sidecar serving TLS (--tls-cert): https://NAME:PORT/readyz with a "
             "name its certificate holds and allowed_hosts lists (SSL_CERT_FILE for a private "
             "CA).")] = None,
    token_env: Annotated[str, typer.Option(
        help="The variable holding the bearer token to send (none sent when it is unset).")
    ] = "RECONCILER_TOKEN",
) -> None:
    """Ask the sidecar whether it is ready (GET /readyz with the bearer token): exit 0 when it
    is, 1 with the reason when it is not (the store does not answer or refuses writes, a wrong
    token, nothing listening). The container image's HEALTHCHECK runs it."""
    import os

    from reconciler.cli.health_check import check_health, readyz_url

    health = check_health(url or readyz_url(os.environ), token_env=token_env)
    typer.echo(health.says, err=not health.ready)
    if not health.ready:
        raise typer.Exit(EXIT_FAILED)
