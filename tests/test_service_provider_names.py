"""Intents naming a provider the configuration does not know: warned about at start (undecided
ones already in the store) and, as they arrive, counted in
reconciler_unknown_provider_intents_total with one warning per name."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from prometheus_client import REGISTRY

from reconciler.core.domain import Effect, Intent
from reconciler.service import Settings, create_app
from reconciler.store.schema import open_store

from builders import H0
from service_harness import serving

CONFIG = "[providers.payments]\nidempotency_keys = true\n"


def unknown_intents() -> float:
    return REGISTRY.get_sample_value("reconciler_unknown_provider_intents_total") or 0.0


def intent(op: str, provider: str) -> dict[str, str]:
    return {"operation_id": op, "request_hash": H0, "idempotency_key": f"key-{op}",
            "provider": provider, "action": "charge", "effect": "non_idempotent"}


def test_unknown_providers_are_warned_at_start_and_counted_as_intents_arrive(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = tmp_path / "reconciler.toml"
    config.write_text(CONFIG, encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    store.record_intent(Intent("old-1", H0, "k", "fax", "send", Effect.NON_IDEMPOTENT,
                               datetime.now(UTC)))
    store.engine.dispose()
    caplog.set_level(logging.WARNING, logger="reconciler.service.providers")
    app = create_app(Settings(db=url, config=config, sweep_interval_s=0))
    started = [r.getMessage() for r in caplog.records]
    assert any("does not know" in m and m.endswith(": fax") for m in started)
    before = unknown_intents()
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as http:
        for op, provider in (("op-1", "paymnets"), ("op-2", "paymnets"), ("op-3", "payments")):
            assert http.post("/v1/operations", json=intent(op, provider)).status_code == 201
        assert http.post("/v1/operations", json=intent("op-1", "paymnets")).status_code == 200
        metrics = http.get("/metrics").text
    assert unknown_intents() - before == 2
    assert "reconciler_unknown_provider_intents_total" in metrics
    warned = [r.getMessage() for r in caplog.records if "'paymnets'" in r.getMessage()]
    assert len(warned) == 1 and "known: payments" in warned[0]


def test_without_a_configuration_no_name_is_unknown(tmp_path: Path) -> None:
    app = create_app(Settings(db=f"sqlite:///{tmp_path / 'store.db'}", sweep_interval_s=0))
    before = unknown_intents()
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as http:
        assert http.post("/v1/operations", json=intent("op-1", "anything")).status_code == 201
    assert unknown_intents() == before
