"""Where a run happened: commit, machine, date, load, versions, and the disk under test."""

from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGES = ("sqlalchemy", "fastapi", "uvicorn", "httpx", "psycopg", "pydantic")


def commit(repo: Path) -> str:
    """HEAD's hash, with `+dirty` when the work tree has changes (the figures then belong to
    a tree no commit holds)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=repo, capture_output=True, text=True, check=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return f"{head}+dirty" if dirty else head


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def filesystem(path: Path) -> str:
    """The mount type of `path` (ext4, tmpfs, ...): a tmpfs has no fsync worth the name."""
    best, kind = "", "unknown"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3 and str(path.resolve()).startswith(fields[1]) \
                    and len(fields[1]) > len(best):
                best, kind = fields[1], fields[2]
    except OSError:
        pass
    return kind


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


class BusyMeter:
    """How busy all the machine's cores were (0 to 1) since the meter was made, from
    /proc/stat: evidence for whether a figure was bound by CPU."""

    def __init__(self) -> None:
        self._start = self._read()

    @staticmethod
    def _read() -> tuple[int, int]:
        try:
            fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        except (OSError, ValueError):
            return 0, 0
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields) - idle, sum(fields)

    def busy(self) -> float:
        busy, total = self._read()
        elapsed = total - self._start[1]
        return (busy - self._start[0]) / elapsed if elapsed > 0 else 0.0


def describe(repo: Path, workdir: Path) -> dict[str, str]:
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit(repo),
        "cpu": f"{cpu_model()}, {os.cpu_count()} cores",
        "load average (1 min, at start)": f"{os.getloadavg()[0]:.2f}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "os": platform.platform(),
        "sqlite": sqlite3.sqlite_version,
        "scratch disk": f"{workdir.parent} ({filesystem(workdir)})",
        "packages": ", ".join(f"{name} {_version(name)}" for name in PACKAGES),
    }
