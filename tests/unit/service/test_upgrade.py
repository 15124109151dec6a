"""A data folder written by an earlier main opens and serves every read path (the fixture and how it
was made: tests/fixtures/make_data_9eed448.py). Changes to what is stored extend these checks."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from worldgraph import WorldModel

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def unpack(tmp_path: Path, name: str = "data_9eed448") -> Path:
    """The fixture's data folder, unpacked into ``tmp_path`` (never written in place)."""
    with tarfile.open(FIXTURES / f"{name}.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "prev-main-data"


@pytest.fixture
def old_data(tmp_path: Path) -> Path:
    return unpack(tmp_path)


def test_folder_of_9eed448_opens_and_serves(old_data: Path) -> None:
    with WorldModel.open(old_data) as wm:
        page = wm.list_episodes("acme", limit=100)
        assert len(page.items) == 15  # 12 runs - 1 forgotten + 3 turns + 1 round
        hits = wm.recall_experiences("acme", None, "quarterly sales numbers by region", limit=3)
        assert hits and all("sales" in h["task_description"] for h in hits)
        turns = wm.list_episodes("acme", session_id="chat-1").items
        assert [t.agent_id for t in turns] == ["Alice", "Bob", "Alice"]
        graph = wm.world_graph("acme", "kitchen")
        assert {n["name"] for n in graph["nodes"]} >= {"brass key", "kitchen table", "front door"}
        assert wm.cypher("acme", "MATCH (n:Entity) RETURN count(n) AS n")[0]["n"] == 3
        assert wm.cypher("acme", "MATCH (e:Episode) RETURN count(e) AS n")[0]["n"] == 15
        assert [e.task_description for e in wm.list_episodes("other").items] == ["other tenant row"]
        # new writes land beside the old rows
        new = wm.record_experience("acme", {"agent_id": "agent-9", "task_type": "report",
                                            "task_description": "a new run after the upgrade", "outcome": "success"})
        assert wm.get_episode("acme", new).task_description == "a new run after the upgrade"


def test_index_of_9eed448_gets_bitmap_role_and_agent_indexes(old_data: Path) -> None:
    """9eed448 indexed agent_role and agent_id with BTREEs; the next maintenance rebuilds them as
    BITMAPs in place (filters on them are evaluated faster: docs/architecture.md, "The index")."""
    with WorldModel.open(old_data) as wm:
        kinds = {ix.name: ix.index_type for ix in wm.index.table_for("acme").list_indices()}
        assert kinds["agent_role_idx"] == "BTree"
        wm.index.optimize()
        kinds = {ix.name: ix.index_type for ix in wm.index.table_for("acme").list_indices()}
        assert kinds["agent_role_idx"] == kinds["agent_id_idx"] == "Bitmap"
        hits = wm.recall_experiences("acme", None, "quarterly sales numbers by region", limit=3)
        assert hits and all("sales" in h["task_description"] for h in hits)
        # its vectors stay float32 (new tables store float16); new rows are cast to it
        assert str(wm.index.table_for("acme").schema.field("vector").type.value_type) == "float"
        wm.record_experience("acme", {"agent_id": "agent-9", "task_type": "report", "outcome": "success",
                                      "task_description": "regional sales numbers, a later run"})
        hits = wm.recall_experiences("acme", None, "regional sales numbers later run", limit=1)
        assert hits[0]["task_description"] == "regional sales numbers, a later run"


def test_facts_join_the_world_of_a_9eed448_folder(old_data: Path) -> None:
    """A fact of any kind merges into a world written before facts existed, between its old
    entities (by name), and the old edges stay exactly as they were."""
    with WorldModel.open(old_data) as wm:
        before = {e["id"]: e for e in wm.world_graph("acme", "kitchen")["edges"]}
        report = wm.apply_delta("acme", "kitchen", {"entities": [], "states": [], "rules": [], "edges": [
            {"relation": "fact", "predicate": "unlocks", "src_ref": "brass key", "dst_ref": "front door",
             "evidence": "The brass key fits the front door."}]})
        assert report.ok and report.dropped == [] and len(report.created["edges"]) == 1
        graph = wm.world_graph("acme", "kitchen")
        edges = {e["id"]: e for e in graph["edges"]}
        [fact] = [e for e in graph["edges"] if e["relation"] == "fact"]
        names = {n["id"]: n["name"] for n in graph["nodes"]}
        assert (names[fact["src_id"]], fact["predicate"], names[fact["dst_id"]]) == ("brass key", "unlocks", "front door")
        assert {k: v for k, v in edges.items() if k in before} == before


def test_a_saved_projection_of_338dd6d_is_not_trusted(tmp_path: Path) -> None:
    """A saved on-disk projection written by the main before the sandbox, into which a query of that
    main wrote (``make_data_338dd6d_saved.py``): its format is older, so it is built anew from the
    store's rows, and Cypher answers what the store holds, never what the query wrote; the folder
    then serves Cypher as before, its new projection saved."""
    data = unpack(tmp_path, "data_338dd6d_saved")
    folder = data / "worldgraph.db-cypher"
    old = {p.name for p in folder.iterdir()}
    assert any(n.endswith(".lbug") for n in old)
    with WorldModel.open(data) as wm:
        names = [r["name"] for r in wm.cypher("acme", "MATCH (n:Entity) RETURN n.name AS name ORDER BY name")]
        assert names == ["brass key", "front door", "kitchen table"]
        assert wm.cypher("acme", "MATCH (e:Episode) RETURN count(e) AS n")[0]["n"] == 15
        assert wm.cypher("other", "MATCH (e:Episode) RETURN e.task_description AS t") == [{"t": "other tenant row"}]
    assert not [n for n in old if n.endswith(".lbug") and (folder / n).exists()]  # the untrusted file is gone


def test_folder_of_9eed448_takes_idempotent_writes_and_quick_stats(old_data: Path) -> None:
    """The idempotency table (added after 9eed448) is made on the first writable open; the store's
    `indexed` count (stats without the index) reads the old rows."""
    from worldgraph.facade import store_only

    run = {"agent_id": "agent-9", "task_type": "report", "task_description": "an idempotent run",
           "outcome": "success"}
    with WorldModel.open(old_data) as wm:
        before = wm.stats("acme")["episodes"]
        first = wm.record_experience("acme", run, idempotency_key="upgrade-1")
        assert wm.record_experience("acme", run, idempotency_key="upgrade-1") == first
        assert wm.stats("acme")["episodes"] == before + 1
        full = wm.stats("acme")
    quick = store_only.stats(old_data, "embedded", "acme")
    assert quick is None or quick["indexed"] == full["indexed"] == full["episodes"]
