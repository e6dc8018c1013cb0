"""Every framework example (examples/<framework>_agent.py), run as the README says: offline,
against the sandbox provider, once per fault. One charge at the provider either way."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))

EXAMPLES = ["openai_agents_agent", "langgraph_agent", "pydantic_ai_agent", "anthropic_agent"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_lost_answer_is_charged_once_and_the_model_told(example: str) -> None:
    report = importlib.import_module(example).main("lose_response")
    [charge] = report.charges
    first, second = report.answers
    assert f"charge: done ({charge})" in first and "Do not call charge again" in first
    assert "nothing was sent again" in second


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_failed_send_is_retried_once_on_the_grant(example: str) -> None:
    report = importlib.import_module(example).main("fail_before_commit")
    [charge] = report.charges
    first, second = report.answers
    assert "You may call charge again, once" in first and charge in second
