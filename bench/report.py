"""Writing a run down: bench/RESULTS.md (environment, every ratio, every figure) and a plot of
the latency percentiles each benchmark measured (matplotlib, an optional dependency: without it
the run still prints everything and the results say the plot is missing)."""

from __future__ import annotations

from pathlib import Path

from bench.harness import Outcome, progress

PERCENTILES = (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p99.9", "p999"))


def plot(outcomes: list[Outcome], path: Path) -> Path | None:
    """One panel per benchmark with latencies: each series' percentiles as markers on a line
    from p50 to p99.9, on a log scale. None (and a note on stderr) when matplotlib is not
    installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    except ImportError:
        progress("matplotlib is not installed (pip install '.[bench]'): no plot")
        return None
    panels = [o for o in outcomes if o.latencies]
    if not panels:
        return None
    # Each panel as tall as its series need, so that every label stays readable.
    heights = [0.9 + 0.4 * len(o.latencies) for o in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, sum(heights) + 0.8), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    styles = (("#4c72b0", "o"), ("#55a868", "s"), ("#dd8452", "D"), ("#c44e52", "^"))
    for ax, outcome in zip(axes[:, 0], panels, strict=True):
        labels = list(outcome.latencies)
        for row, label in enumerate(labels):
            measured = outcome.latencies[label]
            values = [getattr(measured, field) for _, field in PERCENTILES]
            ax.plot([min(values), max(values)], [row, row], color="#aaaaaa", lw=1.2, zorder=1)
            for (name, _), (colour, marker), value in zip(PERCENTILES, styles, values,
                                                          strict=True):
                ax.scatter(value, row, color=colour, marker=marker, s=36, zorder=2,
                           label=name if row == 0 else None)
        lows = [outcome.latencies[label].p50 for label in labels]
        highs = [outcome.latencies[label].p999 for label in labels]
        ax.set_xscale("log")
        ax.set_xlim(min(lows) / 1.5, max(highs) * 1.5)
        # Ticks at 1, 2 and 5 of each decade: a panel spanning less than one still has labels.
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(_duration))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.set_title(f"{outcome.name}: {outcome.title}", fontsize=9, loc="left")
        ax.grid(axis="x", which="both", alpha=0.3)
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper right", ncols=len(PERCENTILES), fontsize=8)
    fig.suptitle("Latency percentiles per benchmark (log scale)", fontsize=10, x=0.01,
                 ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _duration(ms: float, _position: object = None) -> str:
    return f"{ms:g} ms" if ms < 1000 else f"{ms / 1000:g} s"


def _ratio_table(outcomes: list[Outcome]) -> list[str]:
    lines = ["| benchmark | ratio | measured | target | |", "|---|---|---|---|---|"]
    for outcome in outcomes:
        for r in outcome.ratios:
            sign = ">=" if r.higher_is_better else "<="
            value = f"{r.value:.2f}{r.unit}" if r.unit else f"{r.value:g}"
            lines.append(f"| {outcome.name} | {r.name} | {value} | {sign} {r.target:g}{r.unit} | "
                         f"{'met' if r.met else '**missed**'} |")
    return lines


def write_results(path: Path, env: dict[str, str], outcomes: list[Outcome], failed: list[str],
                  elapsed_s: float, quick: bool, image: Path | None) -> None:
    command = "python -m bench --write" + (" --quick" if quick else "")
    lines = ["# Benchmark results", "",
             f"Written by `{command}` in {elapsed_s / 60:.1f} minutes. Every baseline was "
             "measured in the same run, on the same machine. What each benchmark measures, and "
             "what the numbers say, is in [README.md](README.md).", "",
             "| | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in env.items()]
    lines += ["", "## Every ratio", "", *_ratio_table(outcomes)]
    if failed:
        lines += ["", f"**Failed to run:** {', '.join(failed)} (the run's output has the error)."]
    lines += ["", "## Latency percentiles", ""]
    lines.append(f"![latency percentiles per benchmark]({image.name})" if image else
                 "No plot: matplotlib was not installed (`pip install '.[bench]'`).")
    for outcome in outcomes:
        lines += ["", f"## {outcome.name}: {outcome.title}", ""]
        lines += [f"- {figure}" for figure in outcome.figures]
        lines += [f"- ratio: {r.render()}" for r in outcome.ratios]
        lines += [f"- note: {note}" for note in outcome.notes]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
