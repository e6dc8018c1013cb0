"""Time windows in probe templates (probes/templates.py): each provider's format, offsets, and
rounding down, so a window's lower bound never starts after the moment it stands for."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from probes.errors import ProbeConfigError
from probes.templates import Template

from probe_harness import target

AT = datetime(2026, 7, 1, 12, 0, 0, 999_999, tzinfo=UTC)


@pytest.mark.parametrize(("text", "rendered"), [
    ("{intent_at:unix}", "1782907200"),                       # Stripe created[gte]
    ("{intent_at:unix-300}", "1782906900"),
    ("{intent_at:unix6}", "1782907200.999999"),               # Slack oldest
    ("{intent_at:iso-300}", "2026-07-01T11:55:00Z"),          # GitHub since
    ("{intent_at:date}", "2026-07-01"),                       # Twilio DateSent>
    # Postmark reads US Eastern time: rendered at UTC-5, an hour early in summer (EDT is
    # UTC-4), which only widens a lower bound.
    ("{intent_at:eastern}", "2026-07-01T07:00:00"),
    ("from {dispatched_at:unix+60} for {operation_id}", "from 1782907260 for op-1"),
])
def test_a_time_renders_in_its_providers_format_rounded_down(text: str, rendered: str) -> None:
    template = Template.parse(text, "test")
    assert template.render(target(intent_at=AT, dispatched_at=AT)) == rendered


@pytest.mark.parametrize("text", ["{intent_at}", "{intent_at:rfc}", "{intent_at:unix-5m}",
                                  "{now:unix}", "{operation_id:unix}"])
def test_a_time_needs_a_known_format_and_nothing_else_takes_one(text: str) -> None:
    with pytest.raises(ProbeConfigError):
        Template.parse(text, "test")
