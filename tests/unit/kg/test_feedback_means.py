"""Recall's feedback means on the embedded store (``SqliteEpisodes.feedback_means``): read again
when any connection wrote or deleted feedback rows, not when episodes were recorded (triggers
keep the feedback rows' generation, ``sql/schema.py``), and right on a file those triggers never saw."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.kg.test_store_contract import add, episode, feedback
from worldgraph.kg.embedded import sql
from worldgraph.kg.embedded.store import EmbeddedGraphStore

T = "t-feedback"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "worldgraph.db"


@pytest.fixture
def stores(path: Path) -> Iterator[tuple[EmbeddedGraphStore, EmbeddedGraphStore]]:
    """Two stores on one file: two connections, as two processes have."""
    a, b = EmbeddedGraphStore(path), EmbeddedGraphStore(path)
    yield a, b
    a.close()
    b.close()


def _count_aggregates(store: EmbeddedGraphStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The feedback aggregates ``store`` reads from now on, one entry each."""
    reads: list[str] = []
    query = store.db.query

    def counted(statement: str, params: Any = ()) -> list[tuple[Any, ...]]:
        if statement in (sql.FEEDBACK_MEANS, sql.FEEDBACK_MEANS_OF):
            reads.append(statement)
        return query(statement, params)
    monkeypatch.setattr(store.db, "query", counted)
    return reads


def test_means_are_kept_while_episodes_are_recorded_and_read_again_after_any_rating(
        stores: tuple[EmbeddedGraphStore, EmbeddedGraphStore], monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = stores
    e1, e2 = add(a, T, episode(T, minutes=1), episode(T, minutes=2))
    a.add_feedback(T, feedback(T, e1, 1.0, "accuracy"))
    reads = _count_aggregates(a, monkeypatch)
    assert a.feedback_means(T) == {e1: 1.0} and a.feedback_means(T, "accuracy") == {e1: 1.0}
    assert len(reads) == 2
    add(a, T, episode(T, minutes=3))  # recorded here: the episode part moved, the feedback did not
    add(b, T, episode(T, minutes=4))  # and by another connection
    assert a.feedback_means(T) == {e1: 1.0}
    assert len(reads) == 2, "recording an episode read the aggregate again"
    b.add_feedback(T, feedback(T, e2, -0.5, n=1))  # another connection's rating counts at once
    assert a.feedback_means(T) == {e1: 1.0, e2: -0.5}
    assert a.feedback_means(T, "accuracy") == {e1: 1.0}
    assert len(reads) == 4
    b.forget_tenant(T, {"id": "audit-1", "tenant_id": T, "kind": "tenant", "target_id": T,
                        "forgotten_at": "2026-01-07T00:00:00+00:00"})
    assert a.feedback_means(T) == {} and a.feedback_means(T, "accuracy") == {}


def test_a_file_without_the_triggers_read_only_sees_every_rating(path: Path) -> None:
    """A file a writer of this version never opened (an older worldgraph's, its ratings written by
    that version): a read-only store reads the means again when another connection commits."""
    store = EmbeddedGraphStore(path)
    (e1,) = add(store, T, episode(T))
    store.add_feedback(T, feedback(T, e1, 1.0))
    store.close()
    raw = sqlite3.connect(path)
    for name in ("insert", "update", "delete"):
        raw.execute(f"DROP TRIGGER feedback_gen_{name}")
    raw.commit()
    ro = EmbeddedGraphStore(path, read_only=True)
    try:
        assert ro.feedback_means(T) == {e1: 1.0}
        raw.execute("UPDATE feedback SET score = -1.0")  # an older process's write: no trigger bumps anything
        raw.commit()
        assert ro.feedback_means(T) == {e1: -1.0}
    finally:
        ro.close()
        raw.close()
