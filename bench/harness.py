"""What every benchmark shares: the run's context, latency percentiles, ratios against a
target, and the result a benchmark hands back to be printed, plotted and written down."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal


class BenchError(RuntimeError):
    """The system under test did not behave as the measured scenario needs; the message says
    what was expected, so the run stops instead of reporting a figure of something else."""


def progress(message: str) -> None:
    """A line on stderr: long steps say what they are doing, stdout keeps the figures."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


@contextmanager
def step(message: str) -> Iterator[None]:
    """Announce a long step and, when it ends, how long it took."""
    progress(f"{message} ...")
    started = time.perf_counter()
    yield
    progress(f"{message}: {time.perf_counter() - started:.1f} s")


#: How big a run is: `full` (the sizes the targets are about), `quick` (about a minute in
#: all), `tiny` (the smoke test: a twentieth of quick's sizes, a quarter of its durations).
Mode = Literal["full", "quick", "tiny"]


@dataclass(frozen=True, slots=True)
class Context:
    """What a benchmark is given: the size of the run, a scratch directory on the disk under
    test (baselines and the product share it), PostgreSQL's URL, and where seeded stores are
    kept between runs (bench.seeds; None: every store seeded afresh)."""

    mode: Mode
    workdir: Path
    pg_url: str
    seed_cache: Path | None = None

    @property
    def quick(self) -> bool:
        return self.mode != "full"

    def size(self, quick: int, full: int) -> int:
        if self.mode == "tiny":
            return max(1, quick // 20)
        return quick if self.quick else full

    def seconds(self, quick: float, full: float) -> float:
        if self.mode == "tiny":
            return quick / 4
        return quick if self.quick else full


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Latency percentiles in milliseconds, of `count` requests or calls."""

    count: int
    p50: float
    p90: float
    p99: float
    p999: float
    max: float

    @classmethod
    def of(cls, samples_s: Sequence[float]) -> Percentiles:
        if not samples_s:
            raise BenchError("no latency samples: nothing was measured")
        ordered = sorted(samples_s)

        def rank(p: float) -> float:
            # Nearest rank: a value that was actually observed.
            return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] * 1000

        return cls(len(ordered), rank(50), rank(90), rank(99), rank(99.9), ordered[-1] * 1000)

    def render(self) -> str:
        return (f"p50 {self.p50:.2f} ms, p90 {self.p90:.2f} ms, p99 {self.p99:.2f} ms, "
                f"p99.9 {self.p999:.2f} ms (n={self.count:,})")


@dataclass(frozen=True, slots=True)
class Ratio:
    """A measured ratio (or, with `unit=""`, a count) and its target: `value >= target` or,
    when lower is better, `value <= target`."""

    name: str
    value: float
    target: float
    higher_is_better: bool
    unit: str = "x"

    @property
    def met(self) -> bool:
        if self.higher_is_better:
            return self.value >= self.target
        return self.value <= self.target

    def render(self) -> str:
        sign = ">=" if self.higher_is_better else "<="
        verdict = "met" if self.met else "MISSED"
        value = f"{self.value:.2f}{self.unit}" if self.unit else f"{self.value:g}"
        return f"{self.name}: {value} (target {sign} {self.target:g}{self.unit}) {verdict}"


@dataclass(slots=True)
class Outcome:
    """One benchmark's result: its measured figures (lines of text), its ratios, and the
    latency percentiles it measured, by series label, for the plot."""

    name: str
    title: str
    figures: list[str] = field(default_factory=list)
    ratios: list[Ratio] = field(default_factory=list)
    latencies: dict[str, Percentiles] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def figure(self, line: str) -> None:
        self.figures.append(line)
        progress(f"{self.name}: {line}")

    def ratio(self, name: str, value: float, target: float, *, higher_is_better: bool,
              unit: str = "x") -> Ratio:
        ratio = Ratio(name, value, target, higher_is_better, unit)
        self.ratios.append(ratio)
        return ratio

    def render(self) -> str:
        lines = [f"== {self.name}: {self.title}"]
        lines += [f"   {line}" for line in self.figures]
        lines += [f"   ratio {r.render()}" for r in self.ratios]
        lines += [f"   note: {note}" for note in self.notes]
        return "\n".join(lines)


#: A benchmark: given the run's context, measure and hand back the outcome.
Benchmark = Callable[[Context], Outcome]


def rate(count: float, seconds: float) -> float:
    if seconds <= 0:
        raise BenchError("a measurement took no time: the clock or the scenario is wrong")
    return count / seconds
