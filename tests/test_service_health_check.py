"""The container's health check (Dockerfile HEALTHCHECK): the exact command the image runs,
against a sidecar that requires a token, as in compose.yaml."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from service_harness import serving_process
from sidecar_client import TOKEN

ROOT = Path(__file__).resolve().parents[1]


def healthcheck_command() -> list[str]:
    """The Dockerfile's HEALTHCHECK CMD, as exec form (a JSON array)."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    found = re.search(r"^HEALTHCHECK\b.*?\bCMD\s+(\[.*\])\s*$", text, re.M)
    assert found, "the Dockerfile has no HEALTHCHECK in exec form"
    command: list[str] = json.loads(found.group(1))
    return command


def run_healthcheck(port: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The command as the container runs it: `reconciler` on the PATH, the container's own
    RECONCILER_* environment."""
    bin_dir = str(Path(sys.executable).parent)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILER_")}
    environment.update(PATH=bin_dir + os.pathsep + environment.get("PATH", ""),
                       RECONCILER_PORT=port, **env)
    return subprocess.run(healthcheck_command(), env=environment, capture_output=True,
                          text=True, timeout=60)


def test_the_health_check_passes_against_a_token_protected_sidecar(tmp_path: Path) -> None:
    env = {"RECONCILER_DB": f"sqlite:///{tmp_path / 'r.db'}", "RECONCILER_TOKEN": TOKEN,
           "RECONCILER_SWEEP_INTERVAL_S": "0"}
    with serving_process(env) as service:
        port = service.url.rsplit(":", 1)[1]
        healthy = run_healthcheck(port, RECONCILER_TOKEN=TOKEN)
        assert healthy.returncode == 0, healthy.stderr
        assert healthy.stdout.strip() == "ready"
        # Without the sidecar's token (the image's former check sent none): unhealthy, saying
        # why.
        for other in ({}, {"RECONCILER_TOKEN": "another-token-" + "x" * 30}):
            refused = run_healthcheck(port, **other)
            assert refused.returncode == 1
            assert "401" in refused.stderr and "RECONCILER_TOKEN" in refused.stderr


def test_the_health_check_fails_when_nothing_listens(tmp_path: Path) -> None:
    with serving_process({"RECONCILER_DB": f"sqlite:///{tmp_path / 'r.db'}",
                          "RECONCILER_SWEEP_INTERVAL_S": "0"}) as service:
        port = service.url.rsplit(":", 1)[1]
        service.stop()
    down = run_healthcheck(port)
    assert down.returncode == 1
    assert "did not answer" in down.stderr
