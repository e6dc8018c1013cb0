"""The `reconciler` command line."""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar

import typer
from typer.core import TyperCommand, TyperOption

from reconciler.cli import terminal
from reconciler.cli.command_tree import Root

if TYPE_CHECKING:
    from typer._click import Context, HelpFormatter

    from reconciler.cli.replay import ExpectResult, ReplayReport

# Every command imports what it uses when it runs: `reconciler --help` and `--version` stay
# within 0.3 s of CPU (bench/cli.py measures it; tests/test_cli_imports.py checks that no web
# framework, database toolkit or HTTP client is imported to answer them).


def _ops() -> typer.Typer:
    import reconciler.cli.ops_list  # noqa: F401  (adds `ops list` to the group)
    from reconciler.cli.ops import ops

    return ops


class _Root(Root):
    LAZY: ClassVar[dict[str, tuple[str, Callable[[], typer.Typer]]]] = {
        "ops": ("Act on what waits on a human, against a running sidecar (RECONCILER_URL, "
                "RECONCILER_TOKEN).", _ops),
    }


app = typer.Typer(
    cls=_Root,
    help="Effect-receipt reconciler: record intents, probe providers, gate every retry.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # typer's --install-completion / --show-completion (bash, zsh, fish, PowerShell), through
    # click's completion: https://typer.tiangolo.com/tutorial/options-autocompletion/
    add_completion=True,
    rich_markup_mode=None,
    # Inherited by every subcommand's context: `-h` wherever `--help` is.
    context_settings={"help_option_names": ["-h", "--help"]},
)

class LogLevel(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class LogFormat(StrEnum):
    text = "text"
    json = "json"


LogLevelOption = Annotated[LogLevel | None, typer.Option(
    help="debug, info, warning or error; debug also shows every probe HTTP call [default "
         "info; env RECONCILER_LOG_LEVEL for serve].", case_sensitive=False)]
LogFormatOption = Annotated[LogFormat | None, typer.Option(
    help="text, or json: one object per line (time, level, logger, message, extra fields) "
         "[default text; env RECONCILER_LOG_FORMAT for serve].", case_sensitive=False)]


def _print_version(value: bool) -> None:
    if value:
        from reconciler.infra.release import release

        typer.echo(f"reconciler {release()}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    _version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print the version and exit.")] = False,
    log_level: LogLevelOption = None,
    log_format: LogFormatOption = None,
) -> None:
    """Effect-receipt reconciler: record intents, probe providers, gate every retry."""
    # Given here, they hold for every command (serve's own flags win for serve).
    ctx.obj = {"log_level": log_level, "log_format": log_format}
    if log_level is not None or log_format is not None:
        from reconciler.infra.logs import configure

        configure((log_level or LogLevel.info).value, (log_format or LogFormat.text).value)


#: Exit codes: 0 all good, 1 an expectation failed (with --check), 2 the input is bad.
EXIT_FAILED, EXIT_BAD_INPUT = 1, 2


class Format(StrEnum):
    table = "table"
    json = "json"


def _row(result: ExpectResult) -> list[str]:
    got = result.got
    if result.retry_expected is not None:
        got += f" (retry {'allowed' if result.retry_allowed else 'refused'})"
    expected = result.expected
    if result.retry_expected is not None:
        expected += f" (retry {'allowed' if result.retry_expected else 'refused'})"
    missing = f" MISSING {','.join(result.missing_findings)}" if result.missing_findings else ""
    return [str(result.line), result.operation_id, expected, got,
            "pass" if result.passed else "FAIL", ", ".join(result.findings) + missing]


def _print_report(report: ReplayReport, fmt: Format) -> None:
    if fmt is Format.json:
        typer.echo(json.dumps({
            "results": [{
                "location": f"{r.path}:{r.line}", "operation_id": r.operation_id,
                "expected": r.expected, "got": r.got, "retry_expected": r.retry_expected,
                "retry_allowed": r.retry_allowed, "findings": list(r.findings),
                "missing_findings": list(r.missing_findings), "passed": r.passed,
            } for r in report.results],
            "errors": [{"path": e.path, "line": e.line, "error": e.reason}
                       for e in report.errors],
            "passed": report.passed, "failed": report.failed,
        }, indent=2))
        return
    # One table per file, titled with its path: a path beside every row would take half
    # the width.
    by_file: dict[str, list[list[str]]] = {}
    for result in report.results:
        by_file.setdefault(result.path, []).append(_row(result))
    for path, rows in by_file.items():
        typer.echo(terminal.table(["line", "operation", "expected", "got", "result",
                                   "findings"], rows, title=path))
    typer.echo(f"{report.passed} passed, {report.failed} failed")


