"""A data folder written by an earlier main opens and serves every read path (the fixture and how it
was made: tests/fixtures/make_data_9eed448.py), and the copies it kept of what it forgot are
derived again (tests/fixtures/make_data_9eed448_forgotten.py). Changes to what is stored extend
these checks."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from worldgraph import WorldModel

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def unpack(tmp_path: Path, name: str = "data_9eed448", folder: str = "prev-main-data") -> Path:
    """The fixture's data folder, unpacked into ``tmp_path`` (never written in place)."""
    with tarfile.open(FIXTURES / f"{name}.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / folder


def files_holding(root: Path, word: str) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and word.encode() in p.read_bytes())


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


def test_copies_of_what_9eed448_forgot_are_derived_again_on_upgrade(tmp_path: Path) -> None:
    """data_9eed448_forgotten: 9eed448 forgot and purged a turn, a canvas's only episode and a
    flagged round, leaving copies (make_data_9eed448_forgotten.py). The first open derives them
    again; after the purge it schedules, the words are in no file, and what was kept is still there."""
    data = unpack(tmp_path, "data_9eed448_forgotten", "prev-main-forgotten")
    assert files_holding(data, "MARKERMIDDLE"), "the fixture holds the copies"
    with WorldModel.open(data) as wm:
        turns = wm.list_episodes("acme", session_id="chat-1").items
        assert [t["agent_id"] for t in turns] == ["Alice", "Alice"]
        last = next(t for t in turns if "MARKERLAST" in t["task_description"])
        assert last["input_summary"] == "Alice: I adopted a cat named MARKERFIRST last week."
        assert last["index_status"] == "indexed", "its index row was written again"
        assert wm.store.get_canvas("acme", "canvas-9") is None, "the canvas went with its only episode"
        assert wm.cypher("acme", "MATCH (c:Canvas) RETURN c") == []
        graph = wm.world_graph("acme", "cellar")
        assert graph["meta"]["last_trigger_reason"] is None
        assert {n["name"] for n in graph["nodes"]} == {"crate", "bottle"}, "what was learned stays"
        (scene,) = graph["scenes"]
        assert "MARKERROUNDONE" not in scene["recent_history_excerpt"]
        assert [a["kind"] for a in wm.store.forget_log("acme")][-1] == "rederive"
        wm.purge()
        for word in ("MARKERMIDDLE", "MARKERCANVASACTION", "MARKERROUNDONE", "MARKERREASON"):
            assert files_holding(data, word) == [], word
        for word in ("MARKERKEPT", "MARKERFIRST", "MARKERLAST"):
            assert files_holding(data, word), word
        hits = wm.recall_experiences("acme", None, "what colour is the cat", limit=5, options={"min_similarity": 0.0})
        assert all("MARKERMIDDLE" not in (h["input_summary"] or "") for h in hits)
        assert [e.task_description for e in wm.list_episodes("other").items] == ["other tenant row"]
    with WorldModel.open(data) as wm:  # once: the second open finds nothing to do
        assert [a["kind"] for a in wm.store.forget_log("acme")].count("rederive") == 1


def test_a_9eed448_folder_gets_its_world_index_on_the_first_search(old_data: Path) -> None:
    """The world index (added after 9eed448) is built from the store on the first search of an
    environment (its marker is missing); the episode index and the world keep every row, and a
    reindex builds it again the same."""
    with WorldModel.open(old_data) as wm:
        assert wm.world_search.index.tenant_tables() == []
        before = wm.world_graph("acme", "kitchen")
        hits = wm.search_world("acme", "where is the brass key?", env_name="kitchen")
        assert hits and "brass key" in hits[0].text
        assert {h.id for h in hits} <= {r["id"] for part in ("nodes", "edges", "rules") for r in before[part]}
        rows = wm.world_search.index.count("acme")
        assert rows >= len(before["nodes"])
        assert wm.world_graph("acme", "kitchen") == before
        assert wm.index.count("acme") == 15
        assert "brass key" in wm.context("acme", "brass key", env_name="kitchen").text
        wm.reindex("acme")
        assert wm.world_search.index.count("acme") == rows
        assert wm.index.count("acme") == 15


