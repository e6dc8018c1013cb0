"""`reconciler replay`: every shipped fixture passes, and bad input is a clear error with file and
line, exit code 2 and no traceback."""

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.cli.fixtures import KNOWN_TYPES, AttemptLine, IntentLine, ProbeLine, parse_line
from reconciler.cli.replay import ReplayReport, replay, replay_file

FIXTURES = Path(__file__).parent.parent / "ndjson_fixtures"
FILES = sorted(FIXTURES.glob("*.ndjson"))
runner = CliRunner()

INTENT = ('{"type":"intent","operation_id":"op","request_hash":"sha256:00","idempotency_key":"k",'
          '"provider":"p","action":"a","effect":"read_only","at":"2026-01-01T00:00:00Z"}')


def test_the_shipped_fixtures_cover_the_origin_cases_and_twenty_more() -> None:
    assert len([f for f in FILES if f.name.startswith("origin_")]) == 6
    assert len(FILES) >= 26


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_fixture(path: Path) -> None:
    report = ReplayReport()
    replay_file(path, report)
    assert not report.errors, report.errors
    assert report.results, f"{path.name} has no expect line"
    failures = [r for r in report.results if not r.passed]
    assert not failures, failures


def _write(tmp_path: Path, content: bytes | str, name: str = "case.ndjson") -> Path:
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


BAD_LINES = {
    "malformed_json": ('{"type": "intent",', "malformed JSON"),
    "unknown_type": ('{"type": "teleport"}', "unknown type"),
    "missing_field": ('{"type": "intent", "operation_id": "x"}', "field 'request_hash'"),
    "wrong_type": (INTENT.replace('"read_only"', '7'), "field 'effect'"),
    "string_for_int": (INTENT + '\n{"type":"attempt","operation_id":"op","attempt":"1",'
                       '"request_hash":"h","at":"2026-01-01T00:00:01Z","outcome":"timeout"}',
                       "field 'attempt'"),
    "naive_time": (INTENT.replace("00:00:00Z", "00:00:00"), "timezone"),
    "not_an_object": ("[1, 2, 3]", "JSON object"),
    "no_time_yet": ('{"type":"expect","operation_id":"op","verdict":"indeterminate"}',
                    "no time yet"),
    "unknown_operation": ('{"type":"probe","operation_id":"ghost","at":"2026-01-01T00:00:00Z",'
                          '"probe":"p","authority":"weak"}', "no intent is recorded"),
}


@pytest.mark.parametrize("name", BAD_LINES)
def test_bad_line_names_file_and_line_and_exits_2(tmp_path: Path, name: str) -> None:
    content, message = BAD_LINES[name]
    path = _write(tmp_path, content)
    line = content.count("\n") + 1
    result = runner.invoke(app, ["replay", "--check", str(path)])
    assert result.exit_code == 2
    assert f"{path}:{line}:" in result.stderr and message in result.stderr
    assert "Traceback" not in result.output + result.stderr


def test_non_utf8_is_an_error_with_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, INTENT.encode() + b'\n{"type": "\xff\xfe"}\n')
    result = runner.invoke(app, ["replay", str(path)])
    assert result.exit_code == 2 and f"{path}:2: not UTF-8" in result.stderr


