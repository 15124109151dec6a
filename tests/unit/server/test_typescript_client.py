"""The TypeScript client's committed types are those of the service as it is: openapi.json is the
document the app serves now, and src/schema.ts was generated from exactly that file. When this
fails, run `npm run generate` in clients/typescript and commit both files."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from worldgraph.server.app import openapi_document

CLIENT = Path(__file__).resolve().parents[3] / "clients" / "typescript"
FIX = "stale: run `npm run generate` in clients/typescript and commit openapi.json and src/schema.ts"


def test_committed_openapi_document_is_current() -> None:
    committed = json.loads((CLIENT / "openapi.json").read_text(encoding="utf-8"))
    current = json.loads(json.dumps(openapi_document()))  # as JSON: tuples become lists, 1.0 == 1
    assert committed == current, FIX


def test_generated_types_come_from_the_committed_document() -> None:
    header = (CLIENT / "src" / "schema.ts").read_text(encoding="utf-8").splitlines()[0]
    m = re.search(r"sha256 ([0-9a-f]{64})", header)
    assert m, f"src/schema.ts has no generator header; {FIX}"
    assert m.group(1) == hashlib.sha256((CLIENT / "openapi.json").read_bytes()).hexdigest(), FIX
