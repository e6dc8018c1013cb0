"""The command line's start: CPU time of `reconciler --help` and `reconciler --version`, each
run as a user runs it (the installed `reconciler` script, a new process each time), against
the interpreter starting and doing nothing (`python -c pass`) in the same rounds.

CPU (user + system) is what the process and its children used, read from the kernel's
accounting of reaped children (`getrusage(RUSAGE_CHILDREN)`), so load from elsewhere on the
machine lengthens the wall time but barely the figure. The three commands take turns, round
after round, and each figure is the best and the median of its rounds; the target (issue 34:
at most 0.3 s) is on the median.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from bench.harness import BenchError, Context, Outcome

NAME = "cli"
#: CPU seconds `--help` and `--version` may take, at most (issue 34).
TARGET_S = 0.3


def reconciler_command() -> list[str]:
    """The installed `reconciler` script beside this interpreter, else `python -m reconciler`
    (the same program, without the script's few lines)."""
    script = Path(sys.executable).parent / "reconciler"
    return [str(script)] if script.exists() else [sys.executable, "-m", "reconciler"]


def cpu_of(command: list[str]) -> float:
    """CPU seconds (user + system) the command took, run to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, capture_output=True, timeout=120, check=False,
                          env={**os.environ, "COLUMNS": "100"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise BenchError(f"{' '.join(command)} exited {done.returncode}: "
                         f"{done.stderr.decode(errors='replace')[-500:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run(ctx: Context) -> Outcome:
    rounds = ctx.size(20, 40)
    cli = reconciler_command()
    commands = {"python -c pass": [sys.executable, "-c", "pass"],
                "reconciler --help": [*cli, "--help"],
                "reconciler --version": [*cli, "--version"]}
    out = Outcome(NAME, f"CPU of `reconciler --help` and `--version`, {rounds} runs each, "
                        "against `python -c pass`")
    if ctx.quick:
        out.notes.append(f"{ctx.mode} mode: {rounds} runs each (the full run: 40)")
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, command in commands.items():
            samples[name].append(cpu_of(command))
    baseline = statistics.median(samples["python -c pass"])
    for name, taken in samples.items():
        median = statistics.median(taken)
        out.figure(f"{name}: best {min(taken) * 1000:.0f} ms, median {median * 1000:.0f} ms "
                   f"of CPU ({median - baseline:+.3f} s over the bare interpreter)")
    for name in ("reconciler --help", "reconciler --version"):
        out.ratio(f"{name} CPU, median", statistics.median(samples[name]), TARGET_S,
                  higher_is_better=False, unit=" s")
    return out
