"""The declarative probe: GETs against a JSON API, described entirely by options.

Every built-in recipe is a preset of this probe. The options (TOML keys) are listed in
docs/probes.md; in short: where to read (`base_url`, `path`, `params`, `headers`), how to log
in (`token_env`, `auth`, `auth_header`, `username_env`), where the matches are (`items` or
`item`, `ref`, `hash`), which of them are the operation's (`where`, `contains`, `status`), how
the pages go on (`pagination`, `max_pages`, `incomplete`), what a 404 means (`not_found`,
`confirm`), how fast the provider may be asked (`budget`), and what the answer proves
(`authority`, `emit`).

A read is complete only when it saw every page the provider has: a cut read (more pages than
it could fetch before its deadline, a search the provider marks incomplete, a rate limit, an
object whose status decides nothing yet) that found nothing is `unavailable`, never a zero; its
matches, when it found some, keep their authority (SPEC section 3).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx

from probes.base import ProbeResult, ProbeTarget, utc_now
from probes.credentials import MissingCredential
from probes.loop import wait_for
from probes.matching import Found, UnusableResponse
from probes.pagination import Cut
from probes.spec import HttpJsonSpec
from probes.templates import MissingValue
from probes.transport import Clients, FetchError, Reply, aget, get
from reconciler.core.domain import Authority, Match, Observation, Receipt
from reconciler.core.sight import Sight

#: What a provider's error code looks like; anything else (a message) is never quoted.
_CODE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


#: One GET a read needs: url, params, headers, deadline (monotonic).
Fetch = tuple[str, Mapping[str, str], Mapping[str, str], float]
Reading = Generator[Fetch, Reply, ProbeResult]


@dataclass(slots=True)
class _Read:
    """What the pages of one read found, and whether the read was cut (and why)."""

    matches: dict[str, Match]
    at: datetime | None = None
    cut: str | None = None
    #: The cut was the provider's rate limit: seconds it asked to wait (`FetchError`).
    retry_after: float | None = None
    #: Matches in content written by another account than the configured `author`.
    foreign: dict[str, Match] = field(default_factory=dict)


class HttpJsonProbe:
    """A `Probe` that reads JSON endpoints as `spec` describes; never raises, never writes."""

    def __init__(self, name: str, spec: HttpJsonSpec, *,
                 transport: httpx.BaseTransport | None = None,
                 clock: Callable[[], datetime] = utc_now) -> None:
        self.name = name
        self.spec = spec
        #: The provider's documented lag for a lagging read (set by recipes): the configuration
        #: refuses a `visibility_lag_s` below it.
        self.least_lag_s = 0.0
        #: The provider's `inflight_s` default (set by recipes; None: the cautious default).
        self.inflight_s: float | None = None
        #: What it covers and finds effects by: set by the registry (probes/sight.py).
        self.sight = Sight()
        self._clock = clock
        self._clients = Clients({}, transport)

    def __repr__(self) -> str:
        # Names the credential's variables, never their values; headers are left out on purpose.
        spec = self.spec
        env = ",".join(spec.credential.env_names) if spec.credential else None
        return (f"HttpJsonProbe(name={self.name!r}, url={spec.base_url + spec.path.text!r}, "
                f"authority={spec.authority.value!r}, token_env={env!r})")

    def probe(self, target: ProbeTarget) -> ProbeResult:
        if self._clients.lean:
            # One wire: a blocking caller reads as the sweep does, on the probe loop.
            return wait_for(self.aprobe(target))
        reading = self._reading(target)
        outcome: Reply | FetchError | None = None
        try:
            with self._clients.client() as session:
                while True:
                    url, params, headers, deadline = _next(reading, outcome)
                    try:
                        outcome = get(session, url, params, self.spec.policy, self._clock,
                                      deadline=deadline, headers=headers,
                                      budget=self.spec.budget)
                    except FetchError as exc:
                        outcome = exc
        except StopIteration as done:
            return _evidence(done)
        except _UNAVAILABLE as exc:
            return self._unavailable(target, str(exc), retry_after=_retry_after(exc))

    async def aprobe(self, target: ProbeTarget) -> ProbeResult:
        """The read as a task on an event loop (the sweep's probe loop), over
        `http11`; `probe` waits for it. Where httpx reads instead (an injected
        transport, a proxy), `probe` reads and this runs it on a thread of the loop's."""
        if not self._clients.lean:
            return await asyncio.to_thread(self.probe, target)
        reading = self._reading(target)
        outcome: Reply | FetchError | None = None
        try:
            async with self._clients.aclient() as session:
                while True:
                    url, params, headers, deadline = _next(reading, outcome)
                    try:
                        outcome = await aget(session, url, params, self.spec.policy,
                                             self._clock, deadline=deadline, headers=headers,
                                             budget=self.spec.budget)
                    except FetchError as exc:
                        outcome = exc
        except StopIteration as done:
            return _evidence(done)
        except _UNAVAILABLE as exc:
            return self._unavailable(target, str(exc), retry_after=_retry_after(exc))

    def _reading(self, target: ProbeTarget) -> Reading:
        """The read, without I/O: it yields each GET it needs (url, params, headers,
        deadline) and is sent the reply (or thrown the `FetchError`), so that `probe` and
        `aprobe` make the same read over their own clients; it returns the evidence."""
        spec = self.spec
        headers = {k: t.render(target) for k, t in spec.headers.items()}
        if spec.credential is not None:
            headers.update(spec.credential.headers())
        url = spec.base_url + spec.path.render(target, lambda value: quote(value, safe=""))
        params: Mapping[str, str] = {k: t.render(target) for k, t in spec.params.items()}
        deadline = time.monotonic() + spec.policy.deadline_s
        read = _Read({}, cut=self._blind(target))
        for page in range(spec.max_pages):
            try:
                reply = yield url, params, headers, deadline
            except FetchError as exc:
                if page == 0:
                    raise
                read.cut, read.retry_after = f"page {page + 1}: {exc}", exc.retry_after
                break
            read.at = read.at or reply.at
            if reply.status == 404 and page == 0 and (
                    yield from self._means_zero(reply, target, headers, deadline)):
                return Observation(target.operation_id, reply.at, self.name, spec.authority)
            if not 200 <= reply.status < 300:
                raise UnusableResponse(f"HTTP {reply.status}{_error_code(reply.content)}")
            body = _json(reply.content)
            for check in spec.require:
                if not check.holds(body, target):
                    raise UnusableResponse(f"the response failed the check on {check.path!r}"
                                           f"{_error_code(reply.content)}")
            found = spec.extraction.found(body, target)
            if spec.receipt:
                return self._receipt(target, reply, found)
            for match in found.matches:
                read.matches.setdefault(match.provider_ref, match)
            for match in found.foreign:
                read.foreign.setdefault(match.provider_ref, match)
            read.cut = read.cut or self._undecided(found) or self._incomplete(body)
            following = spec.pagination.following(
                url, params, body, reply.headers, spec.extraction.items(body), spec.base_url)
            if following is None:
                break
            if isinstance(following, Cut):
                read.cut = read.cut or following.why
                break
            url, params = following.url, following.params
        else:
            read.cut = read.cut or f"more than max_pages = {spec.max_pages} pages"
        assert read.at is not None
        if read.foreign and not read.matches:
            # A marker anyone could have written proves nothing (SPEC section 3), and no zero.
            return Observation(target.operation_id, read.at, self.name, Authority.WEAK,
                               tuple(read.foreign.values()))
        if read.cut is not None and not read.matches:
            return self._unavailable(target, f"read cut short: {read.cut}", read.at,
                                     read.retry_after)
        return Observation(target.operation_id, read.at, self.name, spec.authority,
                           tuple(read.matches.values()))

    def _receipt(self, target: ProbeTarget, reply: Reply, found: Found) -> ProbeResult:
        if not found.matches:
            why = "the record was written by another account" if found.foreign \
                else "the record's status decides nothing"
            return self._unavailable(target, why, reply.at)
        match = found.matches[0]
        return Receipt(target.operation_id, reply.at, match.provider_ref, match.request_hash,
                       source="lookup")

    def _blind(self, target: ProbeTarget) -> str | None:
        """Why this read cannot see the operation's effect, when the intent's correlation names
        what the endpoint does not return (`blind_to`)."""
        named = [key for key in self.spec.blind_to if target.correlation.get(key)]
        return f"this read does not return what correlation {named[0]!r} names" \
            if named else None

    @staticmethod
    def _undecided(found: Found) -> str | None:
        return f"{found.undecided} object(s) in a status that decides nothing yet" \
            if found.undecided else None

    def _incomplete(self, body: Any) -> str | None:
        flag = self.spec.incomplete
        if flag is None:
            return None
        value = body.get(flag) if isinstance(body, dict) else None
        return f"the provider marked the answer incomplete ({flag})" if value is True else None

    def _means_zero(self, reply: Reply, target: ProbeTarget, headers: Mapping[str, str],
                    deadline: float) -> Generator[Fetch, Reply, bool]:
        """Whether a 404 says "no such object" (and not "no such route", nor "not in the
        account or mode this key reads"): its body passes the checks, then each confirm read."""
        checks = self.spec.not_found
        if checks is None:
            return False
        try:
            body = _json(reply.content)
        except UnusableResponse:
            return False
        if not all(check.holds(body, target) for check in checks):
            return False
        for confirm in self.spec.confirm:
            url = self.spec.base_url + confirm.path.render(target, lambda v: quote(v, safe=""))
            answer = yield url, {}, headers, deadline
            if not 200 <= answer.status < 300:
                raise UnusableResponse(f"HTTP {answer.status} from the confirm read "
                                       f"{confirm.path.text}: a 404 proves no zero")
            if not all(check.holds(_json(answer.content), target) for check in confirm.checks):
                raise UnusableResponse(f"the confirm read {confirm.path.text} shows another "
                                       "account or mode: a 404 proves no zero")
        return True

    def _unavailable(self, target: ProbeTarget, error: str, at: datetime | None = None,
                     retry_after: float | None = None) -> Observation:
        now = self._clock()
        return Observation(target.operation_id, at or now, self.name, Authority.UNAVAILABLE,
                           error=error, retry_at=None if retry_after is None
                           else now + timedelta(seconds=retry_after))


#: What makes a read evidence of nothing: its credential or a value it needs missing, no
#: usable answer.
_UNAVAILABLE = (MissingCredential, MissingValue, FetchError, UnusableResponse)


def _retry_after(exc: Exception) -> float | None:
    return exc.retry_after if isinstance(exc, FetchError) else None


def _next(reading: Reading, outcome: Reply | FetchError | None) -> Fetch:
    """The read's next GET, once it is given the last one's reply or error (StopIteration
    with the evidence when it needs none)."""
    if outcome is None:
        return next(reading)
    if isinstance(outcome, FetchError):
        return reading.throw(outcome)
    return reading.send(outcome)


def _evidence(done: StopIteration) -> ProbeResult:
    result: ProbeResult = done.value
    return result


def _json(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        raise UnusableResponse("the response is not JSON") from None


def _error_code(content: bytes) -> str:
    """The provider's own error code, for the operator: codes only, never messages or data."""
    try:
        body = json.loads(content)
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    error = body.get("error")
    for code in (error.get("code") if isinstance(error, dict) else error,
                 body.get("ErrorCode"), body.get("code")):
        if isinstance(code, str | int) and not isinstance(code, bool) and _CODE.fullmatch(
                str(code)):
            return f" ({code})"
    return ""


def http_json(name: str, options: Mapping[str, Any], env: Mapping[str, str], *,
              transport: httpx.BaseTransport | None = None,
              clock: Callable[[], datetime] = utc_now) -> HttpJsonProbe:
    """The `http_json` factory; `transport` and `clock` are for tests and embedding."""
    spec = HttpJsonSpec.parse(options, env, f"probe {name!r}")
    return HttpJsonProbe(name, spec, transport=transport, clock=clock)
