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

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from probes.base import ProbeTarget, utc_now
from probes.budget import BUDGETS, Budget
from probes.credentials import Credential, MissingCredential
from probes.matching import Extraction, FieldCheck, Found, StatusFilter, UnusableResponse
from probes.options import Options
from probes.pagination import STYLES, Cut, Pagination
from probes.templates import MissingValue, Template
from probes.transport import DEFAULT_POLICY, Clients, FetchError, Reply, RetryPolicy, get
from reconciler.domain import Authority, Match, Observation, Receipt

_CODE = re.compile(r"[A-Za-z0-9_.-]{1,64}")

#: What a probe's configuration may claim; `unavailable` is the probe's to report, not to claim.
CLAIMABLE = (Authority.AUTHORITATIVE, Authority.LAGGING, Authority.WEAK)


@dataclass(frozen=True, slots=True)
class Confirm:
    """A read that must hold before a 404 counts as a zero (the right account, the right mode)."""

    path: Template
    checks: tuple[FieldCheck, ...]


@dataclass(frozen=True, slots=True)
class HttpJsonSpec:
    """A parsed, validated description of one declarative probe."""

    base_url: str
    path: Template
    params: Mapping[str, Template]
    headers: Mapping[str, Template]
    credential: Credential | None
    extraction: Extraction
    require: tuple[FieldCheck, ...]
    pagination: Pagination
    max_pages: int
    #: Body path of a boolean that, when true, says the answer may be missing objects.
    incomplete: str | None
    #: None: a 404 is an error. Otherwise a 404 whose body passes these checks is zero matches.
    not_found: tuple[FieldCheck, ...] | None
    confirm: tuple[Confirm, ...]
    authority: Authority
    receipt: bool
    policy: RetryPolicy
    budget: Budget | None

    @classmethod
    def parse(cls, options: Mapping[str, Any], env: Mapping[str, str], where: str) -> HttpJsonSpec:
        opts = Options(options, where)
        opts.choice("method", ("GET",), "GET")  # probes only read: a write could repeat the effect
        base_url = opts.required_string("base_url").rstrip("/")
        if urlsplit(base_url).scheme not in ("http", "https"):
            raise opts.error("option 'base_url' must be an http:// or https:// URL")
        spec = cls(
            base_url=base_url,
            path=_path(opts, "path", where),
            params={k: Template.parse(v, where) for k, v in opts.table("params").items()},
            headers={k: Template.parse(v, where) for k, v in opts.table("headers").items()},
            credential=_credential(opts, env),
            extraction=_extraction(opts, where),
            require=FieldCheck.table(opts.table("require", scalars=True), where),
            pagination=_pagination(opts),
            max_pages=opts.integer("max_pages", 10, minimum=1),
            incomplete=opts.string("incomplete"),
            not_found=_not_found(opts, where),
            confirm=_confirm(opts, where),
            authority=Authority(opts.choice("authority", tuple(CLAIMABLE))),
            receipt=opts.choice("emit", ("observation", "receipt"), "observation") == "receipt",
            policy=RetryPolicy(
                tries=opts.integer("tries", DEFAULT_POLICY.tries, minimum=1),
                backoff_s=opts.number("backoff_s", DEFAULT_POLICY.backoff_s),
                timeout_s=opts.number("timeout_s", DEFAULT_POLICY.timeout_s),
                deadline_s=opts.number("deadline_s", DEFAULT_POLICY.deadline_s),
                max_bytes=opts.integer("max_bytes", DEFAULT_POLICY.max_bytes, minimum=1)),
            budget=_budget(opts, base_url),
        )
        if not (spec.policy.timeout_s > 0 and spec.policy.deadline_s > 0):
            raise opts.error("options 'timeout_s' and 'deadline_s' must be positive")
        if spec.receipt and not spec.extraction.single:
            raise opts.error("emit = 'receipt' reads one record: use 'item', not 'items'")
        if spec.confirm and spec.not_found is None:
            raise opts.error("'confirm' needs not_found = 'zero'")
        opts.finish()
        return spec


