"""Write the sidecar's OpenAPI document to clients/typescript/openapi.json, from which
`npm run generate` (openapi-typescript) makes src/generated/sidecar.ts.

    .venv/bin/python clients/typescript/scripts/write_openapi.py          # write it
    .venv/bin/python clients/typescript/scripts/write_openapi.py --check  # exit 1 if it drifted

The document is the one a token-protected sidecar serves at /openapi.json (it declares its bearer
scheme), with `info.version` set to the HTTP API's version, "1": the package's release changes
with every version bump, the API it describes does not.
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


def document() -> str:
    # Any token: only whether one is set shapes the document (its security scheme).
    app = create_app(Settings(db="sqlite://", sweep_interval_s=0,
                              token=SecretStr("openapi-document-placeholder-token")))
    schema: dict[str, Any] = app.openapi()
    schema["info"]["version"] = "1"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


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
