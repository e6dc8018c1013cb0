"""Running a tool's child process so that nothing it starts outlives the call.

The child leads a process group of its own, and everything it spawns stays in that group unless
it leaves on purpose (setsid). Whenever the call ends (normal exit, timeout or cancellation) the
group is stopped: SIGTERM, then SIGKILL after a grace period, and the child is reaped.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import cast

from reconciler.runtime.cancel import settle

OUTPUT_LIMIT = 64 * 1024
# How often a group is checked for members left once its leader has exited: the kernel gives no
# event for the last member leaving.
_POLL_S = 0.01
# SIGKILLed processes vanish within milliseconds, but orphans stay listed until init reaps them
# (some inits take a second or two). This bounds the wait for that, and for a process outside the
# group that holds a pipe open.
_AFTER_KILL_S = 5.0


@dataclass(frozen=True, slots=True)
class ProcessResult:
    returncode: int
    stdout: str  # at most the last `output_limit` bytes, decoded as UTF-8
    stderr: str


class ProcessTimeout(TimeoutError):
    """The command outlived its timeout and was stopped; its output until then is attached."""

    def __init__(self, argv: Sequence[str], timeout_s: float, stdout: str, stderr: str) -> None:
        super().__init__(f"{argv[0]!r} did not finish within {timeout_s:g} s and was stopped; "
                         "give it a larger timeout_s or a smaller piece of work")
        self.argv = tuple(argv)
        self.timeout_s = timeout_s
        self.stdout = stdout
        self.stderr = stderr


async def run_process(argv: Sequence[str], *, grace_s: float = 5.0,
                      timeout_s: float | None = None,
                      cwd: str | os.PathLike[str] | None = None,
                      env: Mapping[str, str] | None = None, input: bytes | None = None,
                      output_limit: int = OUTPUT_LIMIT) -> ProcessResult:
    """Run `argv` to its end and return its exit status and output.

    Cancelling the awaiting task stops the child's whole process group (SIGTERM, then SIGKILL
    after `grace_s`), reaps it, and re-raises the cancellation; `timeout_s` does the same and
    raises `ProcessTimeout`. Processes the child left behind in its group after a normal exit are
    stopped the same way. Only the last `output_limit` bytes of each stream are kept.
    """
    loop = asyncio.get_running_loop()
    transport, capture = await loop.subprocess_exec(
        lambda: _Capture(output_limit), *argv,
        stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env,
        start_new_session=True)
    try:
        if input is not None:
            _feed(transport, input)
        done, _ = await asyncio.wait({capture.exited}, timeout=timeout_s)
    finally:
        stopping = asyncio.ensure_future(_stop(transport, capture, grace_s))
        await settle(stopping)
        stopping.result()
    stdout, stderr = capture.stdout.text(), capture.stderr.text()
    if timeout_s is not None and not done:
        raise ProcessTimeout(argv, timeout_s, stdout, stderr)
    returncode = transport.get_returncode()
    assert returncode is not None  # _stop returns only once the child is reaped
    return ProcessResult(returncode, stdout, stderr)


class _Tail:
    """The last `limit` bytes written to a stream: a chatty child must not exhaust memory."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._data = bytearray()

    def add(self, chunk: bytes) -> None:
        self._data += chunk
        del self._data[:len(self._data) - self._limit]

    def text(self) -> str:
        return self._data.decode(errors="replace")


class _Capture(asyncio.SubprocessProtocol):
    """Collects the child's output and tells when it has exited, and when its pipes have closed
    too."""

    def __init__(self, output_limit: int) -> None:
        loop = asyncio.get_running_loop()
        self.stdout = _Tail(output_limit)
        self.stderr = _Tail(output_limit)
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        (self.stdout if fd == 1 else self.stderr).add(data)

    def process_exited(self) -> None:
        self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set_result(None)


def _feed(transport: asyncio.SubprocessTransport, data: bytes) -> None:
    stdin = cast("asyncio.WriteTransport", transport.get_pipe_transport(0))
    stdin.write(data)
    stdin.close()  # after the buffer is flushed: the child then reads end of file


async def _stop(transport: asyncio.SubprocessTransport, capture: _Capture,
                grace_s: float) -> None:
    """Stop whatever is left of the child's process group, reap the child, and collect the last
    of its output."""
    group = transport.get_pid()  # start_new_session made the child lead a group of its own id
    if _signal(group, signal.SIGTERM) and not await _ended(group, capture, grace_s):
        _signal(group, signal.SIGKILL)
        await _ended(group, capture, _AFTER_KILL_S)
    await asyncio.wait({capture.exited})
    await asyncio.wait({capture.closed}, timeout=_AFTER_KILL_S)
    transport.close()


async def _ended(group: int, capture: _Capture, within_s: float) -> bool:
    """Whether the group is empty, its leader reaped, within `within_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    exited, _ = await asyncio.wait({capture.exited}, timeout=within_s)
    if not exited:
        return False
    while _members_left(group):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(_POLL_S)
    return True


def _members_left(group: int) -> bool:
    """Whether a group whose leader is reaped has members left, dead or alive. Members that are
    this process's children are reaped here: orphans come to the worker when it is PID 1 (a
    container without an init) or a subreaper, and nobody else would reap them."""
    with suppress(ChildProcessError):  # none of the members is a child of this process
        while os.waitid(os.P_PGID, group, os.WEXITED | os.WNOHANG) is not None:
            pass
    return _signal(group, 0)


def _signal(group: int, signum: int) -> bool:
    """Send `signum` to the group (0 only checks it); False once it has no member left."""
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        return False
    return True