def _path(opts: Options, key: str, where: str) -> Template:
    path = opts.string(key, "") or ""
    if path and not path.startswith("/"):
        raise opts.error(f"option {key!r} must start with '/'")
    return Template.parse(path, where)


def _credential(opts: Options, env: Mapping[str, str]) -> Credential | None:
    token_env, header = opts.string("token_env"), opts.string("auth_header")
    username_env = opts.string("username_env")
    default = "basic" if username_env else "header" if header else "bearer"
    scheme = opts.choice("auth", ("bearer", "header", "basic", "none"), default)
    if scheme == "none":  # a provider that takes no credential, like the sandbox
        return None
    if token_env is None:
        if header or username_env or opts.has("auth"):
            raise opts.error("'auth', 'auth_header' and 'username_env' need 'token_env'")
        return None
    if (scheme == "header") != (header is not None):
        raise opts.error("auth = 'header' and 'auth_header' (the header's name) go together")
    if (scheme == "basic") != (username_env is not None):
        raise opts.error("auth = 'basic' and 'username_env' (the user's variable) go together")
    return Credential(token_env, env, scheme, header, username_env)


def _extraction(opts: Options, where: str) -> Extraction:
    items, item = opts.string("items"), opts.string("item")
    if (items is None) == (item is None):
        raise opts.error("set exactly one of 'items' (path to a list) or 'item' (one object; "
                         "'' for the whole response)")
    return Extraction(
        path=item if item is not None else items or "",
        single=item is not None,
        ref=opts.required_string("ref"),
        hash=opts.string("hash"),
        where=FieldCheck.table(opts.table("where", scalars=True), where)
        + FieldCheck.table(opts.table("contains"), where, contains=True),
        status=_status(opts),
    )


def _strings(opts: Options, key: str) -> frozenset[str]:
    value = opts.list_of_strings(key)
    return frozenset(value)


def _status(opts: Options) -> StatusFilter | None:
    path = opts.string("status")
    effect, no_effect = _strings(opts, "effect_status"), _strings(opts, "no_effect_status")
    if path is None:
        if effect or no_effect:
            raise opts.error("'effect_status' and 'no_effect_status' need 'status' (its path)")
        return None
    if not effect:
        raise opts.error("'status' needs 'effect_status': the statuses that are the effect")
    if effect & no_effect:
        raise opts.error("a status cannot be both in 'effect_status' and 'no_effect_status'")
    return StatusFilter(path, effect, no_effect)


def _pagination(opts: Options) -> Pagination:
    table = opts.table("pagination", scalars=True)
    sub = Options(table, f"{opts.where}: pagination")
    style = sub.choice("style", STYLES, "none")
    needs = {"cursor": ("next", "param"), "after_last": ("param", "more"), "link": (),
             "next_url": ("next",), "offset": ("param", "total"), "none": ()}[style]
    pagination = Pagination(
        style=style, next=sub.string("next"), param=sub.string("param"),
        more=sub.string("more"), last=sub.string("last", "id") or "id",
        total=sub.string("total"),
        limit=sub.integer("limit", 0, minimum=1) if sub.has("limit") else None)
    missing = [key for key in needs if getattr(pagination, key) is None]
    if missing:
        raise sub.error(f"style {style!r} needs {', '.join(missing)}")
    sub.finish()
    return pagination


def _not_found(opts: Options, where: str) -> tuple[FieldCheck, ...] | None:
    zero = opts.choice("not_found", ("error", "zero"), "error") == "zero"
    checks = FieldCheck.table(opts.table("not_found_where", scalars=True), where)
    if checks and not zero:
        raise opts.error("'not_found_where' needs not_found = 'zero'")
    return checks if zero else None


def _confirm(opts: Options, where: str) -> tuple[Confirm, ...]:
    reads = []
    for index, table in enumerate(opts.tables("confirm")):
        sub = Options(table, f"{where}: confirm[{index}]")
        path = _path(sub, "path", where)
        checks = FieldCheck.table(sub.table("where", scalars=True), where)
        if not path.text or not checks:
            raise sub.error("a confirm read needs 'path' and 'where'")
        sub.finish()
        reads.append(Confirm(path, checks))
    return tuple(reads)


