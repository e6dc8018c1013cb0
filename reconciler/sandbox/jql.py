"""The part of Jira's query language the sandbox's search answers: clauses `FIELD = VALUE`
joined by `AND`, over `project`, `labels`, `key` and issue entity properties
(`issue.property[KEY].PATH`), and an optional `ORDER BY created|key [ASC|DESC]`. Anything
else is refused with Jira's own words, so a probe whose query the sandbox cannot read sees the
400 Jira would send, never a silently wrong answer.

Values are bare words or double-quoted strings (`\\"` and `\\\\` escaped), as in Jira
(https://support.atlassian.com/jira-software-cloud/docs/use-advanced-search-with-jira-query-language-jql/).
The enhanced search refuses a query with no restriction at all
(https://developer.atlassian.com/cloud/jira/platform/rest/v3/api-group-issue-search/: "unbounded
JQL queries are not allowed"); so does this one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_TOKEN = re.compile(r'\s*(?:(?P<text>"(?:[^"\\]|\\.)*")|(?P<op>!=|<=|>=|=|~|<|>|\(|\)|,)'
                    r'|(?P<word>[^\s"=!~<>(),]+))')
_PROPERTY = re.compile(r"issue\.property\[(?P<key>[^\]]+)\]\.(?P<path>[\w.]+)", re.IGNORECASE)
_ORDERABLE = ("created", "key")


class JqlError(ValueError):
    """A query this subset (or Jira) cannot run; the message is Jira's."""


#: Whether one issue (the sandbox's stored JSON: `key`, `fields`, `properties`) is matched.
Clause = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True, slots=True)
class Query:
    clauses: tuple[Clause, ...]
    #: Newest first, Jira's default; issue keys here are numbered in creation order, so
    #: `ORDER BY key` and `ORDER BY created` sort alike.
    descending: bool = True

    def matches(self, issue: dict[str, Any]) -> bool:
        return all(clause(issue) for clause in self.clauses)


def parse(jql: str) -> Query:
    """`jql` as a `Query`, or `JqlError` with the message Jira gives."""
    tokens = _tokens(jql)
    clauses: list[Clause] = []
    descending = True
    at = 0
    while at < len(tokens):
        kind, value = tokens[at]
        if kind == "word" and value.lower() == "order":
            descending = _order_by(tokens[at:])
            break
        if clauses:
            if not (kind == "word" and value.lower() == "and"):
                raise JqlError(f"Error in the JQL Query: Expecting either 'OR' or 'AND' but got "
                               f"'{value}'.")
            at += 1
        clause, at = _clause(tokens, at)
        clauses.append(clause)
    if not clauses:
        raise JqlError("Unbounded JQL queries are not allowed here. Please add a search "
                       "restriction to your query.")
    return Query(tuple(clauses), descending)


def _tokens(jql: str) -> list[tuple[str, str]]:
    tokens, at = [], 0
    while jql[at:].strip():
        found = _TOKEN.match(jql, at)
        if found is None or found.lastgroup is None:
            raise JqlError(f"Error in the JQL Query: The character '{jql[at:].strip()[0]}' is "
                           f"a reserved JQL character. You must enclose it in a string or use "
                           f"the escape '\\u{ord(jql[at:].strip()[0]):04x}' instead.")
        kind = found.lastgroup
        text = found.group(kind)
        if kind == "text":
            text = re.sub(r"\\(.)", r"\1", text[1:-1])
        tokens.append((kind, text))
        at = found.end()
    return tokens


def _clause(tokens: list[tuple[str, str]], at: int) -> tuple[Clause, int]:
    if at + 3 > len(tokens):
        raise JqlError("Error in the JQL Query: Expecting operator but got the end of the "
                       "query.")
    (kind, field), (op_kind, op), (value_kind, value) = tokens[at:at + 3]
    if kind != "word":
        raise JqlError(f"Error in the JQL Query: Expecting a field name but got '{field}'.")
    if op_kind != "op" or op != "=":
        raise JqlError(f"Error in the JQL Query: the operator '{op}' is not supported by "
                       f"the sandbox for the field '{field}'.")
    if value_kind not in ("word", "text"):
        raise JqlError(f"Error in the JQL Query: Expecting a value but got '{value}'.")
    return _field_clause(field, value), at + 3


def _field_clause(field: str, value: str) -> Clause:
    name = field.lower()
    if name == "project":
        return lambda issue: value in (_dig(issue, "fields.project.key"),
                                       _dig(issue, "fields.project.id"))
    if name == "labels":
        return lambda issue: value in (_dig(issue, "fields.labels") or [])
    if name in ("key", "issuekey", "id"):
        return lambda issue: value in (issue.get("key"), issue.get("id"))
    prop = _PROPERTY.fullmatch(field)
    if prop is not None:
        key, path = prop["key"], prop["path"]
        return lambda issue: _text(_dig(issue.get("properties", {}).get(key), path)) == value
    raise JqlError(f"Field '{field}' does not exist or you do not have permission to view it.")


def _order_by(tokens: list[tuple[str, str]]) -> bool:
    """Whether `ORDER BY ...` sorts newest first."""
    words = [value.lower() for _, value in tokens]
    if len(words) < 3 or words[1] != "by" or words[2] not in _ORDERABLE or len(words) > 4 or (
            len(words) == 4 and words[3] not in ("asc", "desc")):
        raise JqlError("Error in the JQL Query: the sandbox orders only by created or key, "
                       "ASC or DESC.")
    return len(words) == 3 or words[3] == "desc"


def _dig(data: Any, path: str) -> Any:
    for step in path.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(step)
    return data


def _text(value: Any) -> str | None:
    """An entity property's value as JQL compares it: numbers and booleans by their text."""
    if isinstance(value, bool):
        return str(value).lower()
    return None if value is None or isinstance(value, dict | list) else str(value)
