"""An HTTP/1.1 load generator, run in its own process so that it never shares an interpreter
(or a GIL) with the server it measures:

    python -m bench.loadgen '<json spec>'     # prints one JSON object: what it measured
    python -m bench.loadgen '<json spec>' F   # writes it to the file F instead (bench does)

Keep-alive connections, one request in flight on each. Closed loop (no `rate`): every
connection sends its next request as soon as the last answer is in, which measures the most the
server does. Open loop (`rate`, requests per second over all connections): each request has a
scheduled send time and its latency counts from then, so a server that falls behind is charged
for the queue it causes, not only for the requests it got to (no coordinated omission).

Asyncio streams on uvloop and a hand-written parser of the few response headers needed keep the
generator's own cost per request far below the server's.

Spec: url, method, path and body templates in which `{n}` is a number unique in the run (from
`first` on: runs that share a pool of ids each take their own range) and `{m}` is that number
modulo `modulo`, `{r}` a random number below `modulo`; connections, duration_s, warmup_s
(answers to requests scheduled in it are not counted), rate (optional), ok_statuses.

Besides the latencies, a run reports the longest time in its counted part with no answer at
all (a stall of the server, or of this process: both share the machine) and, in open loop, how
far a send fell behind its schedule (every connection was waiting on an answer).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

MAX_HEADER_BYTES = 64 * 1024
OK_STATUSES = (200, 201)


@dataclass(frozen=True, slots=True)
class Spec:
    url: str
    path: str
    method: str = "GET"
    body: str | None = None
    modulo: int = 1
    connections: int = 8
    duration_s: float = 3.0
    warmup_s: float = 0.5
    rate: float | None = None
    ok_statuses: tuple[int, ...] = OK_STATUSES
    first: int = 0


@dataclass(slots=True)
class Tally:
    """What the run saw: counted requests (after the warm-up), the latencies of those answered
    with one of `ok_statuses`, and every other answer, by status."""

    requests: int = 0
    elapsed_s: float = 0.0
    #: Every answer, the warm-up's included: what the server's CPU time over the run bought.
    answered: int = 0
    latencies_s: list[float] = field(default_factory=list)
    bad_statuses: dict[str, int] = field(default_factory=dict)
    sample_bad_body: str = ""
    #: The longest time after the warm-up in which no request got an answer.
    longest_gap_s: float = 0.0
    #: Open loop: the furthest a counted request's send fell behind its scheduled time, and
    #: the time from the actual send of each answer in `latencies_s` (the server's share,
    #: without the wait for a free connection) and of each 503 (how soon a refusal came).
    max_send_lag_s: float = 0.0
    service_s: list[float] = field(default_factory=list)
    refused_s: list[float] = field(default_factory=list)


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEADER_BYTES:
            raise ValueError("response headers too large")
        status_line, _, headers = head.partition(b"\r\n")
        status = int(status_line.split(b" ", 2)[1])
        length = None
        for line in headers.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        if length is None:
            raise ValueError("a response without Content-Length: not supported here")
        return status, await self.reader.readexactly(length)


def request_bytes(spec: Spec, host: str, n: int) -> bytes:
    def fill(template: str) -> str:
        return (template.replace("{n}", str(n)).replace("{m}", str(n % spec.modulo))
                .replace("{r}", str(random.randrange(spec.modulo))))

    lines = [f"{spec.method} {fill(spec.path)} HTTP/1.1", f"Host: {host}"]
    body = b""
    if spec.body is not None:
        body = fill(spec.body).encode()
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def run(spec: Spec) -> Tally:
    parts = urlsplit(spec.url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    connections = [Connection(*await asyncio.open_connection(host, port))
                   for _ in range(spec.connections)]
    tally = Tally()
    counter = iter(range(spec.first, spec.first + 10**12))
    start = time.perf_counter() + 0.05
    measured_from = start + spec.warmup_s
    end = measured_from + spec.duration_s
    last_answer = measured_from

    async def drive(index: int, conn: Connection) -> None:
        nonlocal last_answer
        # Open loop: this connection's share of the rate, its sends staggered against the
        # other connections'.
        interval = spec.connections / spec.rate if spec.rate else 0.0
        scheduled = start + index * interval / spec.connections
        while True:
            now = time.perf_counter()
            if spec.rate:
                if scheduled >= end:
                    return
                if scheduled > now:
                    await asyncio.sleep(scheduled - now)
            else:
                if now >= end:
                    return
                scheduled = now
            sent = time.perf_counter()
            status, body = await conn.exchange(request_bytes(spec, f"{host}:{port}",
                                                             next(counter)))
            done = time.perf_counter()
            tally.answered += 1
            if done > last_answer:
                tally.longest_gap_s = max(tally.longest_gap_s, done - last_answer)
                last_answer = done
            if scheduled >= measured_from:
                tally.requests += 1
                tally.max_send_lag_s = max(tally.max_send_lag_s, sent - scheduled)
                if status in spec.ok_statuses:
                    # The latency of answers that did the work: a refusal (503 overloaded)
                    # answers at once, and would make the tail look better than it was.
                    tally.latencies_s.append(done - scheduled)
                    if spec.rate:
                        tally.service_s.append(done - sent)
                else:
                    if spec.rate and status == 503:
                        tally.refused_s.append(done - sent)
                    tally.bad_statuses[str(status)] = tally.bad_statuses.get(str(status), 0) + 1
                    tally.sample_bad_body = tally.sample_bad_body or body[:300].decode(
                        errors="replace")
            scheduled += interval

    await asyncio.gather(*(drive(i, c) for i, c in enumerate(connections)))
    # Requests scheduled before `end` may finish after it; count the time they took.
    tally.elapsed_s = max(time.perf_counter(), end) - measured_from
    for conn in connections:
        conn.writer.close()
    return tally


def main(argv: list[str]) -> int:
    """`argv`: the spec as JSON, and optionally a file to write the result to (else stdout)."""
    raw: dict[str, Any] = json.loads(argv[0])
    raw["ok_statuses"] = tuple(raw.get("ok_statuses", OK_STATUSES))
    spec = Spec(**raw)
    try:
        import uvloop
    except ImportError:  # plain asyncio works too, at a higher cost per request
        tally = asyncio.run(run(spec))
    else:
        tally = uvloop.run(run(spec))
    if len(argv) > 1:
        # A file, not the pipe: under load a result over the pipe's 64 KiB still came back cut
        # at 65,536 bytes once, even with stdout set blocking again (below).
        Path(argv[1]).write_text(json.dumps(asdict(tally)))
    else:
        emit(tally)
    return 0


def emit(tally: Tally) -> None:
    """Print the result whole. The event loop may have left stdout non-blocking: a result
    over the pipe's 64 KiB would then be cut at 65,536 bytes."""
    os.set_blocking(sys.stdout.fileno(), True)
    print(json.dumps(asdict(tally)), flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
