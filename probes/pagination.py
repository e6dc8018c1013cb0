"""Following a provider's pages, and knowing when a read was cut.

Each style is the provider's own way of saying "more follows":

    cursor      a cursor in the body, sent back as a query parameter: Slack
                (`response_metadata.next_cursor` -> `cursor`, with `has_more`), Stripe search
                (`next_page` -> `page`)
    after_last  `has_more` and the last object's id sent back as `starting_after`: Stripe lists
    link        the `Link` header's rel="next" URL: GitHub
    next_url    a next-page URI in the body (`next_page_uri`): Twilio
    offset      `offset` moved on by the page's length until `total` is reached: Postmark

A read is complete only when the provider said it ended. When pages remain after `max_pages`,
when the provider says more follows but gives no way there, or when a next page would leave the
configured host, the read is cut: it proves no zero (SPEC section 3).

Some providers say "more follows" with a flag (`more`: Slack's and Stripe's `has_more`), some
say "this is the last page" (`last_flag`: Jira's `isLast`, on `/rest/api/3/search/jql`,
https://developer.atlassian.com/cloud/jira/platform/rest/v3/api-group-issue-search/). When
either is configured, a page that does not carry it as a boolean has not said it was the last:
the read is cut. (Stripe documents `has_more` on every list page,
https://docs.stripe.com/api/pagination; a page without it is not a page we understand.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from probes.matching import dig

STYLES = ("none", "cursor", "after_last", "link", "next_url", "offset")
_LINK_NEXT = re.compile(r'<([^>]*)>\s*;[^,]*\brel="?next"?', re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Page:
    """The next request to make: `url` and `params` (the first page's params, moved on)."""

    url: str
    params: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Cut:
    """The provider has more, and this read will not get it; `why` says what was missed."""

    why: str


@dataclass(frozen=True, slots=True)
class _More:
    """The page says more follows; `why` quotes the flag that says it."""

    why: str


def _stuck(more: _More | Cut | None, why: str) -> Cut | None:
    """With no way to a next page: the end of the read, or (when the page did not say it was
    the last) a cut."""
    return Cut(f"{more.why} but {why}") if isinstance(more, _More) else more


@dataclass(frozen=True, slots=True)
class Pagination:
    """One style's settings; unused ones stay None."""

    style: str = "none"
    next: str | None = None     # cursor / next_url: body path of the cursor or the URI
    param: str | None = None    # cursor / after_last / offset: the query parameter to send
    more: str | None = None     # body path of a boolean that says more follows (has_more)
    last_flag: str | None = None  # body path of a boolean that says this page is the last
    last: str = "id"            # after_last: the field of the last object to send back
    total: str | None = None    # offset: body path of the total count
    limit: int | None = None    # offset: the most `offset + count` may reach (Postmark: 10000)

    def following(self, url: str, params: Mapping[str, str], body: Any,
                  headers: Mapping[str, str], items: list[dict[str, Any]],
                  origin: str) -> Page | Cut | None:
        """The next page, a `Cut`, or None when the provider said this was the last page."""
        more = self._more(body)
        if self.style == "cursor":
            cursor = self._text(body, self.next)
            if cursor:
                return Page(url, {**params, str(self.param): cursor})
            return _stuck(more, f"{self.next} is empty")
        if self.style == "after_last":
            if not isinstance(more, _More):
                return more
            last = items[-1].get(self.last) if items else None
            if not isinstance(last, str) or not last:
                return Cut(f"{more.why} but the page has no last {self.last!r}")
            return Page(url, {**params, str(self.param): last})
        if self.style == "link":
            found = _LINK_NEXT.search(headers.get("link", ""))
            return self._elsewhere(url, found.group(1), origin) if found else (
                _stuck(more, "there is no next link"))
        if self.style == "next_url":
            uri = self._text(body, self.next)
            if uri:
                # Twilio's next_page_uri starts at the API root; its SDK appends it to the base.
                nxt = origin.rstrip("/") + uri if uri.startswith("/") else urljoin(url, uri)
                return self._elsewhere(url, nxt, origin)
            return _stuck(more, f"{self.next} is empty")
        if self.style == "none":
            return _stuck(more, "this probe does not page")
        return self._offset(url, params, body, items)

    def _offset(self, url: str, params: Mapping[str, str], body: Any,
                items: list[dict[str, Any]]) -> Page | Cut | None:
        try:
            total = dig(body, str(self.total))
        except LookupError:
            return Cut(f"the answer has no {self.total!r}")
        offset = int(params.get(str(self.param), "0") or 0) + len(items)
        if not isinstance(total, int) or isinstance(total, bool):
            return Cut(f"{self.total!r} is not a count")
        if offset >= total:
            return None
        if not items:
            return Cut(f"{self.total} is {total} but the page at offset {offset} was empty")
        if self.limit is not None and offset >= self.limit:
            return Cut(f"{total} objects, past the provider's limit of {self.limit} a search")
        return Page(url, {**params, str(self.param): str(offset)})

    def _more(self, body: Any) -> _More | Cut | None:
        """None when the page says it is the last (or no flag is configured), `_More` when it
        says more follows, a `Cut` when it does not say (the flag is missing)."""
        flag, last = (self.more, False) if self.more is not None else (self.last_flag, True)
        if flag is None:
            return None
        try:
            value = dig(body, flag)
        except LookupError:
            value = None
        if not isinstance(value, bool):
            return Cut(f"the page does not say whether it is the last ({flag} is missing)")
        return None if value is last else _More(f"{flag} is {str(value).lower()}")

    @staticmethod
    def _text(body: Any, path: str | None) -> str | None:
        try:
            value = dig(body, str(path))
        except LookupError:
            return None
        return value if isinstance(value, str) and value else None

    @staticmethod
    def _elsewhere(url: str, nxt: str, origin: str) -> Page | Cut:
        # The credential goes along with every page: never to a host it was not configured for.
        here, there = urlsplit(origin), urlsplit(urljoin(url, nxt))
        if (here.scheme, here.netloc) != (there.scheme, there.netloc):
            return Cut("the next page is on another host")
        return Page(there.geturl(), {})
