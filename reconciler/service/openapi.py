"""The OpenAPI document, corrected where FastAPI's generator cannot say what the service does:
problem answers are `application/problem+json`, and a token-protected service says so. And the
page that reads it, /docs, served only from files on this machine.

FastAPI's own /docs loads Swagger UI from a CDN: a blank page wherever the CDN cannot be
reached, and a third party's script on the operators' page. The Python packages that bundle
Swagger UI carry 4.x, which cannot read the OpenAPI 3.1 FastAPI writes. So /docs is off unless
`docs_assets` names a directory holding Swagger UI 5 (`swagger-ui-bundle.js`,
`swagger-ui.css`: npm's swagger-ui-dist, or a distribution's package), served from there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

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


#: What /docs needs from a Swagger UI distribution.


def install_docs(app: FastAPI, assets: Path | None) -> None:
    """/docs from the Swagger UI files in `assets`; without them, no /docs at all."""
    if assets is None:
        return
    app.mount("/docs/assets", StaticFiles(directory=assets), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} - API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon-32x32.png")


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
