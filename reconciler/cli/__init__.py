"""The `reconciler` command line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ClassVar

import typer

from reconciler.cli import terminal
from reconciler.cli.command_tree import Root
from reconciler.cli.credential import credential_app
from reconciler.cli.options import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    LogFormat,
    LogFormatOption,
    LogLevel,
    LogLevelOption,
)
from reconciler.cli.replay_report import Format, print_report
from reconciler.cli.serve import PolicyHelp, health_command, serve_command

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
    print_report(report, fmt)
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


app.command("serve", cls=PolicyHelp)(serve_command)
app.command("health")(health_command)
app.add_typer(credential_app, name="credential")


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
