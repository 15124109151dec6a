"""The embedded store keeps only the episodes still to index in its status index."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from worldgraph.kg.embedded import sql
from worldgraph.kg.embedded.store import EmbeddedGraphStore


def _indexes(db: Path) -> set[str]:
    conn = sqlite3.connect(str(db))
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'episodes'")}
    finally:
        conn.close()


def test_old_status_index_is_replaced_by_a_partial_one(tmp_path: Path) -> None:
    db = tmp_path / "worldgraph.db"
    conn = sqlite3.connect(str(db))  # a database as the previous version left it
    conn.executescript("""
        CREATE TABLE episodes (tenant_id TEXT NOT NULL, id TEXT NOT NULL, agent_id TEXT NOT NULL, ts REAL NOT NULL,
          index_status TEXT NOT NULL DEFAULT 'pending', index_error TEXT, data TEXT NOT NULL,
          PRIMARY KEY (tenant_id, id));
        CREATE INDEX episodes_index_status ON episodes (index_status, ts);
        INSERT INTO episodes VALUES ('t', 'a', 'x', 2.0, 'indexed', NULL, '{"id": "a", "tenant_id": "t"}');
        INSERT INTO episodes VALUES ('t', 'b', 'x', 3.0, 'failed', 'boom', '{"id": "b", "tenant_id": "t"}');
        INSERT INTO episodes VALUES ('t', 'c', 'x', 1.0, 'pending', NULL, '{"id": "c", "tenant_id": "t"}');
    """)
    conn.close()
    store = EmbeddedGraphStore(db)
    try:
        names = _indexes(db)
        assert "episodes_unindexed" in names and "episodes_index_status" not in names
        assert [e["id"] for e in store.unindexed_episodes()] == ["c", "b"]  # oldest first, indexed left out
        plan = store.db.query("EXPLAIN QUERY PLAN SELECT data FROM episodes WHERE index_status != 'indexed' "
                            "ORDER BY ts, id LIMIT 10")
        assert "USING INDEX episodes_unindexed" in plan[0][-1] and not any("TEMP B-TREE" in r[-1] for r in plan)
        store.set_index_status("t", ["b", "c"], "indexed")
        assert store.unindexed_episodes() == []
        count = store.db.query("SELECT COUNT(*) FROM episodes INDEXED BY episodes_unindexed WHERE index_status != 'indexed'")
        assert count[0][0] == 0  # marking them indexed took them out of the index
    finally:
        store.close()


def test_stats_counts_the_indexed_without_reading_every_row(tmp_path: Path) -> None:
    """``stats`` counts the few episodes still to index on their partial index and takes them from
    the tenant's total: a count of ``index_status = 'indexed'`` itself reads the whole table (a
    lookup per entry of the time index, minutes at 10M)."""
    store = EmbeddedGraphStore(tmp_path / "worldgraph.db")
    try:
        for tenant, ids in (("t", "abcd"), ("u", "ef")):
            with store.db.transaction() as cur:
                cur.executemany("INSERT INTO episodes VALUES (?, ?, 'x', 1.0, 'pending', NULL, '{}')",
                                [(tenant, i) for i in ids])
        store.set_index_status("t", ["a", "b"], "indexed")
        store.set_index_status("t", ["c"], "failed", "boom")
        store.set_index_status("u", ["e", "f"], "indexed")
        assert (store.stats("t")["episodes"], store.stats("t")["indexed"]) == (4, 2)
        assert (store.stats("u")["episodes"], store.stats("u")["indexed"]) == (2, 2)
        assert (store.stats("v")["episodes"], store.stats("v")["indexed"]) == (0, 0)
        plan = [r[-1] for r in store.db.query("EXPLAIN QUERY PLAN " + sql.COUNT_EPISODES_INDEXED, ("t",))]
        assert any("COVERING INDEX sqlite_autoindex_episodes_1" in p for p in plan), plan
        assert any("USING INDEX episodes_unindexed" in p for p in plan), plan
        assert not any(p.startswith("SCAN episodes") and "INDEX" not in p for p in plan), plan  # no table scan
    finally:
        store.close()
