"""Loop guards and budgets: pure checks the run loop makes before each turn and tool call.

    turn 1 … turn max_turns-1 │ turn max_turns: no tools offered, a final notice asks for the
                              │ best answer or a hand-off of the progress so far; then stop
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from reconciler.core.runs.messages import Usage

FINAL_NOTICE = (
    "This is your last turn: tools are no longer available. Give your best final answer now, "
    "or, if the task is not finished, a short hand-off saying what was done, what is left, "
    "and what the next person should do first.")


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per million tokens of each kind (the four counts a model reports)."""

    input: float = 0.0
    output: float = 0.0
    cache_creation: float = 0.0
    cache_read: float = 0.0

    def cost(self, usage: Usage) -> float:
        return (usage.input_tokens * self.input + usage.output_tokens * self.output
                + usage.cache_creation_input_tokens * self.cache_creation
                + usage.cache_read_input_tokens * self.cache_read) / 1_000_000


@dataclass(frozen=True, slots=True)
class RunConfig:
    """A run's limits and timings; stored with the run, so a resumed run keeps them."""

    system: str = "You are a careful agent. Use the tools to do the task, then answer."
    max_turns: int = 12
    max_tool_calls_per_turn: int = 8
    #: Over all four token counts together; None: no limit.
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    prices: Prices = Prices()
    #: The `repeat_limit`-th call identical (name and canonical arguments) to earlier calls
    #: among the last `repeat_window` calls is intercepted (so cycles like A,B,A,B,A count)...
    repeat_limit: int = 3
    repeat_window: int = 10
    #: ...if the earlier ones got nothing new: each failed, or all answered the same (a no-op
    #: to repeat). False: every such repeat is intercepted, however it went before.
    repeat_only_unproductive: bool = True
    max_output_tokens: int = 1024
    #: How long a pending approval waits before the run times out.
    approval_timeout_s: float = 86_400.0
    #: Reconcile rounds (and the wait between them) for a call whose effect is unknown.
    reconcile_rounds: int = 5
    reconcile_wait_s: float = 1.0
    #: Pause for a continuation when less than this is left before the caller's deadline.
    step_reserve_s: float = 2.0

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> RunConfig:
        """From a run's stored configuration; unknown keys are an error, naming them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown run configuration keys {unknown}; known: {sorted(known)}")
        values = dict(data)
        if isinstance(values.get("prices"), Mapping):
            values["prices"] = Prices(**values["prices"])
        config = cls(**values)
        if config.max_turns < 1 or config.max_tool_calls_per_turn < 1 or config.repeat_limit < 2:
            raise ValueError("max_turns and max_tool_calls_per_turn must be >= 1, "
                             "repeat_limit >= 2")
        out_of_range = [f"{name} must be {low:g} to {high:g}"
                        for name, (low, high) in RANGES.items()
                        if (value := getattr(config, name)) is not None
                        and not low <= value <= high]
        if len(config.system) > MAX_SYSTEM_CHARS:
            out_of_range.append(f"system must be at most {MAX_SYSTEM_CHARS} characters")
        if config.repeat_window < config.repeat_limit - 1:
            out_of_range.append("repeat_window must hold the repeat_limit - 1 calls before a "
                                "repeat: repeat_window >= repeat_limit - 1")
        if out_of_range:
            raise ValueError("; ".join(out_of_range))
        return config


#: Server-side bounds on every number of a run's configuration, the agent's own included: a
#: timeout of 1e15 s overflows every clock, a billion reconcile rounds outlive any deadline.
RANGES: dict[str, tuple[float, float]] = {
    "max_turns": (1, 200),
    "max_tool_calls_per_turn": (1, 64),
    "max_tokens": (1, 100_000_000),
    "max_cost_usd": (0, 10_000),
    "repeat_limit": (2, 100),
    "max_output_tokens": (1, 128_000),
    "approval_timeout_s": (1, 30 * 86_400),
    "reconcile_rounds": (0, 20),
    "reconcile_wait_s": (0, 60),
    "step_reserve_s": (0, 300),
}
MAX_SYSTEM_CHARS = 60_000
#: Keys a caller may never set unless the agent allows it (Agent.caller_may_set): the system
#: prompt is the agent's instructions, the prices are what its budgets are counted in.
AGENT_ONLY = frozenset({"system", "prices"})
#: Budgets a caller may lower but never lift above the agent's (nor remove).
BUDGETS = ("max_tokens", "max_cost_usd", "max_turns", "max_tool_calls_per_turn",
           "max_output_tokens", "reconcile_rounds")


def caller_limits(given: Mapping[str, Any], agent: Mapping[str, Any],
                  allowed: frozenset[str] = frozenset()) -> list[str]:
    """Why a caller's run configuration `given` oversteps the agent's configuration `agent`
    (empty: it does not). A caller may tighten a budget, never lift one."""
    found = [f"{key} is set by the agent, not by the caller"
             for key in sorted(AGENT_ONLY & set(given) - allowed)]
    defaults = RunConfig()
    for key in BUDGETS:
        if key not in given or key in allowed:
            continue
        limit = agent.get(key, getattr(defaults, key))
        value = given[key]
        if limit is not None and (value is None or (isinstance(value, int | float)
                                                    and value > limit)):
            found.append(f"{key} may be lowered, not raised above the agent's {limit:g}")
    return found


def turn_estimate(turns: Sequence[Usage]) -> Usage:
    """What the next turn is expected to cost: the largest turn so far (nothing known before
    the first turn, which is therefore always started if the budget is not spent)."""
    return max(turns, key=Usage.total, default=Usage())


def budget_stop(config: RunConfig, turns: Sequence[Usage]) -> str | None:
    """Why the next turn must not start (it would exceed a budget), or None."""
    used = sum(turns, Usage())
    projected = used + turn_estimate(turns)
    if config.max_tokens is not None and projected.total() > config.max_tokens:
        return (f"token budget: {used.total()} used, the next turn would take about "
                f"{turn_estimate(turns).total()} more, limit {config.max_tokens}")
    if config.max_cost_usd is not None and config.prices.cost(projected) > config.max_cost_usd:
        return (f"cost budget: ${config.prices.cost(used):.4f} used, the next turn would pass "
                f"the limit ${config.max_cost_usd:.4f}")
    return None


@dataclass(frozen=True, slots=True)
class Attempted:
    """An earlier tool call as the repetition guard sees it: its identity (name, arguments
    hash) and, if it succeeded, what it answered (None: it failed, was intercepted, or has no
    result yet)."""

    key: tuple[str, str]
    answer: str | None


def is_repeat(history: Sequence[Attempted], key: tuple[str, str], config: RunConfig) -> bool:
    """True when the call `key` is the `repeat_limit`-th identical one within the last
    `repeat_window` calls of `history` and (by default) the earlier ones were unproductive:
    failed, or answered alike (at most one distinct successful answer among them).

        window:  A  B  A  B  [A]     A answered "x" twice: the third A is intercepted
                 A  B  A  B  [A]     A answered "x", then "y" (progress): it runs
    """
    same = [a for a in history[-config.repeat_window:] if a.key == key]
    if len(same) < config.repeat_limit - 1:
        return False
    if not config.repeat_only_unproductive:
        return True
    return len({a.answer for a in same if a.answer is not None}) <= 1


def repeat_message(name: str, limit: int, window: int) -> str:
    return (f"Intercepted: this is call number {limit} of {name!r} with the same arguments "
            f"within the last {window} calls, and the earlier ones failed or answered the "
            "same, so it was not run. Repeating it will not change the result; use the "
            "earlier results, try something different, or finish with what you have.")


def over_limit_message(limit: int) -> str:
    return (f"Not run: at most {limit} tool calls are allowed per turn. Ask for the rest in "
            "the next turn if they are still needed.")
