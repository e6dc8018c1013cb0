"""The OpenAPI document, corrected where FastAPI's generator cannot say what the service does:
problem answers are `application/problem+json`, and a token-protected service says so."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from reconciler.service.auth import is_open
from reconciler.service.problems import PROBLEM_JSON


def install_openapi(app: FastAPI, *, bearer: bool) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version,
                                 description=app.description, routes=app.routes)
            _problem_media_types(schema)
            if bearer:
                _bearer_security(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _operations(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(path, op) for path, item in schema.get("paths", {}).items()
            for op in item.values() if isinstance(op, dict)]


def _problem_media_types(schema: dict[str, Any]) -> None:
    for _, operation in _operations(schema):
        for status, response in operation.get("responses", {}).items():
            content = response.get("content", {})
            if status[0] in "45" and "application/json" in content:
                content[PROBLEM_JSON] = content.pop("application/json")


def _bearer_security(schema: dict[str, Any]) -> None:
    schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
        "type": "http", "scheme": "bearer"}
    for path, operation in _operations(schema):
        if not is_open(path):
            operation["security"] = [{"bearer": []}]
