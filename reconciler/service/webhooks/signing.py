"""The raw body a signature covers, the timing rule of timestamped schemes, and how long a
delivery is remembered."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import Depends, Request

#: Stripe, Slack and Standard Webhooks all refuse a signed timestamp more than five minutes
#: off (Stripe's DEFAULT_TOLERANCE, Slack's and the Standard Webhooks spec's five minutes).
TOLERANCE_S = 300

#: SPEC section 6: a delivery is remembered for at least the provider's own retry window, and
#: never for less than three days (Stripe's automatic retries).
REMEMBER_AT_LEAST = timedelta(days=3)


def remember(retry_window: timedelta) -> timedelta:
    """How long a timestamped scheme's delivery id is kept to refuse it again: the provider's
    own retry window, never less than REMEMBER_AT_LEAST. The signed timestamp alone refuses only
    a captured copy (older than the tolerance); a provider's retry is the same delivery signed
    again at a new time, so only its remembered id can tell it is not a second receipt. Three
    days is far beyond the twice-the-tolerance a replayed timestamp could still pass in."""
    return max(retry_window, REMEMBER_AT_LEAST)


async def _raw_body(request: Request) -> bytes:
    return await request.body()


#: The body exactly as sent: signatures cover bytes, not a re-serialized JSON value.
RawBody = Annotated[bytes, Depends(_raw_body)]
