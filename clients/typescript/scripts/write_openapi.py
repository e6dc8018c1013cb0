"""Write the sidecar's OpenAPI document to clients/typescript/openapi.json, from which
`npm run generate` (openapi-typescript) makes src/generated/sidecar.ts.

    .venv/bin/python clients/typescript/scripts/write_openapi.py          # write it
    .venv/bin/python clients/typescript/scripts/write_openapi.py --check  # exit 1 if it drifted

The document is the one a token-protected sidecar serves at /openapi.json (it declares its bearer
scheme), with `info.version` set to the HTTP API's version, "1" (the package's release changes
with every version bump, the API it describes does not), and without the prose descriptions:
what must not drift is the shapes the client sends and reads, and the prose changes with every
docstring edit (the sidecar's own /openapi.json has it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from reconciler.service.app import create_app
from reconciler.service.settings import Settings

TARGET = Path(__file__).resolve().parent.parent / "openapi.json"


def _role(key: str, role: str) -> str:
    """What the value at `key` of a node playing `role` is: a map of field names, a map of
    Responses, a Response, or any other node."""
    if role == "names":
        return ""
    if role == "responses":
        return "response"
    return {"properties": "names", "responses": "responses"}.get(key, "")


def _shapes(node: Any, role: str = "") -> Any:
    """`node` without its prose `description`s. Kept: a Response's (OpenAPI requires one), and
    every key of a `properties` map (its keys are field names: a field may be "description")."""
    if isinstance(node, list):
        return [_shapes(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {key: _shapes(value, _role(key, role)) for key, value in node.items()
            if role in ("names", "response") or not (
                key == "description" and isinstance(value, str))}


def document() -> str:
    # Any token: only whether one is set shapes the document (its security scheme).
    app = create_app(Settings(db="sqlite://", sweep_interval_s=0,
                              token=SecretStr("openapi-document-placeholder-token")))
    schema: dict[str, Any] = app.openapi()
    schema["info"]["version"] = "1"
    return json.dumps(_shapes(schema), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    text = document()
    if "--check" in argv:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET} is out of date: run {Path(__file__).name} and `npm run generate` "
                  "in clients/typescript", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
