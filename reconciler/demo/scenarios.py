"""The demo's scenarios and its provider configuration, as data.

Each scenario is one operation: the agent records the intent, dispatches once with a sandbox
fault, the reconciler probes until it has a verdict (or gives up after a few rounds), and, when
the scenario is about a retry, the agent asks the retry gate and dispatches again only if
granted. Lags are sub-second so the whole demo runs in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reconciler.core.domain import Verdict
from reconciler.demo.agent import JIRA_EMAIL, JIRA_TOKEN, SHAPES
from reconciler.sandbox.credentials import SANDBOX_ENV
from reconciler.sandbox.jira import account_id

#: The contracts of the four sandbox providers (SPEC section 4). The searches are configured to
#: lag up to VISIBILITY_LAG_S, longer than any lag a scenario injects (LAG_S), so a lagging zero
#: observed after the window is a true zero. A request whose answer the agent did not get may
#: still be applied for IN_FLIGHT_S, longer than any delay a scenario injects (0.6 s), so a zero
#: read after the settle time is a true zero.
VISIBILITY_LAG_S = 1.0
LAG_S = 0.8
IN_FLIGHT_S = 0.8
CONTRACTS: dict[str, dict[str, Any]] = {
    "payments": {"idempotency_keys": True, "visibility_lag_s": VISIBILITY_LAG_S,
                 "inflight_s": IN_FLIGHT_S},
    "email": {"visibility_lag_s": VISIBILITY_LAG_S, "inflight_s": IN_FLIGHT_S},
    "chat": {"inflight_s": IN_FLIGHT_S},
    "issues": {"visibility_lag_s": VISIBILITY_LAG_S, "inflight_s": IN_FLIGHT_S},
    "calendar": {"inflight_s": IN_FLIGHT_S},
    "jira": {"visibility_lag_s": VISIBILITY_LAG_S, "inflight_s": IN_FLIGHT_S},
}
#: Probes per provider: the real providers' recipes (docs/probes.md) against the sandbox. The
#: engine judges absence by the *latest* observation, so Stripe's consistent list is read after
#: its lagging search: its zero then counts at once instead of waiting out the search's window.
PROBES: dict[str, tuple[str, ...]] = {
    "payments": ("stripe.charges.search", "stripe.charges.list"),
    "email": ("postmark.outbound",),
    "chat": ("slack.history",),
    "issues": ("github.search",),
    "calendar": ("google_calendar.event",),
    "jira": ("jira.search",),
}
#: Reads that fail fast: two tries, short waits, all bounded well under a second. The sandbox's
#: search lag is the scenario's (`least_lag_s`), not the real provider's minutes.
READ_BOUNDS: dict[str, Any] = {"tries": 2, "backoff_s": 0.05, "timeout_s": 1.0,
                               "deadline_s": 2.0, "least_lag_s": VISIBILITY_LAG_S}


#: Recipe options of a provider's probes: the GitHub recipes prove only issues the worker's
#: account opened, and the sandbox opens every issue as its token's user.
ACCOUNTS: dict[str, dict[str, Any]] = {
    "issues": {"account": "sandbox-bot"},
    # The sandbox's Jira checks its login, as Jira does: the probe logs in (CREDENTIALS).
    "jira": {"account": account_id(JIRA_EMAIL), "auth": "basic"},
    # The sandbox checks Calendar's bearer token (any will do): the probe sends CREDENTIALS'.
    "calendar": {"auth": "bearer"}}
#: The environment the demo's probes read their credentials from, as a deployment's would hold
#: the real providers' (the sandbox checks each as its provider does): the sandbox's, no secrets.
CREDENTIALS = {**SANDBOX_ENV, "JIRA_EMAIL": JIRA_EMAIL, "JIRA_API_TOKEN": JIRA_TOKEN,
               "GOOGLE_CALENDAR_TOKEN": "sandbox-token"}


def probe_config(sandbox_url: str) -> dict[str, Any]:
    """The probe configuration for the sandbox, as a TOML file would hold it (docs/probes.md)."""
    return {"providers": {
        provider: {**contract, "max_attempts": 3, "reconcile_deadline_s": 60,
                   "probes": [{"use": use, "base_url": sandbox_url + SHAPES[provider].root,
                               "actions": [SHAPES[provider].action],
                               **READ_BOUNDS, **ACCOUNTS.get(provider, {})}
                              for use in PROBES[provider]]}
        for provider, contract in CONTRACTS.items()}}


@dataclass(frozen=True, slots=True)
class Reads:
    """The sandbox's read side during a scenario (docs/sandbox-api.md, `/_sandbox/config`)."""

    search_lag_s: float = 0.0
    cached_list: bool = False
    read_unavailable: bool = False


