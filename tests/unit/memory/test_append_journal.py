"""One store commit per recorded batch (the append journal, kg/embedded/episodes.py "add_appending"):
the episodes are stored "indexed" with a journal entry of their batch, the entry goes once the
index rows are appended, and what the journal still holds is re-indexed where its rows are
missing, and only there (bench/README.md, "The recording process's batch")."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder

TENANT = "t1"


def _exps(n: int, word: str = "invoice") -> list[dict[str, Any]]:
    return [{"agent_id": "fin-1", "agent_role": "Finance", "task_type": "reconcile",
             "task_description": f"reconcile {word} number {i}", "outcome": "success"} for i in range(n)]


def _sql(db: Path, statement: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(str(db))
    try:
        return conn.execute(statement).fetchall()
    finally:
        conn.close()


def _episode_commits(wm: WorldModel) -> int:
    """Commits that wrote the episode tables (the Cypher projection's generation counts them)."""
    return int(wm.store.db.version()[0][0])  # type: ignore[attr-defined]


class CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__(384)
        self.name = "hashing-v1-384"  # the plain hashing embedder's index label
        self.texts = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        return super().embed(texts)


def test_a_recorded_batch_is_one_store_commit(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(384)) as wm:
        wm.record_experiences(TENANT, _exps(3))
        before = _episode_commits(wm)
        ids = wm.record_experiences(TENANT, _exps(50, "ledger"))
        assert _episode_commits(wm) == before + 1  # was 2: the episodes, then their "indexed" mark
        assert all(e["index_status"] == "indexed" for e in wm.store.get_episodes(TENANT, ids).values())
        assert wm.index.count(TENANT) == 53 and wm.stats(TENANT)["indexed"] == 53
        # the entry of the last batch is still there (deleted with the next commit, or at close)
        assert len(_sql(tmp_path / "worldgraph.db", "SELECT * FROM index_appends")) == 1
        assert wm.recall_experiences(TENANT, None, "reconcile ledger number 7")[0]["episode_id"] == ids[7]
    assert _sql(tmp_path / "worldgraph.db", "SELECT * FROM index_appends") == []


def test_an_entry_whose_rows_are_written_is_not_indexed_again(tmp_path: Path) -> None:
    """Another process's open finds the entry a live writer has not deleted yet: its rows are
    there, so nothing is embedded or written again."""
    writer = WorldModel.open(tmp_path, embedder=HashingEmbedder(384))
    try:
        writer.record_experiences(TENANT, _exps(20))
        assert len(_sql(tmp_path / "worldgraph.db", "SELECT * FROM index_appends")) == 1
        emb = CountingEmbedder()
        with WorldModel.open(tmp_path, embedder=emb) as other:
            assert emb.texts == 0
            assert other.store.unindexed_episodes() == []
        assert _sql(tmp_path / "worldgraph.db", "SELECT * FROM index_appends") == []
        writer.record_experiences(TENANT, _exps(5, "ledger"))  # deletes an entry that is gone: nothing
        assert writer.index.count(TENANT) == 25
    finally:
        writer.close()


def test_rows_missing_for_an_entry_are_indexed_by_the_next_open(tmp_path: Path) -> None:
    """What a writer killed between its store commit and its index append leaves (made here by
    deleting the rows of a batch that is still in the journal): the next open indexes them."""
    db = tmp_path / "worldgraph.db"
    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(384))
    wm.record_experiences(TENANT, _exps(10))
    ids = wm.record_experiences(TENANT, _exps(10, "ledger"))
    wm.index.delete(ids[:4])  # the append of 4 of them "never happened"
    wm.store.episodes._appended.clear()  # type: ignore[attr-defined]  # killed: no delete at close
    wm.close()
    assert [r[1:] for r in _sql(db, "SELECT * FROM index_appends")] == [(TENANT, 11, 20)]
    assert {s for (s,) in _sql(db, "SELECT index_status FROM episodes")} == {"indexed"}
    emb = CountingEmbedder()
    with WorldModel.open(tmp_path, embedder=emb) as again:
        assert emb.texts == 4  # only those without rows
        assert again.index.count(TENANT) == 20
        assert {r["episode_id"] for r in again.index.get(TENANT, ids)} == set(ids)
        assert again.recall_experiences(TENANT, None, "reconcile ledger number 2")[0]["episode_id"] == ids[2]
    assert _sql(db, "SELECT * FROM index_appends") == []


def test_a_failed_append_whose_mark_fails_too_is_indexed_by_retry(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The index append fails and so does the "failed" mark (a full disk): the episodes are
    stored "indexed" and their entry stays; retry_indexing (the background retrier's call)
    reopens it and indexes them."""
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(384)) as wm:
        wm.record_experiences(TENANT, _exps(3))
        monkeypatch.setattr(wm.recorder.retrier, "kick", lambda: None)  # retried by hand below

        def refuse(*_a: Any, **_k: Any) -> None:
            raise OSError("No space left on device")

        index_add, store_mark = type(wm.index).adding, type(wm.store).set_index_status
        monkeypatch.setattr(type(wm.index), "adding", _failing_adding(index_add))
        monkeypatch.setattr(type(wm.store), "set_index_status", refuse)
        ids = wm.record_experiences(TENANT, _exps(6, "ledger"))  # stored: the call succeeds
        monkeypatch.setattr(type(wm.index), "adding", index_add)
        monkeypatch.setattr(type(wm.store), "set_index_status", store_mark)
        assert set(wm.store.get_episodes(TENANT, ids)) == set(ids)
        assert wm.index.get(TENANT, ids) == []
        assert wm.retry_indexing() == 6
        assert {r["episode_id"] for r in wm.index.get(TENANT, ids)} == set(ids)
        assert all(e["index_status"] == "indexed" for e in wm.store.get_episodes(TENANT, ids).values())


def _failing_adding(adding: Any) -> Any:
    from contextlib import contextmanager

    @contextmanager
    def failing(self: Any, tenant_id: str) -> Any:
        with adding(self, tenant_id):
            def add(_rows: Any) -> None:
                raise OSError("No space left on device")
            yield add
    return failing


def test_forgetting_a_tenant_leaves_no_journal_entry_naming_it(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(384)) as wm:
        wm.record_experiences(TENANT, _exps(5))
        wm.record_experiences("t2", _exps(5))
        assert {r[0] for r in _sql(tmp_path / "worldgraph.db", "SELECT tenant_id FROM index_appends")} == {"t2"}
        wm.record_experiences(TENANT, _exps(5, "ledger"))
        wm.forget_tenant(TENANT)
        assert _sql(tmp_path / "worldgraph.db", f"SELECT * FROM index_appends WHERE tenant_id = '{TENANT}'") == []
