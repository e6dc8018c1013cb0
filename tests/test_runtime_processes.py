"""A tool's child process: its output and status, and its whole process group stopped (SIGTERM,
then SIGKILL after the grace) on cancellation, on timeout, and after a normal exit."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from reconciler.runtime.cancel import Cancelled, CancelSignal, cancellable
from reconciler.runtime.processes import ProcessResult, ProcessTimeout, run_process
from reconciler.testing.patience import PATIENCE_S

from runtime_harness import gone, group_gone

T = TypeVar("T")
DEADLINE_S = PATIENCE_S  # bounds every scenario: a hang fails the test instead of stalling the run

# Writes "pid pgid" to argv[1] once SIGTERM is ignored, then sleeps until killed.
IGNORES_SIGTERM = textwrap.dedent("""
    import os, signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {os.getpgid(0)}")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    for _ in range(600):
        time.sleep(0.1)
""")


def run(scenario: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(scenario, DEADLINE_S))


def python(code: str, *args: str | Path) -> list[str]:
    return [sys.executable, "-c", code, *map(str, args)]


async def written(path: Path, call: asyncio.Future[Any]) -> str:
    """The content of `path` once the child has written it (the child is ready then). The
    file exists, empty, between the child's open and its write: wait for the content."""
    while not (path.exists() and path.read_text()):
        if call.done():
            call.result()
            pytest.fail(f"the child ended without writing {path.name}")
        await asyncio.sleep(0.01)
    return path.read_text()


async def cancel_once_written(argv: list[str], ready: Path, *, grace_s: float) -> str:
    """Runs `argv`, cancels the call once the child has written `ready`, and returns that."""
    signal = CancelSignal()
    call = asyncio.ensure_future(cancellable(run_process(argv, grace_s=grace_s), signal))
    content = await written(ready, call)
    signal.cancel("stop")
    with pytest.raises(Cancelled):
        await call
    return content


def test_a_normal_run_returns_its_output_and_return_code() -> None:
    code = ("import sys; data = sys.stdin.read(); print(data.upper()); "
            "print('warning', file=sys.stderr); sys.exit(3)")
    result = run(run_process(python(code), input=b"hello"))
    assert result == ProcessResult(3, "HELLO\n", "warning\n")


def test_only_the_last_bytes_of_each_stream_are_kept() -> None:
    code = ("import sys; sys.stdout.write('a' * 300_000 + 'END'); "
            "sys.stderr.write('b' * 300_000 + 'END')")
    result = run(run_process(python(code), output_limit=1000))
    assert result.stdout == "a" * 997 + "END" and result.stderr == "b" * 997 + "END"


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    pid, pgid = map(int, run(cancel_once_written(python(IGNORES_SIGTERM, tmp_path / "pid"),
                                                 tmp_path / "pid", grace_s=0.2)).split())
    assert pid == pgid and group_gone(pgid) and gone(pid)


def test_a_grandchild_is_stopped_with_the_child(tmp_path: Path) -> None:
    spawns = textwrap.dedent(f"""
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", {IGNORES_SIGTERM!r}, sys.argv[1]])
        for _ in range(600):
            time.sleep(0.1)
    """)
    grandchild, pgid = map(int, run(cancel_once_written(python(spawns, tmp_path / "pid"),
                                                        tmp_path / "pid", grace_s=0.2)).split())
    assert grandchild != pgid and group_gone(pgid) and gone(grandchild)


def test_a_child_that_exits_on_sigterm_is_not_killed(tmp_path: Path) -> None:
    # The handler takes a moment to clean up: a SIGKILL sent before the grace ended would stop
    # it before it writes "done".
    graceful = textwrap.dedent("""
        import os, signal, sys, time
        def stop(signum, frame):
            with open(sys.argv[1], "a") as f:
                f.write("term ")
            time.sleep(0.2)
            with open(sys.argv[1], "a") as f:
                f.write("done")
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        with open(sys.argv[2], "w") as f:
            f.write(str(os.getpid()))
        for _ in range(600):
            time.sleep(0.1)
    """)
    marker = tmp_path / "marker"
    pid = int(run(cancel_once_written(python(graceful, marker, tmp_path / "pid"),
                                      tmp_path / "pid", grace_s=DEADLINE_S)))
    assert marker.read_text() == "term done" and gone(pid)


def test_a_timeout_stops_the_group_and_raises_process_timeout(tmp_path: Path) -> None:
    code = "import sys; print('partial', flush=True)\n" + IGNORES_SIGTERM
    with pytest.raises(ProcessTimeout) as raised:
        run(run_process(python(code, tmp_path / "pid"), timeout_s=0.5, grace_s=0.2))
    pid, pgid = map(int, (tmp_path / "pid").read_text().split())
    assert raised.value.stdout == "partial\n" and group_gone(pgid) and gone(pid)


def test_processes_left_behind_after_a_normal_exit_are_stopped() -> None:
    # The background sleep also holds the output pipe: without the sweep this would hang.
    result = run(run_process(["sh", "-c", "sleep 60 & echo $!"], grace_s=0.2))
    assert result.returncode == 0 and gone(int(result.stdout))


def test_output_of_a_process_outside_the_group_is_collected_until_it_closes_the_pipe() -> None:
    # A grandchild in a session of its own is out of the group's reach, but it still holds the
    # output pipe the child passed on; it writes after the child has exited.
    code = textwrap.dedent("""
        import subprocess, sys
        late = "import time; time.sleep(0.3); print('late')"
        subprocess.Popen([sys.executable, "-c", late], start_new_session=True)
        print("early", flush=True)
    """)
    result = run(run_process(python(code)))
    assert result.stdout == "early\nlate\n"


def test_orphans_are_reaped_when_the_worker_is_their_subreaper() -> None:
    # As in a container whose PID 1 is the worker: orphans of the group come to the worker, and
    # nobody else reaps them. PR_SET_CHILD_SUBREAPER (36) makes a process their reaper.
    worker = textwrap.dedent("""
        import asyncio, ctypes, os
        from reconciler.runtime.processes import run_process
        assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
        result = asyncio.run(run_process(["sh", "-c", "sleep 60 & echo $!"], grace_s=0.2))
        print(os.path.exists(f"/proc/{int(result.stdout)}"))
    """)
    finished = subprocess.run(python(worker), capture_output=True, text=True,
                              timeout=DEADLINE_S, check=True)
    assert finished.stdout == "False\n"
