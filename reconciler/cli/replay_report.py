"""`reconciler replay`'s report: a table per fixture file, or JSON."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import TYPE_CHECKING

import typer

from reconciler.cli import terminal

if TYPE_CHECKING:
    from reconciler.cli.replay import ExpectResult, ReplayReport


class Format(StrEnum):
    table = "table"
    json = "json"


def row(result: ExpectResult) -> list[str]:
    got = result.got
    if result.retry_expected is not None:
        got += f" (retry {'allowed' if result.retry_allowed else 'refused'})"
    expected = result.expected
    if result.retry_expected is not None:
        expected += f" (retry {'allowed' if result.retry_expected else 'refused'})"
    missing = f" MISSING {','.join(result.missing_findings)}" if result.missing_findings else ""
    return [str(result.line), result.operation_id, expected, got,
            "pass" if result.passed else "FAIL", ", ".join(result.findings) + missing]


def print_report(report: ReplayReport, fmt: Format) -> None:
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
        by_file.setdefault(result.path, []).append(row(result))
    for path, rows in by_file.items():
        typer.echo(terminal.table(["line", "operation", "expected", "got", "result",
                                   "findings"], rows, title=path))
    typer.echo(f"{report.passed} passed, {report.failed} failed")
