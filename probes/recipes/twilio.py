"""Twilio: a message by SID, and the account's messages sent to a number since the intent.

    twilio.message        GET /2010-04-01/Accounts/{sid}/Messages/{MessageSid}.json
                                                                          authoritative
    twilio.messages.list  GET /2010-04-01/Accounts/{sid}/Messages.json?To=&DateSent>=
                                                                          weak (at most)

HTTP Basic: the Account SID (or an API key SID) from `username_env`, the auth token (or the API
key's secret) from `token_env`; `account_sid` (not a secret) goes in the path. A message SID
comes from the create response, which a lost response never gave; without it, only the list is
left, and it proves nothing: a message carries no metadata to tie it to the operation, `To` is
not unique, and `DateSent` is empty until the message leaves the queue. It is kept as a hint.

A message `failed` ("could not be sent") or `canceled` (a scheduled message canceled before it
was sent) is not the effect: the provider says, definitively, that nothing went out. `accepted`,
`scheduled`, `queued`, `sending` are the effect to come (the message is on its way out);
`sent`, `delivered`, `undelivered` (sent; the carrier reported it was not delivered),
`partially_delivered` (sent as several segments, some delivered) and `read` are the effect
done: the message left Twilio, and sending it again would be a second message. A 404 (error
20404) is not a zero: it is also the answer for another account's SID.

Sources: https://www.twilio.com/docs/messaging/api/message-resource (fetch, list filters
To/DateSent/DateSent>, PageSize, next_page_uri, statuses),
https://www.twilio.com/docs/usage/requests-to-twilio (Basic auth).
"""

from __future__ import annotations

from typing import Any

from probes.errors import ProbeConfigError
from probes.recipes.recipe import CAUTIOUS_INFLIGHT_S, Adapt, Inflight, Recipe
from reconciler.core.domain import Authority

CITE = "https://www.twilio.com/docs/messaging/api/message-resource"
#: Twilio documents no bound on how long a Messages create may still be applied after its
#: caller stopped waiting (twilio-python sets no timeout of its own): the cautious minute.
INFLIGHT = Inflight(CAUTIOUS_INFLIGHT_S, "undocumented (https://www.twilio.com/docs/messaging/"
                    "api/message-resource#create-a-message-resource): the cautious default")

#: The statuses that are the effect (https://www.twilio.com/docs/messaging/api/message-resource
#: #message-status-values); the status callbacks' `MessageStatus` reads the same way.
EFFECT_STATUS = ("accepted", "scheduled", "queued", "sending", "sent", "delivered",
                 "undelivered", "partially_delivered", "read")

_COMMON: dict[str, Any] = {
    "ref": "sid", "status": "status", "effect_status": list(EFFECT_STATUS),
    "no_effect_status": ["failed", "canceled"],
    "token_env": "TWILIO_AUTH_TOKEN", "username_env": "TWILIO_ACCOUNT_SID"}


def _in_account(suffix: str) -> Adapt:
    def adapt(options: dict[str, Any], where: str) -> dict[str, Any]:
        sid = options.pop("account_sid", None)
        if not (isinstance(sid, str) and sid.startswith("AC") and sid.isalnum()):
            raise ProbeConfigError(
                f"{where}: 'account_sid' (AC...) is required: it is part of the path")
        return {"path": f"/2010-04-01/Accounts/{sid}/Messages{suffix}", **options}

    return adapt


RECIPES: dict[str, Recipe] = {
    "twilio.message": Recipe({"item": "", **_COMMON, "authority": "authoritative"},
                             Authority.AUTHORITATIVE, CITE,
                             adapt=_in_account("/{correlation[message_sid]}.json"),
                             inflight=INFLIGHT),
    "twilio.messages.list": Recipe({
        "params": {"To": "{correlation[to]}", "DateSent>": "{intent_at:date-300}",
                   "PageSize": "100"},
        "items": "messages", **_COMMON,
        "pagination": {"style": "next_url", "next": "next_page_uri"},
        "authority": "weak"}, Authority.WEAK, CITE, adapt=_in_account(".json"),
        inflight=INFLIGHT),
}
