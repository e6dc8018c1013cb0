"""The declarative probe: one GET against a JSON API, described entirely by options.

Every built-in recipe is a preset of this probe. The options (TOML keys) are listed in
docs/probes.md; in short: where to read (`base_url`, `path`, `params`), how to authenticate
(`token_env`, `auth_header`), where the matches are (`items` or `item`, `ref`, `hash`), which of
them are the operation's (`where`, `contains`), what a 404 means (`not_found`), and what the
answer proves (`authority`, `emit`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from probes.base import ProbeTarget, utc_now
from probes.credentials import Credential
from probes.matching import Extraction, FieldCheck, UnusableResponse
from probes.options import Options
from probes.templates import MissingValue, Template
from probes.transport import DEFAULT_POLICY, Clients, FetchError, RetryPolicy, get
from reconciler.domain import Authority, Observation, Receipt

#: What a probe's configuration may claim; `unavailable` is the probe's to report, not to claim.
CLAIMABLE = (Authority.AUTHORITATIVE, Authority.LAGGING, Authority.WEAK)


@dataclass(frozen=True, slots=True)
class HttpJsonSpec:
    """A parsed, validated description of one declarative probe."""

    base_url: str
    path: Template
    params: Mapping[str, Template]
    headers: Mapping[str, str]
    credential: Credential | None
    auth_header: str | None
    extraction: Extraction
    require: tuple[FieldCheck, ...]
    #: None: a 404 is an error. Otherwise a 404 whose body passes these checks is zero matches.
    not_found: tuple[FieldCheck, ...] | None
    authority: Authority
    receipt: bool
    policy: RetryPolicy

    @classmethod
    def parse(cls, options: Mapping[str, Any], env: Mapping[str, str], where: str) -> HttpJsonSpec:
        opts = Options(options, where)
        opts.choice("method", ("GET",), "GET")  # probes only read: a write could repeat the effect
        base_url = opts.required_string("base_url").rstrip("/")
        if urlsplit(base_url).scheme not in ("http", "https"):
            raise opts.error("option 'base_url' must be an http:// or https:// URL")
        path = opts.string("path", "") or ""
        if path and not path.startswith("/"):
            raise opts.error("option 'path' must start with '/'")
        token_env = opts.string("token_env")
        spec = cls(
            base_url=base_url,
            path=Template.parse(path, where),
            params={k: Template.parse(v, where) for k, v in opts.table("params").items()},
            headers=opts.table("headers"),
            credential=Credential.from_env(token_env, env) if token_env else None,
            auth_header=opts.string("auth_header"),
            extraction=_extraction(opts, where),
            require=FieldCheck.table(opts.table("require", scalars=True), where),
            not_found=_not_found(opts, where),
            authority=Authority(opts.choice("authority", tuple(CLAIMABLE))),
            receipt=opts.choice("emit", ("observation", "receipt"), "observation") == "receipt",
            policy=RetryPolicy(
                tries=opts.integer("tries", DEFAULT_POLICY.tries, minimum=1),
                backoff_s=opts.number("backoff_s", DEFAULT_POLICY.backoff_s),
                timeout_s=opts.number("timeout_s", DEFAULT_POLICY.timeout_s),
                deadline_s=opts.number("deadline_s", DEFAULT_POLICY.deadline_s),
                max_bytes=opts.integer("max_bytes", DEFAULT_POLICY.max_bytes, minimum=1)),
        )
        if not (spec.policy.timeout_s > 0 and spec.policy.deadline_s > 0):
            raise opts.error("options 'timeout_s' and 'deadline_s' must be positive")
        if spec.receipt and not spec.extraction.single:
            raise opts.error("emit = 'receipt' reads one record: use 'item', not 'items'")
        opts.finish()
        return spec


def _extraction(opts: Options, where: str) -> Extraction:
    items, item = opts.string("items"), opts.string("item")
    if (items is None) == (item is None):
        raise opts.error("set exactly one of 'items' (path to a list) or 'item' (one object; "
                         "'' for the whole response)")
    page_size = opts.integer("page_size", 0, minimum=1) if opts.has("page_size") else None
    if item is not None and page_size is not None:
        raise opts.error("'page_size' applies to 'items' lists only")
    return Extraction(
        path=item if item is not None else items or "",
        single=item is not None,
        ref=opts.required_string("ref"),
        hash=opts.string("hash"),
        where=FieldCheck.table(opts.table("where", scalars=True), where)
        + FieldCheck.table(opts.table("contains"), where, contains=True),
        page_size=page_size,
    )


def _not_found(opts: Options, where: str) -> tuple[FieldCheck, ...] | None:
    zero = opts.choice("not_found", ("error", "zero"), "error") == "zero"
    checks = FieldCheck.table(opts.table("not_found_where", scalars=True), where)
    if checks and not zero:
        raise opts.error("'not_found_where' needs not_found = 'zero'")
    return checks if zero else None


class HttpJsonProbe:
    """A `Probe` that reads one JSON endpoint as `spec` describes; never raises, never writes."""

    def __init__(self, name: str, spec: HttpJsonSpec, *,
                 transport: httpx.BaseTransport | None = None,
                 clock: Callable[[], datetime] = utc_now) -> None:
        self.name = name
        self.spec = spec
        self._clock = clock
        auth = spec.credential.headers(spec.auth_header) if spec.credential else {}
        self._clients = Clients({**spec.headers, **auth}, transport)

    def __repr__(self) -> str:
        # Names the credential's variable, never its value; headers are left out on purpose.
        spec = self.spec
        env = spec.credential.env_name if spec.credential else None
        return (f"HttpJsonProbe(name={self.name!r}, url={spec.base_url + spec.path.text!r}, "
                f"authority={spec.authority.value!r}, token_env={env!r})")

    def probe(self, target: ProbeTarget) -> Observation | Receipt:
        credential = self.spec.credential
        if credential is not None and credential.value is None:
            return self._unavailable(target, f"credentials not set: {credential.env_name}")
        try:
            return self._read(target)
        except (MissingValue, FetchError, UnusableResponse) as exc:
            return self._unavailable(target, str(exc))

    def _read(self, target: ProbeTarget) -> Observation | Receipt:
        spec = self.spec
        url = spec.base_url + spec.path.render(target, lambda value: quote(value, safe=""))
        params = {key: template.render(target) for key, template in spec.params.items()}
        with self._clients.client() as session:
            reply = get(session, url, params, spec.policy, self._clock)
        if reply.status == 404 and self._means_zero(reply.content, target):
            return Observation(target.operation_id, reply.at, self.name, spec.authority)
        if not 200 <= reply.status < 300:
            raise UnusableResponse(f"HTTP {reply.status}")
        body = _json(reply.content)
        for check in spec.require:
            if not check.holds(body, target):
                raise UnusableResponse(f"the response failed the check on {check.path!r}")
        found = spec.extraction.found(body, target)
        if spec.receipt:
            match = found.matches[0]
            return Receipt(target.operation_id, reply.at, match.provider_ref, match.request_hash,
                           source="lookup")
        # A zero in a list that may go on past this page proves nothing.
        authority = spec.authority if found.matches or found.complete else Authority.WEAK
        return Observation(target.operation_id, reply.at, self.name, authority, found.matches)

    def _means_zero(self, content: bytes, target: ProbeTarget) -> bool:
        """Whether a 404 says "no such object" (and not, say, "no such route")."""
        checks = self.spec.not_found
        if not checks:
            return checks is not None
        try:
            body = _json(content)
        except UnusableResponse:
            return False
        return all(check.holds(body, target) for check in checks)

    def _unavailable(self, target: ProbeTarget, error: str) -> Observation:
        return Observation(target.operation_id, self._clock(), self.name, Authority.UNAVAILABLE,
                           error=error)


def _json(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        raise UnusableResponse("the response is not JSON") from None


def http_json(name: str, options: Mapping[str, Any], env: Mapping[str, str], *,
              transport: httpx.BaseTransport | None = None,
              clock: Callable[[], datetime] = utc_now) -> HttpJsonProbe:
    """The `http_json` factory; `transport` and `clock` are for tests and embedding."""
    spec = HttpJsonSpec.parse(options, env, f"probe {name!r}")
    return HttpJsonProbe(name, spec, transport=transport, clock=clock)