def _budget(opts: Options, base_url: str) -> Budget | None:
    """A minute's worth may go at once (`budget_burst`, by default `budget_per_minute`)."""
    name = opts.string("budget", "") or ""
    if not opts.has("budget_per_minute"):
        opts.number("budget_burst", 1)
        return None
    per_minute = opts.number("budget_per_minute", 0)
    burst = opts.number("budget_burst", max(per_minute, 1))
    if per_minute <= 0 or burst < 1:
        raise opts.error("'budget_per_minute' must be positive and 'budget_burst' at least 1")
    return BUDGETS.get(f"{base_url} {name}", per_minute, burst)


@dataclass(slots=True)
class _Read:
    """What the pages of one read found, and whether the read was cut (and why)."""

    matches: dict[str, Match]
    at: datetime | None = None
    cut: str | None = None


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
        self._clock = clock
        self._clients = Clients({}, transport)

    def __repr__(self) -> str:
        # Names the credential's variables, never their values; headers are left out on purpose.
        spec = self.spec
        env = ",".join(spec.credential.env_names) if spec.credential else None
        return (f"HttpJsonProbe(name={self.name!r}, url={spec.base_url + spec.path.text!r}, "
                f"authority={spec.authority.value!r}, token_env={env!r})")

    def probe(self, target: ProbeTarget) -> Observation | Receipt:
        try:
            headers = {k: t.render(target) for k, t in self.spec.headers.items()}
            if self.spec.credential is not None:
                headers.update(self.spec.credential.headers())
            return self._read(target, headers)
        except (MissingCredential, MissingValue, FetchError, UnusableResponse) as exc:
            return self._unavailable(target, str(exc))

    def _fetch(self, session: httpx.Client, url: str, params: Mapping[str, str],
               headers: Mapping[str, str], deadline: float) -> Reply:
        return get(session, url, params, self.spec.policy, self._clock, deadline=deadline,
                   headers=headers, budget=self.spec.budget)

    def _read(self, target: ProbeTarget, headers: Mapping[str, str]) -> Observation | Receipt:
        spec = self.spec
        url = spec.base_url + spec.path.render(target, lambda value: quote(value, safe=""))
        params: Mapping[str, str] = {k: t.render(target) for k, t in spec.params.items()}
        deadline = time.monotonic() + spec.policy.deadline_s
        read = _Read({})
        with self._clients.client() as session:
            for page in range(spec.max_pages):
                try:
                    reply = self._fetch(session, url, params, headers, deadline)
                except FetchError as exc:
                    if page == 0:
                        raise
                    read.cut = f"page {page + 1}: {exc}"
                    break
                read.at = read.at or reply.at
                if reply.status == 404 and page == 0 and self._means_zero(
                        session, reply, target, headers, deadline):
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
        if read.cut is not None and not read.matches:
            return self._unavailable(target, f"read cut short: {read.cut}", read.at)
        return Observation(target.operation_id, read.at, self.name, spec.authority,
                           tuple(read.matches.values()))

    def _receipt(self, target: ProbeTarget, reply: Reply, found: Found) -> Observation | Receipt:
        if not found.matches:
            return self._unavailable(target, "the record's status decides nothing", reply.at)
        match = found.matches[0]
        return Receipt(target.operation_id, reply.at, match.provider_ref, match.request_hash,
                       source="lookup")

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

    def _means_zero(self, session: httpx.Client, reply: Reply, target: ProbeTarget,
                    headers: Mapping[str, str], deadline: float) -> bool:
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
            answer = self._fetch(session, url, {}, headers, deadline)
            if not 200 <= answer.status < 300:
                raise UnusableResponse(f"HTTP {answer.status} from the confirm read "
                                       f"{confirm.path.text}: a 404 proves no zero")
            if not all(check.holds(_json(answer.content), target) for check in confirm.checks):
                raise UnusableResponse(f"the confirm read {confirm.path.text} shows another "
                                       "account or mode: a 404 proves no zero")
        return True

    def _unavailable(self, target: ProbeTarget, error: str,
                     at: datetime | None = None) -> Observation:
        return Observation(target.operation_id, at or self._clock(), self.name,
                           Authority.UNAVAILABLE, error=error)


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
