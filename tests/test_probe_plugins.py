"""Third-party probes: found through the `reconciler.probes` entry-point group, held to the
contract when called.

The first test pip-installs the real package in tests/data/thirdparty_probe into a temporary
directory, so discovery goes through installed package metadata exactly as in production.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from probes.base import Probe, ProbeTarget
from probes.config import parse_config
from probes.errors import ProbeConfigError
from probes.registry import ENTRY_POINT_GROUP, ProbeRegistry, default_registry
from probes.runner import run_probe, run_probes
from reconciler.core.domain import Authority, Carried, Match, Observation, Receipt
from reconciler.core.sight import Sight
from reconciler.testing import FakeProbe, ManualClock

PACKAGE = Path(__file__).parent / "data" / "thirdparty_probe"
TARGET = ProbeTarget("op-1", None, "ledger", "transfer", "sha256:h0")


def pip_install(source: Path, target: Path) -> None:
    """Install without build isolation when the venv can build wheels offline, else with it."""
    base = [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet",
            "--disable-pip-version-check", "--target", str(target), str(source)]
    for command in ([*base[:4], "--no-build-isolation", *base[4:]], base):
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode == 0:
            return
    pytest.fail(f"pip could not install {source}:\n{done.stdout}\n{done.stderr}")


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
    source = shutil.copytree(PACKAGE, tmp_path / "src")
    site = tmp_path / "site"
    pip_install(source, site)
    monkeypatch.syspath_prepend(str(site))
    yield
    sys.modules.pop("acme_ledger_probe", None)


def test_an_installed_package_is_discovered_and_built_by_name(
        installed_plugin: None, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    ledger.write_text(json.dumps({"entries": [
        {"id": "tx_1", "operation_id": "op-1", "request_hash": "sha256:h0"},
        {"id": "tx_2", "operation_id": "op-2"}]}))
    registry = default_registry()
    assert "acme.ledger" in registry.names()

    probe = registry.build("acme.ledger", {"path": str(ledger)}, {})
    observation = probe.probe(TARGET)
    assert isinstance(observation, Observation)
    assert (observation.probe, observation.authority, observation.matches) == (
        "acme.ledger", Authority.LAGGING, (Match("tx_1", "sha256:h0"),))

    # The same through a configuration file, under a name of the operator's choosing.
    config = {"providers": {"ledger": {"probes": [
        {"use": "acme.ledger", "name": "ledger.export", "path": str(ledger),
         "authority": "weak", "actions": ["transfer"]}]}}}
    (built,) = parse_config(config, env={}, registry=registry)["ledger"].probes
    # What it finds effects by is the package's to say, what it covers the configuration's.
    assert built.sight == Sight(frozenset({"transfer"}), frozenset({Carried.OPERATION_ID}))
    result = run_probe(built, TARGET)
    assert result == Observation("op-1", result.at, "ledger.export", Authority.WEAK,
                                 (Match("tx_1", "sha256:h0"),))


def fake_plugins(monkeypatch: pytest.MonkeyPatch, *points: tuple[str, str]) -> ProbeRegistry:
    installed = [EntryPoint(name, value, ENTRY_POINT_GROUP) for name, value in points]
    monkeypatch.setattr("probes.registry.entry_points", lambda group: installed)
    return default_registry()


def test_a_plugin_cannot_replace_a_built_in(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = fake_plugins(monkeypatch, ("http_json", "evil:factory"))
    assert registry.factory("http_json").__module__ == "probes.http_json"


@pytest.mark.parametrize(("points", "error"), [
    ((("x.dup", "a:f"), ("x.dup", "b:f")), "provided by several packages"),
    ((("x.broken", "no_such_module_for_probes:f"),), "cannot load no_such_module_for_probes:f"),
    ((("x.constant", "math:pi"),), "math:pi is not a factory"),
])
def test_plugin_trouble_is_a_clear_config_error(monkeypatch: pytest.MonkeyPatch,
                                                points: tuple[tuple[str, str], ...],
                                                error: str) -> None:
    registry = fake_plugins(monkeypatch, *points)
    with pytest.raises(ProbeConfigError, match=error):
        registry.build(points[0][0], {}, {})


def test_a_plugin_probe_without_a_sight_covers_nothing_and_finds_effects_by_nothing(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    registry = fake_plugins(monkeypatch, ("acme.steady", "test_probe_plugins:sightless"))
    with caplog.at_level("WARNING", logger="probes.registry"):
        probe = registry.build("acme.steady", {}, {})
        registry.build("acme.steady", {}, {}, name="again", actions=["transfer"])
    assert probe.sight == Sight()
    assert sum("'acme.steady' declares no sight" in r.getMessage() for r in caplog.records) == 1


def test_a_factory_must_return_a_probe_with_the_given_name() -> None:
    registry = ProbeRegistry()
    registry.register("not_a_probe", lambda name, options, env: object())  # type: ignore[arg-type]
    registry.register("renamed", lambda name, options, env: FakeProbe(
        AssertionError("only built, never called"), name="other"))
    for use in ("not_a_probe", "renamed"):
        with pytest.raises(ProbeConfigError, match=f"must return a Probe named '{use}'"):
            registry.build(use, {}, {})


def sightless(name: str, options: Any, env: Any) -> FakeProbe:
    """A plugin's factory whose probe declares no sight."""
    return FakeProbe(AssertionError("only built, never called"), name=name, sight=None)


NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("answer", "error"), [
    (RuntimeError("token sk_live_x leaked"), "probe raised RuntimeError"),
    ("found it", "str is not an Observation or a Receipt"),
    (Observation("op-2", NOW, "p", Authority.LAGGING), "it is about another operation"),
    (Observation("op-1", NOW, "q", Authority.LAGGING), "it is signed 'q'"),
    (Observation("op-1", NOW, "p", Authority.HUMAN), "a probe cannot claim a human's authority"),
    (Observation("op-1", NOW.replace(tzinfo=None), "p", Authority.WEAK),
     "its time has no timezone"),
    (Observation("op-1", NOW, "p", Authority.UNAVAILABLE, (Match("r"),)),
     "an unavailable observation cannot carry matches"),
])
def test_a_probe_that_breaks_its_contract_counts_as_unavailable(answer: Any, error: str) -> None:
    result = run_probe(FakeProbe(answer, name="p"), TARGET, clock=ManualClock(NOW))
    assert isinstance(result, Observation)
    assert (result.authority, result.at, result.matches) == (Authority.UNAVAILABLE, NOW, ())
    assert result.error in (error, f"invalid probe result: {error}")


def test_good_answers_pass_through_in_order() -> None:
    observation = Observation("op-1", NOW, "a", Authority.AUTHORITATIVE, (Match("r1"),))
    receipt = Receipt("op-1", NOW, "r1", "sha256:h0", "lookup")
    probes: list[Probe] = [FakeProbe(observation, name="a"), FakeProbe(receipt, name="b")]
    assert run_probes(probes, TARGET) == [observation, receipt]