def test_a_saved_projection_of_4624220_learns_the_facts(tmp_path: Path) -> None:
    """A saved on-disk projection written by the main whose embedded Cypher did not project facts
    (``make_data_4624220_facts_saved.py``: two facts merged, then the projection saved without a
    FACT table): its format is older, so it is built anew, and FACT queries answer what the store
    holds, as on Neo4j; a fact merged later is found too."""
    data = unpack(tmp_path, "data_4624220_facts_saved")
    folder = data / "worldgraph.db-cypher"
    old = {p.name for p in folder.iterdir()}
    query = ("MATCH (a:Entity {tenant_id: $tenant_id})-[f:FACT]->(b:Entity {tenant_id: $tenant_id}) "
             "USING INDEX a:Entity(tenant_id) WHERE f.valid_to IS NULL "
             "RETURN a.name AS subject, f.predicate AS predicate, b.name AS object, f.single_valued AS one "
             "ORDER BY subject, predicate")
    with WorldModel.open(data) as wm:
        assert wm.cypher("acme", query) == [
            {"subject": "brass key", "predicate": "unlocks", "object": "front door", "one": False},
            {"subject": "kitchen table", "predicate": "located_near", "object": "front door", "one": True}]
        assert wm.cypher("acme", "MATCH (e:Episode) RETURN count(e) AS n")[0]["n"] == 15
        report = wm.apply_delta("acme", "kitchen", {"entities": [], "states": [], "rules": [], "edges": [
            {"relation": "fact", "predicate": "located_near", "single_valued": True, "src_ref": "kitchen table",
             "dst_ref": "brass key"}]})
        assert report.ok and len(report.closed["edges"]) == 1
        assert [r["object"] for r in wm.cypher("acme", query)] == ["front door", "brass key"]
    assert old and not [n for n in old if (folder / n).exists()]  # the old database and its name are gone


def test_folder_of_9eed448_is_searched_through_a_saved_mirror(old_data: Path) -> None:
    """9eed448 had no in-process index (memory/index/mirror.py). With its tables counted as big
    (mirror_min_rows=1), its old table (float32 vectors, BTREE indexes, a forgotten row) is searched
    through a mirror built from it, with LanceDB's answers; the mirror is saved beside the tables
    (lancedb/_mirror), and the next process reopens it without reading a vector and sees the rows
    written and forgotten since."""
    from worldgraph.config import WorldGraphConfig
    from worldgraph.memory.index import mirror_files

    query, where = "quarterly sales numbers by region", [None, {"agent_id": "agent-1"}, {"success_only": True}]

    def answers(wm: WorldModel) -> list[list[str]]:
        wm.index._small.max_rows = 0  # not the in-process copy of small tables: the path under test
        return [sorted(h["episode_id"] for h in wm.recall_experiences("acme", None, query, limit=20, options=o))
                for o in where]

    with WorldModel.open(old_data, config=WorldGraphConfig(mirror_min_rows=0)) as wm:
        want = answers(wm)
    assert all(want) and want[0] != want[1]
    with WorldModel.open(old_data, config=WorldGraphConfig(mirror_min_rows=1)) as wm:
        assert wm.index.mirror_stats("acme") is None
        assert answers(wm) == want
        stats = wm.index.mirror_stats("acme")
        assert stats is not None and stats["live"] == 15 and stats["read_rows"] >= 15
        new = wm.record_experience("acme", {"agent_id": "agent-1", "task_type": "report", "outcome": "success",
                                            "task_description": "quarterly sales numbers by region, again"})
        gone = want[1][0]
        wm.forget_episode("acme", gone)
    folder = mirror_files.folder_of(str(old_data / "lancedb"), "ep-acme")
    assert (folder / "manifest.json").exists()
    with WorldModel.open(old_data, config=WorldGraphConfig(mirror_min_rows=1)) as wm:
        got = answers(wm)
        stats = wm.index.mirror_stats("acme")
        assert stats is not None and stats["live"] == 15 and stats["saved_rows"] == 15
        assert stats["read_rows"] == 1  # the saved rows reopened, only the one recorded since read
        assert new in got[1] and gone not in got[1] and gone not in got[0]


