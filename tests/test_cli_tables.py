"""Tables the command line prints (reconciler/cli/terminal.py): never wider than the width, and a
name (a demo scenario's, an operation's) is not cut mid-word while the width can hold the
longest word of every column side by side."""

from __future__ import annotations

from reconciler.cli.terminal import column_widths, table
from reconciler.demo import SCENARIOS

HEADER = ["scenario", "fault, wire", "verdicts", "evidence", ""]


def demo_like_rows() -> list[list[str]]:
    return [[f"{s.name}\n{s.provider}", "fail_before_commit\nHTTP 503, timeout",
             "verified_not_applied\n> retry granted\n> verified_applied",
             "1 search match + 1 list match, history: nothing (authoritative)", "ok"]
            for s in SCENARIOS]


def test_every_demo_scenario_name_stays_whole_in_100_columns() -> None:
    lines = table(HEADER, demo_like_rows(), max_width=100).splitlines()
    assert max(map(len, lines)) <= 100
    for scenario in SCENARIOS:
        assert any(line.split()[:1] == [scenario.name] for line in lines), scenario.name


def test_the_widest_columns_are_narrowed_first_never_below_their_longest_word() -> None:
    widths = column_widths(["name", "prose"], [["a_long_snake_case_name", "word " * 30]], 40)
    assert widths == [22, 16]


def test_a_table_that_fits_keeps_its_natural_widths() -> None:
    assert column_widths(["a", "b"], [["x", "y"]], 100) is None


def test_a_word_wider_than_the_table_is_folded_and_nothing_is_lost() -> None:
    lines = table(["path", "n"], [["x" * 150, "7"]], max_width=100).splitlines()
    assert max(map(len, lines)) <= 100
    assert "".join(lines).count("x") == 150 and "7" in "".join(lines)
