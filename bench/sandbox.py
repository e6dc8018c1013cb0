"""The sandbox provider in its own process, with a fixed latency on every read and a count of
reads per path, for the reconciliation benchmarks:

    python -m bench.sandbox --latency-ms 20 [--applied KEY_PREFIX --count N]

Every GET under a provider waits `latency-ms` on the server (an `asyncio.sleep`, so 64 reads in
flight cost nothing) before the sandbox answers. `--applied` seeds key records for
`KEY_PREFIX-{i}` with even i below N, as if those charges had gone through: probing them
finds a receipt, probing the others an authoritative zero.

`GET /_bench/reads` answers {"reads", "paths", "repeated", "overlapping"}: reads in all, distinct
paths read, paths read more than once, and paths read twice at the same time (two sweepers on
one operation at once).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from bench.operations import REQUEST_HASH
from reconciler.infra.serving import base_url, bind
from reconciler.sandbox.app import create_app
from reconciler.sandbox.state import SandboxState

READS_PATH = "/_bench/reads"


class SlowReads:
    """ASGI middleware: delays provider reads and counts them."""

    def __init__(self, app: ASGIApp, latency_s: float) -> None:
        self.app = app
        self.latency_s = latency_s
        self.reads: Counter[str] = Counter()
        self.inside: Counter[str] = Counter()
        self.overlapping: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or scope["method"] != "GET" or path.startswith("/_"):
            if path == READS_PATH:
                await self._answer_reads(send)
                return
            await self.app(scope, receive, send)
            return
        # One event loop: no lock needed around these counters.
        self.reads[path] += 1
        self.inside[path] += 1
        if self.inside[path] > 1:
            self.overlapping.add(path)
        try:
            await asyncio.sleep(self.latency_s)
            await self.app(scope, receive, send)
        finally:
            self.inside[path] -= 1

    async def _answer_reads(self, send: Send) -> None:
        body = json.dumps({"reads": sum(self.reads.values()), "paths": len(self.reads),
                           "repeated": sum(1 for n in self.reads.values() if n > 1),
                           "overlapping": len(self.overlapping)}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def seed_applied(state: SandboxState, key_prefix: str, count: int) -> int:
    """Key records, with their charge, for every even-numbered key below `count`."""
    seeded = 0
    for i in range(0, count, 2):
        key = f"{key_prefix}-{i}"
        state.claim_key(key, REQUEST_HASH)
        state.finish_key(key, {"id": f"ch_bench_{i}", "object": "charge",
                               "request_hash": REQUEST_HASH})
        seeded += 1
    return seeded


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sandbox")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--applied", default=None, help="key prefix of the applied charges")
    parser.add_argument("--count", type=int, default=0)
    args = parser.parse_args(argv)
    state = SandboxState()
    if args.applied:
        seed_applied(state, args.applied, args.count)
    app = SlowReads(create_app(state), args.latency_ms / 1000)
    sock = bind("127.0.0.1", 0)
    print(f"serving on {base_url(sock)}", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, backlog=2048)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
