"""Processes a benchmark starts: servers (the sidecar, the sandbox) that announce
`serving on URL`, and the load generator. Each is this repository's code run with
`python -m`, from the repository root, and stopped by the benchmark that started it."""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.harness import BenchError
from bench.loadgen import Spec, Tally

ROOT = Path(__file__).resolve().parent.parent
SERVING = "serving on "
#: The sidecar as `reconciler serve` runs it (settings from RECONCILER_*).
SIDECAR = "reconciler.service.server"


@dataclass(frozen=True, slots=True)
class Command:
    """A server to start: `python -m module args...` with `env` over the environment."""

    module: str
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)


class ServerProcess:
    """A started server: its pid, the tail of its output, and (once it said so) its URL."""

    def __init__(self, command: Command) -> None:
        # A sidecar gets only the `RECONCILER_*` settings in `env`, on a free loopback port:
        # none leak in from the shell that runs the benchmarks.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILER_")}
        self.module = command.module
        self.process = subprocess.Popen(
            [sys.executable, "-m", command.module, *command.args], cwd=ROOT,
            env={**inherited, "RECONCILER_HOST": "127.0.0.1", "RECONCILER_PORT": "0",
                 **command.env},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.url = ""
        self.tail: collections.deque[str] = collections.deque(maxlen=40)
        self._announced: queue.Queue[str] = queue.Queue()
        # Read all along, so that a server's logging never blocks it on a full pipe.
        threading.Thread(target=self._drain, daemon=True, name=f"drain {self.module}").start()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        announced = False
        for line in self.process.stdout:
            self.tail.append(line)
            if not announced and line.startswith(SERVING):
                announced = True
                self._announced.put(line)
        self._announced.put("")

    def wait_serving(self, timeout_s: float) -> None:
        try:
            line = self._announced.get(timeout=timeout_s)
        except queue.Empty:
            raise BenchError(f"{self.module} did not say where it serves within "
                             f"{timeout_s:g} s: {self.output()}") from None
        if not line:
            raise BenchError(f"{self.module} exited before serving: {self.output()}")
        self.url = line.removeprefix(SERVING).strip()

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_mb(self) -> float:
        """Resident set size from /proc/<pid>/status (VmRSS), in MiB."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError as exc:
            raise BenchError(f"cannot read the memory of process {self.pid}: {exc}") from exc
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise BenchError(f"no VmRSS line for process {self.pid}: is this Linux?")

    def cpu_s(self) -> float:
        """CPU time (user + system) the process has used, from /proc/<pid>/stat."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError as exc:
            raise BenchError(f"cannot read the CPU time of process {self.pid}: {exc}") from exc
        # Fields after the command name (which may hold spaces) start at the state, field 3.
        fields = stat.rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return "".join(self.tail)

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout_s)


@contextmanager
def servers(*commands: Command, timeout_s: float = 60.0) -> Iterator[list[ServerProcess]]:
    """Start every server at once, wait until each prints `serving on URL`, and stop them all
    (SIGTERM) on exit."""
    started: list[ServerProcess] = []
    try:
        for command in commands:
            started.append(ServerProcess(command))
        for process in started:
            process.wait_serving(timeout_s)
        yield started
    finally:
        for process in started:
            process.stop()


@contextmanager
def server(module: str, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
           ) -> Iterator[ServerProcess]:
    """One server, as `servers` starts them."""
    with servers(Command(module, args, env or {})) as (started,):
        yield started


def loadgen(spec: Spec, *, refusals: bool = False) -> Tally:
    """Run the load generator in its own process; what it measured. `refusals`: the server's
    503s (overloaded, service.admission) are a result to report, not a failed run."""
    limit = spec.warmup_s + spec.duration_s + 60
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="loadgen-") as folder:
        result = Path(folder) / "tally.json"
        try:
            done = subprocess.run([sys.executable, "-m", "bench.loadgen",
                                   json.dumps(asdict(spec)), str(result)],
                                  cwd=ROOT, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired as exc:
            raise BenchError(f"the load generator ran past {limit:g} s: is the server "
                             "stuck?") from exc
        if done.returncode != 0:
            raise BenchError(f"the load generator failed after "
                             f"{time.perf_counter() - started:.1f} s: {done.stderr[-2000:]}")
        tally = Tally(**json.loads(result.read_text()))
    unexpected = {status: n for status, n in tally.bad_statuses.items()
                  if not (refusals and status == "503")}
    if unexpected:
        raise BenchError(f"unexpected answers {unexpected} from {spec.path}: "
                         f"{tally.sample_bad_body}")
    return tally