@app.command("replay")
def replay_command(
    paths: Annotated[list[Path], typer.Argument(
        help="NDJSON fixture files, or directories to search for *.ndjson.")],
    check: Annotated[bool, typer.Option(
        "--check", help="Exit 1 if any expectation fails (2 on invalid input, always).")] = False,
    fmt: Annotated[Format, typer.Option(
        "--format", help="table: one row per expect; json: machine-readable.")] = Format.table,
) -> None:
    """Replay SPEC-format NDJSON fixtures on a virtual clock and compare each `expect`."""
    from reconciler.cli.fixtures import fixture_files
    from reconciler.cli.replay import replay

    missing = [p for p in paths if not p.exists()]
    if missing:
        typer.echo(f"error: no such file or directory: {', '.join(map(str, missing))}",
                   err=True)
        raise typer.Exit(EXIT_BAD_INPUT)
    files = fixture_files(paths)
    if not files:
        typer.echo(f"error: no *.ndjson files under {', '.join(map(str, paths))}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT)
    report = replay(files)
    _print_report(report, fmt)
    for error in report.errors:
        typer.echo(f"error: {error}", err=True)
    if report.errors:
        raise typer.Exit(EXIT_BAD_INPUT)
    if check and report.failed:
        raise typer.Exit(EXIT_FAILED)


@app.command("sandbox")
def sandbox_command(
    host: Annotated[str, typer.Option(help="Address to bind; loopback unless you mean it.")
                    ] = "127.0.0.1",
    port: Annotated[int | None, typer.Option(help="Port to listen on [default 8081].")] = None,
) -> None:
    """Serve the sandbox provider: fake Stripe, Postmark, Slack, GitHub and Twilio APIs in their
    real wire formats, with fault injection (see docs/sandbox-api.md). In-memory; stops with
    Ctrl+C."""
    from reconciler.sandbox import serve
    from reconciler.sandbox.server import DEFAULT_PORT

    port = DEFAULT_PORT if port is None else port
    typer.echo(f"sandbox provider on http://{host}:{port} (Stripe /pay, Postmark /mail, "
               "Slack /chat, GitHub /gh, Twilio /twilio; faults via the X-Sandbox-Fault header)")
    serve(host, port)


@app.command("demo")
def demo_command() -> None:
    """Play the product's origin cases end to end: a loopback sandbox provider with injected
    faults, a temporary ledger, real probes and the retry gate. Prints one row per scenario;
    exits 1 if any verdict differs from the expected one."""
    from reconciler.demo import closing_line, play_all, table_rows

    played = play_all(progress=lambda line: typer.echo(line, err=True))
    header, *rows = table_rows(played)
    typer.echo(terminal.table(header, rows))
    typer.echo(closing_line(played))
    if not all(p.as_expected for p in played):
        raise typer.Exit(EXIT_FAILED)


@app.command("chaos")
def chaos_command(
    runs: Annotated[int, typer.Option(min=1, help="How many runs to play.")] = 200,
    seed: Annotated[int, typer.Option(help="Seed of the kill schedule; the same seed kills "
                                           "at the same steps.")] = 0,
    db: Annotated[str | None, typer.Option(
        help="SQLAlchemy URL of the store the workers share [default: a SQLite file in a "
             "temporary directory, removed afterwards].")] = None,
    verbose: Annotated[bool, typer.Option(
        "--verbose", help="Also print every run that was not clean, with what went wrong.",
    )] = False,
    supervised: Annotated[bool, typer.Option(
        "--supervised", help="Nobody resumes: a `reconciler serve` process beside the killed "
        "workers finishes their runs with its supervisor once their 2 s leases lapse.",
    )] = False,
) -> None:
    """Kill agent workers with SIGKILL at every durable step and check the resumed runs.

    Each run plays the origin scenario against a loopback sandbox: read the channel
    (read_only), post a message and open a ticket (non_idempotent), charge a deposit
    (idempotent_write). Its first worker is killed at one step (cycling through all of them,
    the occurrence chosen by --seed); a second worker takes the run over and finishes it (with
    --supervised: the supervisor of a second `reconciler serve` process on the same store
    finds the orphaned run when its lease lapses, and finishes it). Then
    every effect at the sandbox is counted. Prints one line per kill point and a closing line;
    exits 1 if any effect was duplicated or any step lost. Escalated runs (waiting for a human
    because the evidence does not allow a retry) are counted, not failed."""
    from reconciler.chaos.runner import chaos

    report = chaos(runs, seed=seed, db_url=db, supervised=supervised,
                   progress=lambda line: typer.echo(line, err=True))
    if verbose:
        for result in report.results:
            if result.notes:
                typer.echo(f"{result.run_id} (killed at {result.kill.point} #{result.kill.nth}"
                           f"): {result.state}; " + "; ".join(result.notes))
    typer.echo("\n".join(report.lines()))
    if report.duplicates or report.lost:
        raise typer.Exit(EXIT_FAILED)


@app.command("check-config")
def check_config_command(
    file: Annotated[Path, typer.Argument(help="The TOML file `serve --config` would read.")],
    live: Annotated[bool, typer.Option(
        "--live", help="Also run each probe of --operation-id's provider once against its "
                       "recorded intent, and show what it read. Records nothing.")] = False,
    operation_id: Annotated[str | None, typer.Option(
        help="The recorded operation --live probes for.")] = None,
    db: Annotated[str | None, typer.Option(
        help="SQLAlchemy URL of the store holding --operation-id [env RECONCILER_DB]; the "
             "actions recorded in it are checked against the probes. Read only: never "
             "migrated, a missing SQLite file is not created.",
        envvar="RECONCILER_DB")] = None,
) -> None:
    """Check a configuration file: every provider and probe is built as `serve` would build
    it, and each mistake is listed with its file and line (unknown probe names, bad options,
    unset credential variables, a [service] table `serve` would refuse). A provider without
    probes is a warning. An action the agent's tools, an [mcp_proxy] table or the --db store
    show that no probe covers is an error when it has side effects (SPEC section 3). Exit 0:
    valid (warnings allowed); 1: errors (or, with --live, a probe that could not read); 2: the
    check could not run (file unreadable, store or operation missing)."""
    from reconciler.cli.configcheck import (
        EXIT_CANNOT_CHECK,
        EXIT_ERRORS,
        CannotCheckError,
        check_config,
        live_check,
        open_for_reading,
    )

    if live and not (operation_id and db):
        typer.echo("--live needs --operation-id and --db (or RECONCILER_DB)", err=True)
        raise typer.Exit(EXIT_CANNOT_CHECK)
    store = None
    try:
        store = open_for_reading(db) if db else None
        report = check_config(file, store=store)
        for problem in report.problems:
            typer.echo(str(problem))
        typer.echo(report.summary())
        if not live or report.errors:
            raise typer.Exit(EXIT_ERRORS if report.errors else 0)
        assert operation_id is not None and store is not None
        readings = live_check(report, store, operation_id)
    except CannotCheckError as exc:
        typer.echo(f"cannot check: {exc}", err=True)
        raise typer.Exit(EXIT_CANNOT_CHECK) from None
    finally:
        if store is not None:
            store.close()
    rows = [
        [r.probe, r.authority, ", ".join(
            ref + (f" ({h})" if h else "") for ref, h in zip(r.refs, r.hashes, strict=True))
         or "-", r.error or "-"] for r in readings]
    typer.echo(terminal.table(["probe", "authority", "matches", "error"], rows))
    if not readings:
        typer.echo(f"operation {operation_id!r}: its provider has no probe to run")
    if any(r.authority in ("unavailable", "raised") for r in readings):
        raise typer.Exit(EXIT_ERRORS)


@app.command("run-key")
def run_key_command() -> None:
    """Print a new key for RECONCILER_RUN_KEY. Agent runs keep their conversation sealed in
    the store under it; every worker and sidecar sharing a store needs the same key. To rotate,
    set "NEW,OLD" (the first seals, all open) until no run sealed with OLD is needed."""
    from reconciler.store.sealing import new_key

    typer.echo(new_key())


@app.command("prune")
def prune_command(
    settled_before: Annotated[str, typer.Option(
        "--settled-before", help="remove operations settled longer ago than this: 30d, 12h, "
        "90m, 45s, 2w")],
    export: Annotated[Path | None, typer.Option(
        help="write what is removed to this file first, as SPEC NDJSON (replayable with "
             "`reconciler replay`); appended to if it exists")] = None,
    db: Annotated[str | None, typer.Option(
        help="SQLAlchemy URL of the receipt store [env RECONCILER_DB; default "
             "sqlite:///reconciler.db]")] = None,
) -> None:
    """Remove settled operations (verified_applied, verified_not_applied) decided before the
    cut-off, in small batches; never undecided, escalated or human-queue operations, nor any
    inside its provider's key retention window."""
    import os
    from datetime import UTC, datetime

    from reconciler.core.errors import StoreUrlError
    from reconciler.ledger import Ledger
    from reconciler.ledger.prune import DurationError, parse_duration, prune
    from reconciler.store.schema import DEFAULT_URL, open_store

    try:
        window = parse_duration(settled_before)
    except DurationError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    try:
        store = open_store(db or os.environ.get("RECONCILER_DB") or DEFAULT_URL)
    except StoreUrlError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    ledger = Ledger(store)
    cut_off = datetime.now(UTC) - window
    if export is None:
        removed = prune(ledger, cut_off)
    else:
        with export.open("a", encoding="utf-8") as out:
            removed = prune(ledger, cut_off, out)
    typer.echo(f"removed {removed} settled operation(s) decided before {cut_off:%Y-%m-%d %H:%M}"
               + (f"; written to {export}" if export else ""))


@app.command("migrate")
def migrate_command(
    db: Annotated[str | None, typer.Option(
        help="SQLAlchemy URL of the receipt store [env RECONCILER_DB; default "
             "sqlite:///reconciler.db]")] = None,
) -> None:
    """Bring the receipt store's schema to the newest migration and print its revision. Run
    it once before starting replicas (each `serve` also migrates on start, waiting for the
    others on PostgreSQL, so it is a convenience, never required). Exit 0 when the store is at
    the newest revision; 2 when it cannot be reached or migrated."""
    import os

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from reconciler.core.errors import ReconcilerError
    from reconciler.store.schema import DEFAULT_URL, migrate

    url = db or os.environ.get("RECONCILER_DB") or DEFAULT_URL
    try:
        shown = make_url(url).render_as_string(hide_password=True)
        revision = migrate(url)
    except (ReconcilerError, SQLAlchemyError, OSError) as exc:
        typer.echo(f"error: cannot migrate: {exc}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    typer.echo(f"{shown}: at revision {revision}")


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


@app.command("serve", cls=PolicyHelp)
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


@app.command("health")
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


credential_app = typer.Typer(help="Named credentials with roles (worker, operator, evidence, "
                             "admin) for `serve`.", no_args_is_help=True)
app.add_typer(credential_app, name="credential")


@credential_app.command("add")
def credential_add_command(
    name: Annotated[str, typer.Argument(help="The credential's name: the actor recorded for "
                                             "its decisions.")],
    role: Annotated[list[str], typer.Option(
        metavar="ROLE", help="worker, operator, evidence or admin; repeat for several.")],
    file: Annotated[Path, typer.Option(
        envvar="RECONCILER_CREDENTIALS_FILE",
        help="The credentials file serve reads (created 0600; hashes only).")],
) -> None:
    """Add (or replace) a credential in the credentials file and print its token once: the
    file keeps only the token's SHA-256, so it cannot be shown again."""
    from reconciler.service.credentials import CredentialError, add_to_file

    try:
        token = add_to_file(file, name, role)
    except CredentialError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    typer.echo(token)


@credential_app.command("token")
def credential_token_command() -> None:
    """Print a fresh token (for RECONCILER_TOKEN or RECONCILER_CREDENTIAL_<NAME>)."""
    from reconciler.service.credentials import new_token

    typer.echo(new_token())


@app.command("mcp-proxy", context_settings={"allow_interspersed_args": False})
def mcp_proxy_command(
    upstream: Annotated[list[str] | None, typer.Argument(
        help="The upstream MCP server's command and arguments (after --), for stdio.")] = None,
    upstream_url: Annotated[str | None, typer.Option(
        help="The upstream's streamable HTTP URL, instead of a command.")] = None,
    config: Annotated[Path | None, typer.Option(
        help="TOML: [mcp_proxy] settings and, with --db, [providers.*] (docs/integrations/"
             "mcp.md).")] = None,
    sidecar: Annotated[str | None, typer.Option(
        help="The sidecar's URL [default $RECONCILER_URL or http://127.0.0.1:8765].")] = None,
    db: Annotated[str | None, typer.Option(
        help="An embedded store's SQLAlchemy URL, instead of a sidecar.")] = None,
    provider: Annotated[str | None, typer.Option(
        help="The provider the upstream's effects are at (overrides the file's).")] = None,
    pass_env: Annotated[list[str] | None, typer.Option(
        "--pass-env", metavar="NAME",
        help="Start the upstream with only the variables named (repeatable; with the file's "
             "pass_env) [default: this process's, but RECONCILER_*].")] = None,
) -> None:
    """Serve, on stdio, an MCP server that fronts an upstream one: its tools re-exported,
    every tools/call recorded, classified and gated by the reconciler."""
    import anyio

    from reconciler.core.errors import ReconcilerError
    from reconciler.mcpproxy.serve import load_settings, open_backend, serve_stdio, upstream_target

    if (upstream_url is None) == (not upstream):
        raise typer.BadParameter("give the upstream as -- COMMAND [ARGS...] or --upstream-url")
    if sidecar is not None and db is not None:
        raise typer.BadParameter("--sidecar and --db are alternatives; give one")
    try:
        settings, rest = load_settings(config, provider, pass_env or [])
        target = upstream_target(upstream or [], upstream_url, settings)
        backend = open_backend(sidecar, db, rest, str(config))
    except ReconcilerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    anyio.run(serve_stdio, target, settings, backend)
