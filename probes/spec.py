"""The declarative probe's configuration: its options (TOML keys, docs/probes.md) parsed and
checked into an `HttpJsonSpec` when the probe is built, so a typo fails at startup.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from probes.budget import BUDGETS, Budget
from probes.credentials import ProviderCredential
from probes.matching import Extraction, FieldCheck, StatusFilter
from probes.options import Options
from probes.pagination import STYLES, Pagination
from probes.templates import Template
from probes.transport import DEFAULT_POLICY, RetryPolicy
from reconciler.core.domain import Authority

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
    credential: ProviderCredential | None
    extraction: Extraction
    require: tuple[FieldCheck, ...]
    pagination: Pagination
    max_pages: int
    #: Body path of a boolean that, when true, says the answer may be missing objects.
    incomplete: str | None
    #: Correlation keys that name an effect this endpoint does not return (a Slack thread
    #: reply is not in the channel's history): an intent that carries one gets no zero here.
    blind_to: tuple[str, ...]
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
            blind_to=tuple(opts.list_of_strings("blind_to")),
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


def _credential(opts: Options, env: Mapping[str, str]) -> ProviderCredential | None:
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
    return ProviderCredential(token_env, env, scheme, header, username_env)


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
        + FieldCheck.table(opts.table("contains"), where, how="contains")
        + FieldCheck.table(opts.table("member", scalars=True), where, how="member"),
        status=_status(opts),
        marker=opts.string("marker"),
        author=FieldCheck.table(opts.table("author", scalars=True), where),
    )


def _strings(opts: Options, key: str) -> frozenset[str]:
    value = opts.list_of_strings(key)
    return frozenset(value)


def _status(opts: Options) -> StatusFilter | None:
    path = opts.string("status")
    effect, no_effect = _strings(opts, "effect_status"), _strings(opts, "no_effect_status")
    shown = opts.table("no_effect_status_with")
    if path is None:
        if effect or no_effect or shown:
            raise opts.error("'effect_status', 'no_effect_status' and 'no_effect_status_with' "
                             "need 'status' (its path)")
        return None
    if not effect:
        raise opts.error("'status' needs 'effect_status': the statuses that are the effect")
    if effect & no_effect:
        raise opts.error("a status cannot be both in 'effect_status' and 'no_effect_status'")
    if (effect | no_effect) & shown.keys():
        raise opts.error("a status in 'no_effect_status_with' is not the effect only when its "
                         "field holds a value: it cannot also be in 'effect_status' or "
                         "'no_effect_status'")
    return StatusFilter(path, effect, no_effect, tuple(sorted(shown.items())))


def _pagination(opts: Options) -> Pagination:
    table = opts.table("pagination", scalars=True)
    sub = Options(table, f"{opts.where}: pagination")
    style = sub.choice("style", STYLES, "none")
    needs = {"cursor": ("next", "param"), "after_last": ("param",), "link": (),
             "next_url": ("next",), "offset": ("param", "total"), "none": ()}[style]
    pagination = Pagination(
        style=style, next=sub.string("next"), param=sub.string("param"),
        more=sub.string("more"), last_flag=sub.string("last_flag"),
        last=sub.string("last", "id") or "id",
        total=sub.string("total"),
        limit=sub.integer("limit", 0, minimum=1) if sub.has("limit") else None)
    if pagination.more is not None and pagination.last_flag is not None:
        raise sub.error("set one of 'more' (true: more follows) or 'last_flag' (true: this is "
                        "the last page), not both")
    missing = [key for key in needs if getattr(pagination, key) is None]
    if style == "after_last" and pagination.more is None is pagination.last_flag:
        missing.append("more (or last_flag)")
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
