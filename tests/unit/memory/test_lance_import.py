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


def test_one_lance_session_per_process_with_the_configs_cache_sizes(tmp_path: Path) -> None:
    """Every connection and dataset of the process shares one LanceDB and one pylance session
    (lance_import.sessions), so their caches are bounded by the config for the process: caches of
    0 MiB hold nothing after LanceDB's own searches (BM25, a filtered vector search), caches of
    some MiB hold what those searches opened (lance's default, per connection and per dataset,
    was 6 GiB of index and 1 GiB of metadata)."""
    import numpy as np

    from worldgraph.config import WorldGraphConfig
    from worldgraph.memory.index.episode_index import EpisodeIndex
    from worldgraph.memory.index.lance_import import sessions

    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    rows = [{"episode_id": f"e{i}", "tenant_id": "acme", "agent_id": f"a{i % 3}",
             "text": " ".join(rng.choice(words, 5)) + f" w{i}", "vector": rng.standard_normal(8).tolist(),
             "timestamp": 1.7e9 + i} for i in range(2_000)]
    held = {}
    for mb in (0, 63):
        cfg = WorldGraphConfig(lance_index_cache_mb=mb, lance_metadata_cache_mb=mb, mirror_min_rows=0,
                               ann_index_min_rows=100_000)
        idx = EpisodeIndex(str(tmp_path / f"idx{mb}"), 8, "test-8", cfg)
        other = EpisodeIndex(str(tmp_path / f"other{mb}"), 8, "test-8", cfg)
        try:
            idx._small.max_rows = 0  # LanceDB's searches, not the in-process copy of a small table
            idx.upsert(rows)
            idx.ensure_indexes()
            assert idx.text_search("acme", "alpha beta", 5)
            assert idx.vector_search("acme", rng.standard_normal(8).tolist(), 5, where={"agent_id": "a1"})
            connection, dataset = sessions(cfg)
            assert sessions(cfg) == (connection, dataset)  # made once
            assert idx._part("acme").latest_dataset().session().is_same_as(dataset)
            other.upsert(rows[:10])
            assert other._part("acme").latest_dataset().session().is_same_as(dataset)  # shared by indexes
            held[mb] = connection.size_bytes + dataset.size_bytes()
        finally:
            idx.close()
            other.close()
    assert held[0] < 1_000 < 50_000 < held[63], held
    from worldgraph.memory.index.lance_import import drop_sessions

    drop_sessions()  # (the maintenance child, after each run): the next index gets new, empty ones
    assert sessions(cfg)[0] is not connection and sessions(cfg)[0].size_bytes < 1_000