@dataclass(frozen=True, slots=True)
class Retry:
    """The agent wants to send the operation again: it asks the gate first, with the intent's
    key (`same_key`) or a fresh one, and dispatches (with `fault`) only on a grant."""

    granted: bool
    then: Verdict
    same_key: bool = True
    fault: str | None = None
    #: How long the agent takes between the grant and the dispatch.
    after_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Scenario:
    """One operation played end to end. `expect` is the verdict reconciliation reaches after
    the first dispatch; `early`, when set, the verdict of the very first probe round (inside
    the visibility window); `retry`, what happens when the agent then asks to retry."""

    name: str
    provider: str
    fault: str | None
    expect: Verdict
    reads: Reads = field(default_factory=Reads)
    early: Verdict | None = None
    retry: Retry | None = None
    about: str = ""


_LAGGING = Reads(search_lag_s=LAG_S)

SCENARIOS: tuple[Scenario, ...] = (
    # The six origin cases of the product.
    Scenario("lost_response", "payments", "lose_response", Verdict.VERIFIED_APPLIED,
             about="committed, answer lost; Stripe's charge list finds it"),
    Scenario("no_usable_evidence", "chat", "lose_response", Verdict.INDETERMINATE,
             reads=Reads(read_unavailable=True),
             about="timeout and the read API is down: nothing is fabricated"),
    Scenario("duplicate_despite_key", "payments", "duplicate", Verdict.DUPLICATE_EFFECT,
             about="two charges although a key was sent"),
    Scenario("false_success", "chat", "ack_no_effect", Verdict.FALSE_SUCCESS,
             about="ok:true with a ts, but no message in the channel"),
    Scenario("authoritative_zero_retry_granted", "payments", "fail_before_commit",
             Verdict.VERIFIED_NOT_APPLIED,
             retry=Retry(granted=True, then=Verdict.VERIFIED_APPLIED, fault="lose_response"),
             about="the charge list shows none: not applied, so the gate grants one same-key "
                   "retry; its answer is lost too, and the list proves it landed once"),
    Scenario("retry_with_changed_key", "payments", "fail_before_commit",
             Verdict.VERIFIED_NOT_APPLIED,
             retry=Retry(granted=False, then=Verdict.UNSAFE_RETRY, same_key=False),
             about="a new key would not be deduplicated: refused, recorded as unsafe"),
    # Lagging reads: a zero inside the visibility window proves nothing yet.
    Scenario("lagging_search_finds_it_later", "issues", "lose_response",
             Verdict.VERIFIED_APPLIED, reads=_LAGGING, early=Verdict.INDETERMINATE,
             about="the search index catches up within the window"),
    Scenario("lagging_zero_becomes_conclusive", "email", "ack_no_effect",
             Verdict.FALSE_SUCCESS, reads=_LAGGING, early=Verdict.INDETERMINATE,
             about="200 with a MessageID; the zero counts only after the window"),
    Scenario("slow_provider_in_flight", "payments", "delay=0.6", Verdict.VERIFIED_APPLIED,
             early=Verdict.INDETERMINATE,
             retry=Retry(granted=False, then=Verdict.VERIFIED_APPLIED),
             about="client gave up while the charge was in flight; the list shows none yet, "
                   "which proves nothing until the request has settled: read again then, it "
                   "finds the charge, and no retry is granted"),
    # Duplicates, and retries a gate refuses.
    Scenario("duplicate_issue", "issues", "duplicate", Verdict.DUPLICATE_EFFECT,
             about="a non-idempotent create that landed twice"),
    Scenario("blind_retry_refused_after_502", "issues", "error_after_commit",
             Verdict.VERIFIED_APPLIED,
             retry=Retry(granted=False, then=Verdict.VERIFIED_APPLIED),
             about="a 502 after the commit; retrying would open a second issue"),
    Scenario("not_applied_but_no_keys", "email", "fail_before_commit",
             Verdict.VERIFIED_NOT_APPLIED,
             retry=Retry(granted=False, then=Verdict.VERIFIED_NOT_APPLIED),
             about="proven not sent, yet a resend has no key to deduplicate it: a human decides"),
    # One more per provider shape, the plain lost answer.
    Scenario("email_lost_response", "email", "lose_response", Verdict.VERIFIED_APPLIED,
             about="the message search finds it at once"),
    Scenario("chat_error_after_commit", "chat", "error_after_commit", Verdict.VERIFIED_APPLIED,
             about="a 502, yet the history shows the message"),
    Scenario("booking_lost_response", "calendar", "lose_response", Verdict.VERIFIED_APPLIED,
             about="the event's answer lost; read back by the id the agent chose for it"),
    Scenario("jira_issue_lost_response", "jira", "lose_response", Verdict.VERIFIED_APPLIED,
             reads=_LAGGING, early=Verdict.INDETERMINATE,
             about="Jira created the issue, the answer was lost; its JQL search lags, then "
                   "finds the labelled issue, and no second issue is opened"),
)