def test_index_of_9eed448_gets_metadata_terms(old_data: Path) -> None:
    """9eed448's tables have no metadata_terms column: read only, a metadata filter is checked on
    the hits; writable, the column is added (all null) and new episodes' metadata is filtered in
    the search, old episodes (which have no metadata) matching no equality."""
    with WorldModel.open(old_data, read_only=True) as wm:
        assert "metadata_terms" not in wm.index.table_for("acme").schema.names
        assert wm.recall_experiences("acme", None, "quarterly sales numbers by region",
                                     options={"metadata": {"team": "emea"}}) == []
        hits = wm.recall_experiences("acme", None, "quarterly sales numbers by region", limit=3,
                                     options={"metadata": {"team": {"$exists": False}}})
        assert hits and all(h["metadata"] == {} for h in hits)
    with WorldModel.open(old_data) as wm:
        wm.record_experience("acme", {"agent_id": "agent-9", "task_type": "report", "outcome": "success",
                                      "task_description": "quarterly sales numbers for EMEA",
                                      "metadata": {"team": "emea"}})
        assert "metadata_terms" in wm.index.table_for("acme").schema.names
        hits = wm.recall_experiences("acme", None, "quarterly sales numbers by region",
                                     options={"metadata": {"team": "emea"}, "min_similarity": -1.0})
        assert [h["task_description"] for h in hits] == ["quarterly sales numbers for EMEA"]
        wm.index.optimize()  # builds the label index over old and new rows
        assert "metadata_terms_idx" in {ix.name for ix in wm.index.table_for("acme").list_indices()}
        assert len(wm.recall_experiences("acme", None, "quarterly sales numbers by region", limit=20,
                                         options={"min_similarity": -1.0})) > 1


