"""The documented screenshot command (docs/screenshots.py) writes one picture per page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from console_harness import chromium_missing

ROOT = Path(__file__).resolve().parent.parent


def test_the_screenshot_command_writes_every_console_page(tmp_path: Path) -> None:
    if reason := chromium_missing():
        pytest.skip(reason)
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "screenshots.py"),
                           str(tmp_path)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in tmp_path.glob("*.png"))
    assert names == sorted(f"console-{page}.png" for page in (
        "login", "queue", "operations", "operation", "runs", "run", "confirm"))
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in tmp_path.glob("*.png"))
