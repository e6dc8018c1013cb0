"""clients/typescript/openapi.json is the sidecar's OpenAPI document as the app writes it now:
the TypeScript client's types are generated from it (`npm run generate`; the npm tests check the
generated file against it), so an API change that is not carried into the client fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent.parent / "clients/typescript/scripts/write_openapi.py"


def test_the_typescript_clients_openapi_document_matches_the_app() -> None:
    checked = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                             text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr
