"""Input limits: each is a config field with a default and a WORLDGRAPH_* variable, and a value
over one is refused before any work, naming the field, the limit and the setting to raise."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from worldgraph import WorldGraphConfig, WorldModel
from worldgraph.errors import DeltaValidationError, InvalidInputError
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.memory.record import build_episode, parse_experience

T = "limits"
BASE = {"agent_id": "a", "task_type": "t", "task_description": "d", "outcome": "success"}
EMPTY_DELTA: dict[str, list[Any]] = {"entities": [], "states": [], "edges": [], "rules": []}


@pytest.fixture
def wm(tmp_path: Path) -> Iterator[WorldModel]:
    model = WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64), max_text_bytes=1000, max_list_items=5,
                            max_experience_bytes=4000, max_nesting_depth=4, max_canvas_bytes=3000,
                            max_batch_experiences=3, max_query_bytes=100, max_delta_bytes=2000, max_delta_items=4)
    yield model
    model.close()


def test_defaults_are_documented_sizes() -> None:
    cfg = WorldGraphConfig()
    assert (cfg.max_text_bytes, cfg.max_query_bytes, cfg.max_list_items, cfg.max_nesting_depth) == (65_536, 4_096, 1_000, 32)
    assert cfg.max_experience_bytes == cfg.max_canvas_bytes == cfg.max_delta_bytes == 1 << 20
    assert cfg.max_batch_experiences == 10_000 and cfg.max_search_text_bytes == 65_536
    assert WorldGraphConfig.from_env({"WORLDGRAPH_MAX_QUERY_BYTES": "16384"}).max_query_bytes == 16_384


def _refused(call: Any, field: str, setting: str) -> InvalidInputError:
    with pytest.raises(InvalidInputError) as info:
        call()
    assert info.value.field == field, info.value
    assert setting in info.value.rule and f"WORLDGRAPH_{setting.upper()}" in info.value.rule, info.value.rule
    return info.value


@pytest.mark.parametrize("exp, field, setting", [
    ({**BASE, "task_description": "x" * 1001}, "experience.task_description", "max_text_bytes"),
    ({**BASE, "task_description": "é" * 501}, "experience.task_description", "max_text_bytes"),  # bytes, not characters
    ({**BASE, "learnings": ["x"] * 6}, "experience.learnings", "max_list_items"),
    ({**BASE, "learnings": ["ok", "y" * 1001]}, "experience.learnings[1]", "max_text_bytes"),
    ({**BASE, "actions": ["a"] * 6}, "experience.actions", "max_list_items"),
    ({**BASE, "learnings": ["z" * 900] * 5}, "experience", "max_experience_bytes"),
    ({**BASE, "reasoning_chain": {"steps": [{"thought": [[["deep"]]]}]}}, "experience.reasoning_chain.steps[0].thought",
     "max_nesting_depth"),
])
def test_experience_limits(wm: WorldModel, exp: dict[str, Any], field: str, setting: str) -> None:
    _refused(lambda: wm.record_experience(T, exp), field, setting)
    assert wm.store.stats(T)["episodes"] == 0


def test_canvas_limits(wm: WorldModel) -> None:
    _refused(lambda: wm.record_experience(T, BASE, canvas={"id": "c", "state": {"a": {"b": {"c": {"d": 1}}}}}),
             "canvas.state.a.b.c", "max_nesting_depth")
    _refused(lambda: wm.record_experience(T, BASE, canvas={"id": "c", "components": [{"t": "w" * 900}] * 4}),
             "canvas", "max_canvas_bytes")
    _refused(lambda: wm.record_experiences(T, [BASE, BASE], canvases=[None, {"id": "c", "components": [{}] * 6}]),
             "canvases[1].components", "max_list_items")
    assert wm.store.stats(T)["episodes"] == 0


def test_batch_limit_reads_no_further_than_the_limit(wm: WorldModel) -> None:
    pulled = []

    def endless() -> Iterator[dict[str, Any]]:
        while True:
            pulled.append(1)
            yield BASE

    err = _refused(lambda: wm.record_experiences(T, endless()), "experiences", "max_batch_experiences")
    assert "several calls" in err.rule and len(pulled) == 4
    assert len(wm.record_experiences(T, [BASE] * 3)) == 3


def test_query_limit_is_refused_fast(wm: WorldModel) -> None:
    wm.record_experience(T, BASE)
    start = time.perf_counter()
    _refused(lambda: wm.recall_experiences(T, None, "q" * 101), "query", "max_query_bytes")
    assert time.perf_counter() - start < 0.5
    assert wm.recall_experiences(T, None, "d" * 100, options={"min_similarity": -1.0}) is not None
    _refused(lambda: wm.recall_experiences(T, None, "d", options={"agent_id": "x" * 1001}), "options.agent_id",
             "max_text_bytes")


def test_feedback_text_limit(wm: WorldModel) -> None:
    eid = wm.record_experience(T, BASE)
    _refused(lambda: wm.submit_feedback(T, eid, 0.5, notes="n" * 1001), "notes", "max_text_bytes")
    assert wm.store.feedback_for(T, eid) == []


def test_delta_limits(wm: WorldModel) -> None:
    big = {**EMPTY_DELTA, "entities": [{"name": "crate", "type": "item", "evidence": "e" * 900}] * 3}
    for delta in (big, __import__("json").dumps(big)):
        with pytest.raises(DeltaValidationError, match=r"over the limit of 2000 \(raise it with the config field "
                                                       r"max_delta_bytes or WORLDGRAPH_MAX_DELTA_BYTES\)"):
            wm.apply_delta(T, "env", delta)
    many = {**EMPTY_DELTA, "entities": [{"name": f"n{i}", "type": "item"} for i in range(5)]}
    with pytest.raises(DeltaValidationError, match="more than the limit of 4"):
        wm.apply_delta(T, "env", many)
    assert wm.store.environments(T) == []


def test_a_huge_legacy_record_is_indexed_cut_and_recalled(tmp_path: Path) -> None:
    """A record stored before the limits (written straight into the store) is indexed with its
    searchable text cut at max_search_text_bytes, so a full-text scan of it stays cheap."""
    data = tmp_path / "data"
    WorldModel.open(data, embedder=HashingEmbedder(64)).close()
    exp = parse_experience({**BASE, "task_description": "ledger"})
    ep, _, _ = build_episode(T, exp, None)
    ep["task_description"] = "ledger reconciliation " + "filler words of an old log " * 200_000  # ~5.6 MB
    from worldgraph.kg.embedded.store import EmbeddedGraphStore

    store = EmbeddedGraphStore(data / "worldgraph.db")
    store.add_episodes(T, [ep], [], [])  # pending: the next open indexes it
    store.close()
    with WorldModel.open(data, embedder=HashingEmbedder(64), max_search_text_bytes=4096) as wm:
        table = wm.index.table_for(T)
        assert table is not None
        (text,) = table.to_arrow().column("text").to_pylist()
        assert 4000 < len(text.encode()) <= 4096 and text.startswith("t\nledger reconciliation")
        res = wm.recall_experiences(T, None, "ledger reconciliation", options={"min_similarity": -1.0})
        assert res[0]["episode_id"] == ep["id"] and len(res[0]["task_description"]) > 5_000_000
