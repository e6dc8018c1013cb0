"""Stripe's search query language, as far as the sandbox's PaymentIntents and Charges need it
(https://docs.stripe.com/search#search-query-language), parsed into a predicate over an object.

A query is clauses joined by `AND` or by `OR` (not both; no parentheses; at most 10 clauses).
A clause is `[-]field OP value`: `:` exact match, `~` substring (3 characters or more), `>`,
`<`, `>=`, `<=` on numbers and timestamps (`created>1700000000`); `metadata['key']` or
`metadata["key"]` names a metadata value; strings are quoted (`'...'` or `"..."`, `\\"` inside),
numbers are not; `field:null` matches an absent value. What Stripe does not accept (a parse
error, a field the resource cannot be searched by) is `SearchQueryError` with Stripe's own
message, which the endpoint answers as Stripe's 400.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

JSONObject = dict[str, Any]
Predicate = Callable[[JSONObject], bool]

#: The query fields of each resource the sandbox serves
#: (https://docs.stripe.com/search#query-fields-for-payment-intents, ...-for-charges), and what
#: an object the sandbox does not fill in holds for it.
FIELDS: dict[str, dict[str, Any]] = {
    "payment_intents": {"amount": None, "created": None, "currency": None, "customer": None,
                        "metadata": None, "status": None},
    "charges": {"amount": None, "created": None, "currency": None, "customer": None,
                "disputed": False, "metadata": None, "refunded": False, "status": None},
}
_MAX_CLAUSES = 10
_PARSE_ERROR = "We were unable to parse your search query."

_TOKEN = re.compile(r"""
    \s*(?:
      (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
    | (?P<op>>=|<=|[:~<>])
    | (?P<neg>-)(?=[A-Za-z])
    | (?P<word>[A-Za-z_][A-Za-z0-9_.]*|-?[0-9]+(?:\.[0-9]+)?)
    | (?P<bracket>\[)
    | (?P<close>\])
    )""", re.VERBOSE)


class SearchQueryError(ValueError):
    """A query Stripe would refuse, with Stripe's message."""


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    text: str


def _tokens(query: str) -> list[_Token]:
    found: list[_Token] = []
    at = 0
    while at < len(query.rstrip()):
        match = _TOKEN.match(query, at)
        if match is None or match.end() == at:
            raise SearchQueryError(_PARSE_ERROR)
        kind = match.lastgroup or ""
        found.append(_Token(kind, match[kind]))
        at = match.end()
    return found


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text[1:-1])


def parse(query: str, resource: str) -> Predicate:
    """The predicate `query` selects by, for `resource` ("payment_intents" or "charges")."""
    tokens = _tokens(query)
    clauses: list[Predicate] = []
    joins: set[str] = set()
    at = 0
    while True:
        clause, at = _clause(tokens, at, resource)
        clauses.append(clause)
        if at == len(tokens):
            break
        join = tokens[at]
        if join.kind != "word" or join.text not in ("AND", "OR"):
            raise SearchQueryError(_PARSE_ERROR)
        joins.add(join.text)
        at += 1
    if len(joins) > 1:
        raise SearchQueryError("Queries may not mix AND and OR clauses.")
    if len(clauses) > _MAX_CLAUSES:
        raise SearchQueryError(f"A query may have at most {_MAX_CLAUSES} clauses.")
    if joins == {"OR"}:
        return lambda obj: any(clause(obj) for clause in clauses)
    return lambda obj: all(clause(obj) for clause in clauses)


def _clause(tokens: list[_Token], at: int, resource: str) -> tuple[Predicate, int]:
    def take(kind: str) -> str:
        nonlocal at
        if at >= len(tokens) or tokens[at].kind != kind:
            raise SearchQueryError(_PARSE_ERROR)
        at += 1
        return tokens[at - 1].text

    negated = at < len(tokens) and tokens[at].kind == "neg"
    at += negated
    field = take("word")
    key: str | None = None
    if field not in FIELDS[resource]:
        raise SearchQueryError(
            f"Field `{field}` is an unsupported search field for resource `{resource}`. See "
            f"http://stripe.com/docs/search#query-fields-for-{resource.replace('_', '-')} for "
            "a list of supported fields.")
    if field == "metadata":
        take("bracket")
        key = _unquote(take("string"))
        take("close")
    op = take("op")
    if at < len(tokens) and tokens[at].kind == "string":
        value: str | float | None = _unquote(tokens[at].text)
    elif at < len(tokens) and tokens[at].kind == "word":
        text = tokens[at].text
        value = None if text == "null" else _number(text)
    else:
        raise SearchQueryError(_PARSE_ERROR)
    at += 1
    test = _test(op, value)
    default = FIELDS[resource][field]

    def clause(obj: JSONObject) -> bool:
        actual = obj.get(field, default)
        if key is not None:
            actual = (actual or {}).get(key)
        return test(actual) != negated

    return clause, at


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise SearchQueryError(_PARSE_ERROR) from None


def _test(op: str, value: str | float | None) -> Callable[[Any], bool]:
    if value is None:
        if op != ":":
            raise SearchQueryError(_PARSE_ERROR)
        return lambda actual: actual is None
    if op == "~":
        if not isinstance(value, str) or len(value) < 3:
            raise SearchQueryError("A substring (~) query needs at least 3 characters.")
        return lambda actual: isinstance(actual, str) and value.lower() in actual.lower()
    if op == ":":
        return lambda actual: actual is not None and _same(actual, value)
    if not isinstance(value, float):
        raise SearchQueryError(_PARSE_ERROR)
    compare: dict[str, Callable[[float], bool]] = {
        ">": lambda n: n > value, "<": lambda n: n < value,
        ">=": lambda n: n >= value, "<=": lambda n: n <= value}
    return lambda actual: (isinstance(actual, int | float) and not isinstance(actual, bool)
                           and compare[op](actual))


def _same(actual: Any, value: str | float) -> bool:
    if isinstance(value, float):
        return isinstance(actual, int | float) and not isinstance(actual, bool) \
            and actual == value
    if isinstance(actual, bool):
        return str(actual).lower() == value.lower()
    # Stripe's exact match on strings ignores case (`currency:'EUR'` finds eur).
    return isinstance(actual, str) and actual.lower() == value.lower()
