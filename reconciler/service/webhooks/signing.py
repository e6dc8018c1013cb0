"""The raw body a signature covers, and the timing rule of timestamped schemes."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import Depends, Request

#: Stripe, Slack and Standard Webhooks all refuse a signed timestamp more than five minutes
#: off (Stripe's DEFAULT_TOLERANCE, Slack's and the Standard Webhooks spec's five minutes).
TOLERANCE_S = 300


def keep_ids_for(tolerance_s: int) -> timedelta:
    """How long a delivery id must be kept to refuse its replay, when the signed timestamp must
    be within `tolerance_s` of our clock both ways:

        t - tol      t      t + tol          signed time t
           |---- first seen ----|
                    |---- replay accepted by the timestamp ----|
           <---------------- at most 2 tol ------------------->

    plus a minute for the time between reading the clock and writing the row."""
    return timedelta(seconds=2 * tolerance_s + 60)


async def _raw_body(request: Request) -> bytes:
    return await request.body()


#: The body exactly as sent: signatures cover bytes, not a re-serialized JSON value.
RawBody = Annotated[bytes, Depends(_raw_body)]
