"""aiohttp as the probes' wire, for the `reconcile` benchmark's comparison (issue 35: "aiohttp
measured as the probe wire, and whichever of it and the product's own client is simpler wins if
within 10%").

The seam is the one the product's client sits behind: `transport.aget` reads through the
session `transport.Clients.aclient` hands it, an `http11.LeanClient` that `Clients`
makes by its name in `probes.transport`. `installed()` puts `AiohttpConnection` under that
name while a measurement runs, so everything above the wire (the probe, its tries, deadline,
size cap and error mapping, the probe loop) is the product's in both sides:

    HttpJsonProbe.aprobe ─▶ transport.aget ─▶ session.stream(url, params, headers, timeout)
                                                 ├─ product: http11.LeanClient (httptools)
                                                 └─ this: one aiohttp.ClientSession per loop

The product's `Clients` keeps a session per call in flight, each with its own connection;
aiohttp pools connections itself, so the handles here share one `ClientSession` per event loop,
as the product would use aiohttp if it switched (the idle-session bookkeeping of `Clients`
would then go). Errors are raised as httpx's classes, as `http11` raises them, so
`transport` maps both wires the one way. Kept in bench/: the product does not need the seam.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from unittest import mock

import aiohttp
import httpx
from multidict import CIMultiDictProxy

from probes import transport

#: aiohttp's pieces of a body, as `http11` hands them (at most 64 KiB, decoded).
CHUNK = 64 * 1024

#: The session of each event loop the measured probes run on, closed by `installed()`.
_sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}


class AiohttpResponse:
    """An aiohttp answer as `transport.aget` reads one: `status_code`, `headers` (looked up
    case-insensitively) and the decoded body through `aiter_bytes`."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code = response.status
        self.headers: CIMultiDictProxy[str] = response.headers

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        async for chunk in self._response.content.iter_chunked(CHUNK):
            yield chunk


class AiohttpConnection:
    """`http11.LeanClient`'s interface over the loop's `aiohttp.ClientSession`:
    GETs with the client's headers and the caller's, no redirect followed, the timeout on the
    connect and on every wait for bytes."""

    def __init__(self, headers: Mapping[str, str], tls: ssl.SSLContext) -> None:
        self._headers, self._tls = dict(headers), tls

    @asynccontextmanager
    async def stream(self, url: str, *, params: Mapping[str, str] | None = None,
                     headers: Mapping[str, str] | None = None,
                     timeout: float) -> AsyncIterator[AiohttpResponse]:
        loop = asyncio.get_running_loop()
        session = _sessions.get(loop)
        if session is None:
            session = _sessions[loop] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._tls))
        try:
            async with session.get(url, params=params, headers={**self._headers,
                                                                **(headers or {})},
                                   allow_redirects=False,
                                   timeout=aiohttp.ClientTimeout(
                                       total=None, connect=timeout,
                                       sock_read=timeout)) as response:
                yield AiohttpResponse(response)
        except TimeoutError:  # aiohttp's timeouts among them (ServerTimeoutError)
            raise httpx.ReadTimeout("timed out") from None
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(type(exc).__name__) from None
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise httpx.ReadError(type(exc).__name__) from None
        except aiohttp.ClientError as exc:  # a malformed answer, as httptools refuses one
            raise httpx.RemoteProtocolError(type(exc).__name__) from None

    def close(self) -> None:
        """Nothing of its own: the connections are the loop's session's (`installed`)."""


@contextmanager
def installed() -> Iterator[None]:
    """Probe reads over aiohttp while inside (their loops must still run at the exit, where
    each loop's session is closed on it)."""
    try:
        with mock.patch.object(transport, "LeanClient", AiohttpConnection):
            yield
    finally:
        while _sessions:
            loop, session = _sessions.popitem()
            if not loop.is_closed():
                asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout=10)
