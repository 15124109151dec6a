"""``import_lancedb`` (memory/index/lance_import.py): lancedb without the REST client's API
modules, which a local or object-store index never uses, and the client still there on demand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = """
import sys, tempfile
from worldgraph.memory.index.lance_import import import_lancedb
lancedb = import_lancedb()
db = lancedb.connect(tempfile.mkdtemp())
db.create_table("t", data=[{"x": 1}])
print(sorted(db.table_names()) == ["t"])
print(any(k.startswith("lance_namespace_urllib3_client.api") for k in sys.modules))
import lance_namespace_urllib3_client as client
print(client.ApiClient.__name__, client.Configuration.__name__)
print(any(k.startswith("lance_namespace_urllib3_client.api") for k in sys.modules))
"""


def test_lancedb_imports_without_the_rest_client_and_the_client_loads_on_first_use() -> None:
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:4] == ["True", "False", "ApiClient Configuration", "True"]
