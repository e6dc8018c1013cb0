"""Property-based conformance of the live service to its own OpenAPI document (schemathesis):
no 5xx, and every answer's status, media type and body as documented, problems included."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case
from schemathesis.checks import positive_data_acceptance

from reconciler.service import Settings, create_app

from service_harness import serving

UNPARSEABLE = "Invalid HTTP request received."
#: The id generated data starts from: it exists, so requests get past the 404 into the routes.
KNOWN_ID = "0"


def _settings(db: str) -> Settings:
    # No token: negative cases that drop or mangle a documented Authorization header would be
    # undone by a test that adds it back. test_service_auth covers authentication.
    return Settings(db=db, sweep_interval_s=0)


# The document is the app's own; the calls go over HTTP to a live server (`base_url`).
schema = schemathesis.openapi.from_dict(create_app(_settings("sqlite://")).openapi())



@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = Path(tmp_path_factory.mktemp("schema")) / "reconciler.db"
    app = create_app(_settings(f"sqlite:///{db}"))
    with serving(app) as url:
        response = httpx.post(url + "/v1/operations", json={
            "operation_id": KNOWN_ID, "request_hash": "sha256:" + "0" * 64, "provider": "pay",
            "action": "charge", "effect": "non_idempotent"})
        assert response.status_code == 201, response.text
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
    case.validate_response(response, excluded_checks=[positive_data_acceptance])