def test_folder_of_257ae78_opens_with_its_saved_mirror_and_graph(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """257ae78 saved a mirror and a graph over its codes beside the table (the fixture lowers the
    thresholds: tests/fixtures/make_data_257ae78_mirror.py). A later main opens that folder and
    searches it through them (or through a mirror and graph built again: they are derived data)
    with the answers of LanceDB's own search, takes new writes, and forgets through them: after a
    purge no file holds the forgotten episode's words, and no index file its id."""
    from worldgraph.config import WorldGraphConfig
    from worldgraph.memory.index import ivf

    data = unpack(tmp_path, "data_257ae78_mirror")
    monkeypatch.setattr(ivf, "MIN_ROWS", 100)
    saved = next(data.glob("**/_mirror/*/manifest.json")).parent
    assert json.loads((saved / "manifest.json").read_text())["format"] == 1 and (saved / "graph.usearch").exists()
    query = "reconcile the ledger"
    where = [None, {"agent_id": "agent-3"}, {"success_only": True}, {"canvas_ids": ["c4"]},
             {"metadata": {"project": "p2"}}]

    def answers(wm: WorldModel, role: str | None = None) -> list[list[str]]:
        wm.index._small.max_rows = 0  # not the in-process copy of small tables: the path under test
        return [sorted(h["episode_id"] for h in wm.recall_experiences("acme", role, query, limit=10, options=o))
                for o in where]

    with WorldModel.open(data, config=WorldGraphConfig(mirror_min_rows=0)) as wm:
        want, want_ops = answers(wm), answers(wm, "Ops")
    assert all(want) and want[0] != want[1] and want[0] != want[3]
    mirrored = WorldGraphConfig(mirror_min_rows=50, mirror_exact_rows=40)
    with WorldModel.open(data, config=mirrored) as wm:
        assert answers(wm) == want and answers(wm, "Ops") == want_ops
        stats = wm.index.mirror_stats("acme")
        assert stats is not None and stats["live"] == 152
        # its rows kept, their residuals read from the table (mirror_files.py: format 2), the lists
        # (ivf.py) in place of the graph, whose files are gone
        assert wm.index.warm_mirror("acme", timeout=60) and wm.index.mirror_stats("acme")["read_rows"] == 0
        assert answers(wm) == want and not (saved / "graph.usearch").exists()
        wm.index._mirrors.save_all()  # format 3 and on: with the residuals and the hashes of the episode ids
        assert json.loads((saved / "manifest.json").read_text())["format"] == 4 and (saved / "fine.bin").exists()
        assert (saved / "eid.bin").stat().st_size == 8 * 152
        # the filters only the store holds, through the upgraded mirror: a session, a feedback floor
        opts = {"min_similarity": -1.0}
        chat = wm.recall_experiences("acme", None, "where is the pallet", limit=10,
                                     options={**opts, "session_id": "chat-1"})
        assert sorted(r["agent_id"] for r in chat) == ["Alice", "Bob"]
        rated = want[2][-1]
        wm.submit_feedback("acme", rated, 0.9)
        assert [r["episode_id"] for r in wm.recall_experiences("acme", None, query, limit=10,
                                                               options={**opts, "min_feedback_score": 0.9})] == [rated]
        hits = wm.search_world("acme", "what does the brass key unlock?", env_name="kitchen", k=3)
        assert any(h.text == "brass key unlocks front door" for h in hits)
        turns = wm.list_episodes("acme", session_id="chat-1").items
        assert sorted(t.agent_id for t in turns) == ["Alice", "Bob"]
        new = wm.record_experience("acme", {"agent_id": "agent-3", "agent_role": "Ops", "task_type": "report",
                                            "task_description": "reconcile the ledger once more", "outcome": "success"})
        gone = want[1][0]
        gone_text = wm.get_episode("acme", gone).task_description
        wm.forget_episode("acme", gone)
        got = answers(wm)
        assert new in got[1] and gone not in got[1] and gone not in got[0]
        wm.purge()
        assert answers(wm)[1] == got[1]
    # the words nowhere; the id only in the store's audit row of the forget (docs/forget.md)
    assert files_holding(data, gone_text) == [] and files_holding(data, gone) == ["worldgraph.db"]
    with WorldModel.open(data, config=mirrored) as wm:  # reopened after the purge: the same answers
        assert answers(wm)[1] == got[1]


def test_folder_of_9c2889b_gains_the_id_hashes_and_answers_store_filters(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """9c2889b saved its mirror as format 2 (codes, residuals, lists; no hashes of the episode ids:
    tests/fixtures/make_data_9c2889b_mirror.py). A later main opens it without reading the table,
    makes the hashes from the mirror's id files, answers the session and feedback filters through
    it with LanceDB's answers, saves it (format 4), puts its codes in the order of its saved lists
    in the background (a new codes' file in codes.bin's place: the answers the same), and sees a
    rating another process writes."""
    import subprocess
    import sys

    from worldgraph.config import WorldGraphConfig
    from worldgraph.memory.index import ivf

    data = unpack(tmp_path, "data_9c2889b_mirror")
    monkeypatch.setattr(ivf, "MIN_ROWS", 100)  # (as the fixture was made: its 153 rows have lists)
    saved = next(data.glob("**/_mirror/*/manifest.json")).parent
    assert json.loads((saved / "manifest.json").read_text())["format"] == 2 and not (saved / "eid.bin").exists()
    query, opts = "reconcile the ledger", {"min_similarity": -1.0}
    options = [{"session_id": "chat-1"}, {"session_id": "chat-2"}, {"min_feedback_score": 0.5},
               {"min_feedback_score": 0.2, "feedback_category": "accuracy"}, {"feedback_category": "accuracy"},
               {"min_feedback_score": 0.3, "agent_id": "agent-3"}]

    def answers(wm: WorldModel) -> list[list[str]]:
        wm.index._small.max_rows = 0  # not the in-process copy of small tables: the path under test
        return [sorted(h["episode_id"] for h in wm.recall_experiences("acme", None, query, limit=10,
                                                                       options={**opts, **o})) for o in options]

    with WorldModel.open(data, config=WorldGraphConfig(mirror_min_rows=0)) as wm:
        want = answers(wm)  # LanceDB's search with the episode ids pushed in
    assert all(want[:4]) and len(want[0]) == 2 and len(want[1]) == 1
    mirrored = WorldGraphConfig(mirror_min_rows=50, mirror_exact_rows=40)
    with WorldModel.open(data, config=mirrored) as wm:
        assert answers(wm) == want
        stats = wm.index.mirror_stats("acme")
        assert stats is not None and stats["read_rows"] == 0 and stats["live"] == 153  # no table read
        wm.index._mirrors.save_all()
        assert json.loads((saved / "manifest.json").read_text())["format"] == 4
        assert (saved / "eid.bin").stat().st_size == 8 * 153
        assert wm.index.wait_for_maintenance(120)  # the codes put in the lists' order meanwhile
        manifest = json.loads((saved / "manifest.json").read_text())
        assert manifest["codes"].startswith("codes-") and manifest["order"]["rows"] == manifest["rows"]
        assert not (saved / "codes.bin").exists() and answers(wm) == want
        unrated = next(e for e in answers(wm)[0])  # a turn of chat-1: never rated
        code = ("from worldgraph import WorldModel\n"
                f"with WorldModel.open({str(data)!r}) as wm:\n"
                f"    wm.submit_feedback('acme', {unrated!r}, 1.0, category='accuracy')\n")
        subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
        assert unrated in answers(wm)[3]
    with WorldModel.open(data, config=mirrored) as wm:  # reopened: format 4, in list order, nothing read again
        assert answers(wm)[3] == sorted([*want[3], unrated])
        assert wm.index.mirror_stats("acme")["read_rows"] == 0


def test_episode_records_of_9eed448_read_as_written_beside_format_2(old_data: Path) -> None:
    """9eed448 kept every episode record whole (format 1); this main keeps new ones shorter
    (format 2, kg/embedded/episode_format.py). Both are read from the one table, the old rows are
    neither rewritten nor read differently, and a forget and purge of either kind leaves no word."""
    import sqlite3

    from worldgraph.kg.codec import loads
    from worldgraph.kg.embedded.episode_format import FORMAT_KEY

    def rows() -> dict[str, str]:
        con = sqlite3.connect(old_data / "worldgraph.db")
        try:
            return dict(con.execute("SELECT id, data FROM episodes WHERE tenant_id = 'acme'").fetchall())
        finally:
            con.close()

    old_rows = rows()
    assert old_rows and not any(FORMAT_KEY in loads(d) for d in old_rows.values())
    with WorldModel.open(old_data) as wm:
        before = {e.id: dict(e) for e in wm.list_episodes("acme", limit=100).items}
        assert {i: dict(wm.get_episode("acme", i)) for i in before} == before
        assert all(before[i] | {"index_status": None, "index_error": None}
                   == loads(old_rows[i]) | {"index_status": None, "index_error": None} for i in before)
        new = wm.record_experience("acme", {"agent_id": "agent-9", "task_type": "report", "outcome": "failure",
                                            "task_description": "a slim record of the kestrel ledger",
                                            "error_message": "kestrel totals off by one"})
        got = dict(wm.get_episode("acme", new))
        assert got["episode_id"] == new and got["error_message"] == "kestrel totals off by one"
        assert got["canvas_name"] is None and got["learnings"] == [] and got["timestamp"].endswith("+00:00")
        after = {e.id: dict(e) for e in wm.list_episodes("acme", limit=100).items}
        assert {i: r for i, r in after.items() if i != new} == before and after[new] == got
        cypher = {r["e"]["id"]: r["e"]["record"] for r in wm.cypher("acme", "MATCH (e:Episode) RETURN e")}
        assert cypher[new]["error_message"] == "kestrel totals off by one" and cypher[new]["episode_id"] == new
        assert loads(rows()[new])[FORMAT_KEY] == 2 and "error_message" not in rows()[new]
        old_one = next(i for i in before if before[i]["task_type"] != "conversation")
        old_words = before[old_one]["task_description"]
        wm.forget_episode("acme", new)
        wm.forget_episode("acme", old_one)
        wm.purge()
    now = rows()
    assert new not in now and old_one not in now
    assert {i: old_rows[i] for i in now} == now  # the old rows untouched: format 1 as they were
    assert files_holding(old_data, "kestrel") == [] and files_holding(old_data, old_words) == []


def test_folder_of_6728ec7_gets_its_codes_in_list_order_in_place(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """6728ec7 saved its mirror as format 3 (codes in arrival order, lists over them:
    tests/fixtures/make_data_6728ec7_mirror.py). A later main opens it without reading the table,
    answers with LanceDB's answers, puts the codes in the order of the saved lists in the
    background (a new codes' file in codes.bin's place, each row's place beside it: format 4),
    answers the same from them, forgets through them, and a new process opens them as they are."""
    from worldgraph.config import WorldGraphConfig
    from worldgraph.memory.index import ivf

    data = unpack(tmp_path, "data_6728ec7_mirror")
    monkeypatch.setattr(ivf, "MIN_ROWS", 100)  # (as the fixture was made: its 153 rows have lists)
    saved = next(data.glob("**/_mirror/*/manifest.json")).parent
    assert json.loads((saved / "manifest.json").read_text())["format"] == 3 and (saved / "codes.bin").exists()
    query, opts = "reconcile the ledger", {"min_similarity": -1.0}
    options = [{}, {"agent_id": "agent-3"}, {"session_id": "chat-1"}, {"min_feedback_score": 0.2}]

    def answers(wm: WorldModel) -> list[list[str]]:
        wm.index._small.max_rows = 0  # not the in-process copy of small tables: the path under test
        return [sorted(h["episode_id"] for h in wm.recall_experiences("acme", None, query, limit=10,
                                                                       options={**opts, **o})) for o in options]

    with WorldModel.open(data, config=WorldGraphConfig(mirror_min_rows=0)) as wm:
        want = answers(wm)
    assert all(want)
    mirrored = WorldGraphConfig(mirror_min_rows=50, mirror_exact_rows=40)
    with WorldModel.open(data, config=mirrored) as wm:
        assert answers(wm) == want
        assert wm.index.wait_for_maintenance(120)
        manifest = json.loads((saved / "manifest.json").read_text())
        assert manifest["format"] == 4 and manifest["codes"].startswith("codes-")
        assert manifest["order"]["rows"] == manifest["rows"] == 153 and not (saved / "codes.bin").exists()
        assert answers(wm) == want and wm.index.mirror_stats("acme")["read_rows"] == 0
        gone = want[0][0]
        wm.forget_episode("acme", gone)
        assert all(gone not in got for got in answers(wm))
    with WorldModel.open(data, config=mirrored) as wm:  # reopened: in list order, nothing read again
        assert all(gone not in got for got in answers(wm))
        assert wm.index._mirrors.held(next(iter(wm.index._mirrors._mirrors))).cols.ordered == 153
        assert wm.index.mirror_stats("acme")["read_rows"] == 0
        assert json.loads((saved / "manifest.json").read_text())["codes"] == manifest["codes"]
