"""The `reconciler` command line."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from reconciler.fixtures import fixture_files
from reconciler.ops import ops
from reconciler.replay import ExpectResult, ReplayReport, replay
from reconciler.schedule import DEFAULT_POLICY

app = typer.Typer(
    help="Effect-receipt reconciler: record intents, probe providers, gate every retry.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)

app.add_typer(ops, name="ops")


@app.callback()
def _root() -> None:
    """Effect-receipt reconciler: record intents, probe providers, gate every retry."""


#: Exit codes: 0 all good, 1 an expectation failed (with --check), 2 the input is bad.
EXIT_FAILED, EXIT_BAD_INPUT = 1, 2


class Format(StrEnum):
    table = "table"
    json = "json"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                     .rstrip() for row in rows)


def _row(result: ExpectResult) -> list[str]:
    got = result.got
    if result.retry_expected is not None:
        got += f" (retry {'allowed' if result.retry_allowed else 'refused'})"
    expected = result.expected
    if result.retry_expected is not None:
        expected += f" (retry {'allowed' if result.retry_expected else 'refused'})"
    missing = f" MISSING {','.join(result.missing_findings)}" if result.missing_findings else ""
    return [f"{result.path}:{result.line}", result.operation_id, expected, got,
            ",".join(result.findings) + missing, "pass" if result.passed else "FAIL"]


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
    if report.results:
        header = ["where", "operation", "expected", "got", "findings", "result"]
        typer.echo(_table([header] + [_row(r) for r in report.results]))
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
    """Serve the sandbox provider: fake payments, email, chat and issue APIs with fault
    injection (see docs/sandbox-api.md). In-memory; stops with Ctrl+C."""
    from reconciler.sandbox import serve
    from reconciler.sandbox.server import DEFAULT_PORT

    port = DEFAULT_PORT if port is None else port
    typer.echo(f"sandbox provider on http://{host}:{port} (payments /pay, email /mail, "
               "chat /chat, issues /gh; faults via the X-Sandbox-Fault header)")
    serve(host, port)


@app.command("demo")
def demo_command() -> None:
    """Play the product's origin cases end to end: a loopback sandbox provider with injected
    faults, a temporary ledger, real probes and the retry gate. Prints one row per scenario;
    exits 1 if any verdict differs from the expected one."""
    from reconciler.demo import closing_line, play_all, table_rows

    played = play_all(progress=lambda line: typer.echo(line, err=True))
    typer.echo(_table(table_rows(played)))
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
) -> None:
    """Kill agent workers with SIGKILL at every durable step and check the resumed runs.

    Each run plays the origin scenario against a loopback sandbox: read the channel
    (read_only), post a message and open a ticket (non_idempotent), charge a deposit
    (idempotent_write). Its first worker is killed at one step (cycling through all of them,
    the occurrence chosen by --seed); a second worker takes the run over and finishes it. Then
    every effect at the sandbox is counted. Prints one line per kill point and a closing line;
    exits 1 if any effect was duplicated or any step lost. Escalated runs (waiting for a human
    because the evidence does not allow a retry) are counted, not failed."""
    from reconciler.chaos.runner import chaos

    report = chaos(runs, seed=seed, db_url=db, progress=lambda line: typer.echo(line, err=True))
    if verbose:
        for result in report.results:
            if result.notes:
                typer.echo(f"{result.run_id} (killed at {result.kill.point} #{result.kill.nth}"
                           f"): {result.state}; " + "; ".join(result.notes))
    typer.echo("\n".join(report.lines()))
    if report.duplicates or report.lost:
        raise typer.Exit(EXIT_FAILED)


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

    from reconciler.ledger import Ledger
    from reconciler.prune import DurationError, parse_duration, prune
    from reconciler.store.schema import DEFAULT_URL, open_store

    try:
        window = parse_duration(settled_before)
    except DurationError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    store = open_store(db or os.environ.get("RECONCILER_DB") or DEFAULT_URL)
    ledger = Ledger(store)
    cut_off = datetime.now(UTC) - window
    if export is None:
        removed = prune(ledger, cut_off)
    else:
        with export.open("a", encoding="utf-8") as out:
            removed = prune(ledger, cut_off, out)
    typer.echo(f"removed {removed} settled operation(s) decided before {cut_off:%Y-%m-%d %H:%M}"
               + (f"; written to {export}" if export else ""))


@app.command("serve")
def serve_command(
    db: Annotated[str | None, typer.Option(
        help="SQLAlchemy URL of the receipt store [env RECONCILER_DB; default "
             "sqlite:///reconciler.db]. PostgreSQL: postgresql+psycopg://user@host/db")] = None,
    host: Annotated[str | None, typer.Option(
        help="Address to bind [env RECONCILER_HOST; default 127.0.0.1]. Any other address "
             "needs a bearer token in RECONCILER_TOKEN.")] = None,
    port: Annotated[int | None, typer.Option(
        help="Port [env RECONCILER_PORT; default 8765; 0 picks a free one].")] = None,
    config: Annotated[Path | None, typer.Option(
        help="TOML file: a [service] table for these settings, [providers.*] for provider "
             "contracts and probes [env RECONCILER_CONFIG].")] = None,
    sweep_interval_s: Annotated[float | None, typer.Option(
        help="Seconds between reconcile sweeps; 0 probes only on demand [default 5].")] = None,
    probe_concurrency: Annotated[int | None, typer.Option(
        help=f"Operations probed at once [default {DEFAULT_POLICY.concurrency}].")] = None,
    probe_timeout_s: Annotated[float | None, typer.Option(
        help="A probe call still running after this is recorded unavailable "
             f"[default {DEFAULT_POLICY.probe_timeout_s:g}].")
    ] = None,
    probe_budget: Annotated[int | None, typer.Option(
        help="Probe rounds per operation before it is escalated "
             f"[default {DEFAULT_POLICY.probe_budget}].")] = None,
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
          "shutdown_timeout_s": shutdown_timeout_s, "agent": agent})
