"""Property-based conformance of the live service to its own OpenAPI document (schemathesis):
no 5xx, and every answer's status, media type and body as documented, problems included, on
SQLite and on PostgreSQL (which refuses what SQLite keeps: NUL bytes, over-long text), every
operation, the runs API included (with a scripted agent)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case
from schemathesis.checks import positive_data_acceptance

from reconciler.runtime.agent import Agent
from reconciler.runtime.scripted import ScriptedModel
from reconciler.service import Settings, create_app

from databases import pg_schema, pg_unreachable
from service_harness import serving

UNPARSEABLE = "Invalid HTTP request received."
#: The id generated data starts from: it exists, so requests get past the 404 into the routes.
KNOWN_ID = "0"
MAX_BODY = Settings.model_fields["max_body_bytes"].default


def _settings(db: str) -> Settings:
    # No token: negative cases that drop or mangle a documented Authorization header would be
    # undone by a test that adds it back. test_service_auth covers authentication.
    return Settings(db=db, sweep_interval_s=0)


def _agent() -> Agent:
    return Agent(ScriptedModel([]), [], {"reconcile_rounds": 1, "reconcile_wait_s": 0.0})


# The document is the app's own (the runs routes are in it with or without an agent); the
# calls go over HTTP to a live server (`base_url`), which runs a scripted agent.
schema = schemathesis.openapi.from_dict(create_app(_settings("sqlite://")).openapi())


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def base_url(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "postgresql":
        if reason := pg_unreachable():
            pytest.skip(reason)
        with pg_schema() as db, _served(db) as url:
            yield url
        return
    db_file = Path(tmp_path_factory.mktemp("schema")) / "reconciler.db"
    with _served(f"sqlite:///{db_file}") as url:
        yield url


@contextmanager
def _served(db: str) -> Iterator[str]:
    app = create_app(_settings(db), agent=_agent())
    with serving(app) as url:
        response = httpx.post(url + "/v1/operations", json={
            "operation_id": KNOWN_ID, "request_hash": "sha256:" + "0" * 64, "provider": "pay",
            "action": "charge", "effect": "non_idempotent"})
        assert response.status_code == 201, response.text
        run = httpx.post(url + "/v1/runs", json={"input": "hello", "run_id": KNOWN_ID})
        assert run.status_code == 201, run.text
        yield url


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_openapi(case: Case[Any], base_url: str) -> None:
    # Schema-valid requests may still be refused on purpose: a cross-field rule (a status only
    # with a response), a retry with another hash (422), an unknown operation (404).
    response = case.call(base_url=base_url, timeout=10)
    if response.status_code == 400 and response.text == UNPARSEABLE:
        return  # uvicorn's own answer to a request it cannot parse: it never reached the app
    body = response.request.body
    if response.status_code == 413 and isinstance(body, bytes) and len(body) > MAX_BODY:
        # A body over the limit is refused before it is parsed, valid or not (413 is
        # documented on every route); schemathesis expects invalid data to get 4xx of its list.
        assert response.headers["content-type"] == ["application/problem+json"]
        return
    case.validate_response(response, excluded_checks=[positive_data_acceptance])