def test_a_ten_megabyte_line_is_refused_without_a_traceback(tmp_path: Path) -> None:
    path = _write(tmp_path, INTENT + '\n{"type":"expect","pad":"' + "x" * 10_000_000 + '"}\n')
    proc = subprocess.run([sys.executable, "-m", "reconciler", "replay", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"{path}:2: line longer than" in proc.stderr and "Traceback" not in proc.stderr


def test_nothing_after_a_bad_line_is_evaluated(tmp_path: Path) -> None:
    expect = '{"type":"expect","operation_id":"op","verdict":"indeterminate"}'
    path = _write(tmp_path, "\n".join([INTENT, expect, "{oops", expect]))
    report = replay([path])
    assert [r.line for r in report.results] == [2]
    assert [(e.line, e.path) for e in report.errors] == [(3, str(path))]


def test_a_failed_expectation_exits_1_with_check_and_0_without(tmp_path: Path) -> None:
    path = _write(tmp_path, INTENT + '\n{"type":"expect","operation_id":"op",'
                  '"verdict":"verified_applied"}')
    assert runner.invoke(app, ["replay", str(path)]).exit_code == 0
    result = runner.invoke(app, ["replay", "--check", str(path)])
    assert result.exit_code == 1 and result.stdout.strip().endswith("0 passed, 1 failed")


def test_missing_findings_fail_the_expectation(tmp_path: Path) -> None:
    path = _write(tmp_path, INTENT + '\n{"type":"expect","operation_id":"op",'
                  '"verdict":"indeterminate","findings":["duplicate_effect"]}')
    result = runner.invoke(app, ["replay", "--check", str(path)])
    # The table wraps its cells to the terminal: read the words, not the layout.
    assert result.exit_code == 1 and "MISSING duplicate_effect" in " ".join(result.stdout.split())


def test_json_format_reports_rows_and_totals(tmp_path: Path) -> None:
    path = _write(tmp_path, INTENT + '\n{"type":"expect","operation_id":"op",'
                  '"verdict":"indeterminate","retry_allowed":false}')
    result = runner.invoke(app, ["replay", "--format", "json", str(path)])
    data = json.loads(result.stdout)
    assert (data["passed"], data["failed"], data["errors"]) == (1, 0, [])
    assert data["results"][0]["got"] == "indeterminate"


def test_directories_are_walked_for_ndjson(tmp_path: Path) -> None:
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    _write(nested, INTENT + '\n{"type":"expect","operation_id":"op","verdict":"indeterminate"}')
    _write(tmp_path, "not a fixture", name="notes.txt")
    result = runner.invoke(app, ["replay", "--check", str(tmp_path)])
    assert result.exit_code == 0 and "1 passed, 0 failed" in result.stdout


def test_a_missing_path_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["replay", str(tmp_path / "nope.ndjson")])
    assert result.exit_code == 2 and "no such file" in result.stderr


FIELDS = ["operation_id", "request_hash", "idempotency_key", "provider", "action", "effect",
          "at", "attempt", "outcome", "status", "receipt", "provider_ref", "source", "probe",
          "authority", "matches", "error", "verdict", "actor", "note", "findings", "name",
          "max_attempts", "visibility_lag_s", "retry_allowed"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False)
    | st.sampled_from(["op", "2026-01-01T00:00:00Z", "timeout", "authoritative", "read_only",
                       "verified_applied", "sha256:00", ""]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["provider_ref", "request_hash"]), inner, max_size=2),
    max_leaves=6)
events = st.fixed_dictionaries(
    {"type": st.sampled_from([*KNOWN_TYPES, "bogus"])},
    optional={f: json_values for f in FIELDS})
lines = st.lists(st.one_of(events.map(json.dumps).map(str.encode), st.binary(max_size=40)),
                 max_size=8)


@pytest.mark.slow
@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines)
def test_no_input_escapes_as_anything_but_a_line_error(tmp_path: Path, content: list[bytes]
                                                        ) -> None:
    # A valid intent first, so that later lines can reach the ledger and the engine.
    path = _write(tmp_path, b"\n".join([INTENT.encode(), *content]), name="fuzz.ndjson")
    report = replay([path])  # raises nothing: every problem is a FixtureError in the report
    assert all(e.path == str(path) and e.line >= 0 for e in report.errors)


def test_dispatch_rounds_up_observation_rounds_down() -> None:
    """Digits past the microsecond are cut: a dispatch's round it up, an observation's down."""
    def at_of(kind: str, at: str) -> datetime:
        line = {"type": kind, "operation_id": "op", "attempt": 1, "request_hash": "sha256:00",
                "outcome": "timeout", "probe": "p", "authority": "weak", "provider": "p",
                "action": "a", "effect": "read_only", "at": at}
        event = parse_line(json.dumps(line).encode(), "f.ndjson", 1)
        assert isinstance(event, AttemptLine | IntentLine | ProbeLine)
        return event.at

    base = datetime(2026, 1, 1, tzinfo=UTC)
    for kind in ("attempt", "intent"):
        assert at_of(kind, "2026-01-01T00:00:00.0000009Z") == base + timedelta(microseconds=1)
        assert at_of(kind, "2026-01-01T00:00:00.1234560Z") == base + timedelta(
            microseconds=123456)
    assert at_of("probe", "2026-01-01T00:00:00.0000009Z") == base


def test_a_dispatch_too_close_to_year_10000_to_round_up_is_a_line_error(tmp_path: Path) -> None:
    path = tmp_path / "late.ndjson"
    path.write_text(INTENT.replace("2026-01-01T00:00:00Z", "9999-12-31T23:59:59.9999999Z"))
    report = replay([path])
    assert [e.line for e in report.errors] == [1] and "rounded up" in str(report.errors[0])


@pytest.mark.parametrize(("columns", "widest"), [("300", 100), ("72", 72)])
def test_the_table_fits_the_terminal_and_never_passes_100_columns(
        monkeypatch: pytest.MonkeyPatch, columns: str, widest: int) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.chdir(FIXTURES.parent)
    result = runner.invoke(app, ["replay", "--check", FIXTURES.name])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= widest
    assert "ndjson_fixtures/origin_01_lost_response_receipt.ndjson" in lines  # a title, whole
