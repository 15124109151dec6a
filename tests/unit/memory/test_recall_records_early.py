"""Recall's waits at 10M rows (bench/README.md, "Plain recall at 10M: where the time goes"): the
vector hits' records are read from the store while the BM25 search still runs, the rest after it,
with the same results; and one search looks for the table's newest version once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from worldgraph import WorldModel
from worldgraph.memory.index.tables import TenantTable
from worldgraph.memory.recall.candidates import _records

QUERY = "the garden hose"


@pytest.fixture
def wm(tmp_path: Path) -> Any:
    wm = WorldModel.open(tmp_path, embedding_provider="hashing")
    wm.record_experiences("t", [{"agent_id": f"a{n % 3}", "task_type": "note", "outcome": "success",
                                 "task_description": f"note {n} about the {'garden hose' if n % 4 else 'kitchen'}",
                                 "confidence_score": 0.5} for n in range(40)])
    yield wm
    wm.close()


def _results(wm: Any) -> list[tuple[str, float]]:
    return [(r.episode_id, r.relevance_score)
            for r in wm.recall_experiences("t", None, QUERY, limit=10, options={"hybrid": True})]


def test_the_vector_hits_records_are_read_while_the_text_search_runs(wm: Any, monkeypatch: Any) -> None:
    before = _results(wm)  # a small table: both searches in process, one after the other
    assert before
    # as a big table's: the BM25 search on the pool thread, beside the vector search
    monkeypatch.setattr(wm.index, "in_process", lambda tenant_id: False)
    read = threading.Event()
    seen: dict[str, Any] = {"asked": []}
    text_search, episodes_with_feedback = wm.index.text_search, wm.store.episodes_with_feedback

    def slow_text_search(*args: Any, **kwargs: Any) -> Any:
        # a slow BM25 search: it ends once the store was read (or after 5 s, if it never is)
        seen["read_while_searching"] = read.wait(5)
        return text_search(*args, **kwargs)

    def reading(tenant_id: str, ids: list[str], category: str | None = None) -> Any:
        seen["asked"].append(list(ids))
        read.set()
        return episodes_with_feedback(tenant_id, ids, category=category)

    def vector_hits() -> list[str]:
        hits = wm.index.vector_search("t", wm.embedder.embed([QUERY])[0], k=wm.config.candidate_pool,
                                      columns=["episode_id"])
        return [h["episode_id"] for h in hits]

    monkeypatch.setattr(wm.index, "text_search", slow_text_search)
    monkeypatch.setattr(wm.store, "episodes_with_feedback", reading)
    after = _results(wm)
    assert seen["read_while_searching"], "the records were read only after the text search ended"
    assert seen["asked"][0] == vector_hits()  # the first read: the vector hits, in their order
    asked = [i for ids in seen["asked"] for i in ids]
    assert len(asked) == len(set(asked))  # no record read twice
    assert after == before


class _Store:
    """episodes_with_feedback of two held episodes (``b`` is not held), each call logged."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def episodes_with_feedback(self, tenant_id: str, ids: list[str], category: str | None = None) -> Any:
        self.calls.append(list(ids))
        held = {"a": {"id": "a"}, "c": {"id": "c"}}
        return {i: held[i] for i in ids if i in held}, {i: (0.5, 1) for i in ids if i == "c"}


def test_an_early_read_is_not_repeated_even_for_what_it_did_not_find() -> None:
    store = _Store()
    early = (["a", "b"], store.episodes_with_feedback("t", ["a", "b"]))
    episodes, stats = _records(store, "t", ["a", "b", "c"], None, early)  # type: ignore[arg-type]
    assert store.calls == [["a", "b"], ["c"]]
    assert set(episodes) == {"a", "c"} and stats == {"c": (0.5, 1)}
    assert _records(store, "t", ["a", "b"], None, early) == early[1]  # type: ignore[arg-type]
    assert store.calls[-1] == ["c"]  # nothing left to read: no call
    assert _records(store, "t", ["a", "c"], None, None)[0].keys() == {"a", "c"}  # type: ignore[arg-type]


def test_a_search_looks_for_the_newest_version_once(wm: Any, monkeypatch: Any) -> None:
    calls = []
    latest = TenantTable.latest_dataset

    def counted(self: TenantTable) -> Any:
        calls.append(self.name)
        return latest(self)

    monkeypatch.setattr(TenantTable, "latest_dataset", counted)
    vec = np.asarray(wm.embedder.embed([QUERY])[0], dtype=np.float32)
    assert wm.index.vector_search("t", vec, k=5)  # every column: not the in-process copy
    assert len(calls) == 1
    calls.clear()
    assert wm.index.text_search("t", QUERY, k=5)
    assert len(calls) == 1
