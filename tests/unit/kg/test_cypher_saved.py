"""Cypher projections saved beside the embedded store's SQLite file (``embedded.cypher.saved``):
reopened instead of rebuilt while current, rebuilt when any process wrote since, never trusted
when damaged, private, and swept of older builds."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from worldgraph import WorldModel
from worldgraph.kg.embedded.cypher import opener as opener_module
from worldgraph.kg.embedded.cypher import projection as embedded_cypher
from worldgraph.kg.embedded.cypher.saved import DB_NAME, SavedProjections, folder_for
from worldgraph.kg.embedded.store import EmbeddedGraphStore
from worldgraph.memory.embeddings import HashingEmbedder

COUNT = "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n"


def _empty(folder: Path) -> None:
    import shutil

    for f in folder.iterdir():
        shutil.rmtree(f) if f.is_dir() else f.unlink()


def _exp(task: str) -> dict[str, Any]:
    return {"agent_id": "a", "agent_role": "r", "task_type": "x", "task_description": task, "outcome": "success"}


@pytest.fixture(autouse=True)
def save_small_tenants(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tenants are small: save their projections anyway (the default saves from 5,000 rows)."""
    monkeypatch.setattr(opener_module, "SAVE_MIN_ROWS", 0)


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Path]:
    """A data folder whose tenant t1 holds 3 episodes and has a saved projection."""
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        wm.record_experiences("t1", [_exp(f"task {i}") for i in range(3)])
        assert wm.cypher("t1", COUNT) == [{"n": 3}]
    yield tmp_path


def _store_file(data: Path) -> Path:
    return next(p for p in data.iterdir() if p.suffix == ".db")


def _meta(data: Path, tenant: str = "t1") -> dict[str, Any]:
    folder = folder_for(_store_file(data))
    return dict(json.loads((folder / f"{SavedProjections.key(tenant)}.json").read_text()))


def _in_another_process(data: Path, statement: str) -> None:
    """Run ``statement`` (on ``wm``, the data folder's WorldModel) in a process of its own."""
    code = ("import sys; from worldgraph import WorldModel; from worldgraph.memory.embeddings import HashingEmbedder;"
            f"wm = WorldModel.open(sys.argv[1], embedder=HashingEmbedder(64)); {statement}; wm.close()")
    subprocess.run([sys.executable, "-c", code, str(data)], check=True, timeout=120)


def test_a_current_saved_projection_is_reopened_not_rebuilt(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = _meta(data)
    monkeypatch.setattr(opener_module, "load_tenant", lambda *a, **k: pytest.fail("rebuilt from SQLite"))
    store = EmbeddedGraphStore(_store_file(data))
    try:
        assert store.cypher("t1", COUNT) == [{"n": 3}]
        assert store.cypher("t1", "MATCH (e:Episode {tenant_id: $tenant_id, task_description: 'task 1'}) "
                                  "RETURN e.outcome AS o") == [{"o": "success"}]
    finally:
        store.close()
    assert _meta(data) == saved


def test_episodes_another_process_wrote_are_applied_to_the_saved_projection(data: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    before = _meta(data)
    _in_another_process(data, "wm.record_experience('t1', {'agent_id': 'b', 'agent_role': 'r', 'task_type': 'x', "
                              "'task_description': 'late', 'outcome': 'success'})")
    with monkeypatch.context() as m:  # reopened and brought up to date row by row, not rebuilt
        m.setattr(opener_module, "load_tenant", lambda *a, **k: pytest.fail("rebuilt from SQLite"))
        with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
            assert wm.cypher("t1", COUNT) == [{"n": 4}]
            assert wm.cypher("t1", "MATCH (e:Episode {tenant_id: $tenant_id})-[:PERFORMED_BY]->(a:Agent) "
                                   "WHERE e.task_description = 'late' RETURN a.id AS a") == [{"a": "b"}]
    after = _meta(data)
    assert after["file"] == before["file"] and after["gens"][0][0] > before["gens"][0][0]
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:  # and saved so: the next open reopens it
        assert wm.cypher("t1", COUNT) == [{"n": 4}]
    assert _meta(data) == after


def test_an_environment_another_process_added_makes_it_rebuilt(data: Path) -> None:
    """A world write that adds an environment is not applied row by row (nor to a reopened file)."""
    before = _meta(data)
    _in_another_process(data, "wm.apply_delta('t1', 'Env', {'entities': [{'ref': 'k', 'name': 'key', 'type': "
                              "'item'}], 'states': [], 'edges': [], 'rules': []})")
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        assert wm.cypher("t1", COUNT) == [{"n": 3}]
        assert wm.cypher("t1", "MATCH (n:Entity {tenant_id: $tenant_id}) RETURN n.name AS n") == [{"n": "key"}]
    after = _meta(data)
    assert after["file"] != before["file"] and after["gens"][1][0] > before["gens"][1][0]
    folder = folder_for(_store_file(data))
    assert not (folder / before["file"]).exists()  # the older build is swept


@pytest.mark.parametrize("damage", ["database", "meta", "other tenant's meta", "format"])
def test_a_damaged_or_foreign_saved_projection_is_rebuilt(data: Path, damage: str) -> None:
    folder = folder_for(_store_file(data))
    meta_path = folder / f"{SavedProjections.key('t1')}.json"
    meta = json.loads(meta_path.read_text())
    if damage == "database":
        with open(folder / meta["file"] / DB_NAME, "r+b") as f:
            f.write(os.urandom(8192))
    elif damage == "meta":
        meta_path.write_text("{not json")
    elif damage == "other tenant's meta":  # copied from another tenant: names it, so not used
        meta_path.write_text(json.dumps({**meta, "tenant_id": "t2"}))
    else:
        meta_path.write_text(json.dumps({**meta, "format": -1}))
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        assert wm.cypher("t1", COUNT) == [{"n": 3}]
        assert wm.cypher("t1", "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.task_description AS t "
                               "ORDER BY t") == [{"t": f"task {i}"} for i in range(3)]
    assert _meta(data)["file"] != meta["file"]


def test_files_are_private_and_a_stray_build_is_swept(data: Path) -> None:
    folder = folder_for(_store_file(data))
    stray = folder / f"{SavedProjections.key('t1')}-killedmidbuild"
    stray.mkdir()
    (stray / DB_NAME).write_bytes(b"half")
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        wm.record_experience("t1", _exp("one more"))
        assert wm.cypher("t1", COUNT) == [{"n": 4}]
    assert not stray.exists()
    if os.name == "posix":
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        for f in folder.rglob("*"):
            assert stat.S_IMODE(f.stat().st_mode) & 0o077 == 0, f
    names = os.listdir(folder)
    assert not any("t1" in n for n in names)  # named by a hash, not by the tenant


def test_two_store_objects_read_one_file_and_a_write_copies_it_while_the_other_reads(data: Path) -> None:
    """Two store objects of one file read one saved projection (their query children open it
    read-only). A write through one: its refresh finds the other's children holding the file, so
    it writes a copy and names it current; the other reads on, then moves to the copy."""
    a = EmbeddedGraphStore(_store_file(data))
    b = EmbeddedGraphStore(_store_file(data))
    try:
        assert a.cypher("t1", COUNT) == [{"n": 3}]
        assert b.cypher("t1", COUNT) == [{"n": 3}]
        pa, pb = a.projections.current("t1"), b.projections.current("t1")
        assert pa is not None and pb is not None and pa.path == pb.path
        first = pa.path
        with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
            wm.record_experience("t1", _exp("the fourth"))
        assert a.cypher("t1", COUNT) == [{"n": 4}]
        assert a.projections.current("t1").path != first  # b's children hold the first: a copy was written
        assert b.cypher("t1", COUNT) == [{"n": 4}]
    finally:
        a.close()
        b.close()


def test_a_small_tenant_is_not_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from worldgraph.kg.embedded.cypher import opener as opener_module

    monkeypatch.setattr(opener_module, "SAVE_MIN_ROWS", 4)
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        wm.record_experiences("t1", [_exp(f"task {i}") for i in range(3)])
        assert wm.cypher("t1", COUNT) == [{"n": 3}]
        folder = folder_for(_store_file(tmp_path))
        assert not [p for p in folder.iterdir() if p.is_file()]  # (its file is in the store's scratch folder)
        wm.record_experience("t1", _exp("the fourth"))
        assert wm.cypher("t1", COUNT) == [{"n": 4}]  # the temporary projection, brought up to date
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:  # the next open builds and saves it
        assert wm.cypher("t1", COUNT) == [{"n": 4}]
        assert _meta(tmp_path)["gens"][0][0] > 0


def test_a_read_only_store_saves_nothing(data: Path) -> None:
    folder = folder_for(_store_file(data))
    _empty(folder)
    store = EmbeddedGraphStore(_store_file(data), read_only=True)
    try:
        assert store.cypher("t1", COUNT) == [{"n": 3}]
    finally:
        store.close()
    assert list(folder.iterdir()) == []


def test_a_large_tenant_is_built_in_a_child_process(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over CHILD_MIN_EPISODES the build runs in a child (its memory goes with it); this process
    opens the file, and a world write afterwards reloads the world part it has no rows of."""
    from worldgraph.kg.embedded.cypher import opener as opener_module

    _empty(folder_for(_store_file(data)))
    monkeypatch.setattr(opener_module, "CHILD_MIN_EPISODES", 1)
    monkeypatch.setattr(opener_module, "load_tenant", lambda *a, **k: pytest.fail("built in this process"))
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        assert wm.cypher("t1", COUNT) == [{"n": 3}]
        assert _meta(data)["gens"][0][0] > 0
        delta = {"entities": [{"ref": "c", "name": "copper coin", "type": "item"}], "states": [], "edges": [],
                 "rules": []}
        assert wm.apply_delta("t1", "Env", delta).ok
        assert wm.cypher("t1", "MATCH (n:Entity {tenant_id: $tenant_id}) RETURN n.name AS n") == [{"n": "copper coin"}]
        assert wm.cypher("t1", COUNT) == [{"n": 3}]


def test_a_failed_child_build_falls_back_to_this_process(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from worldgraph.kg.embedded.cypher import opener as opener_module

    def fail(*a: Any, **k: Any) -> Any:
        raise RuntimeError("the projection build process failed (-9): killed")
    _empty(folder_for(_store_file(data)))
    monkeypatch.setattr(opener_module, "CHILD_MIN_EPISODES", 1)
    monkeypatch.setattr(opener_module, "build_in_child", fail)
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        assert wm.cypher("t1", COUNT) == [{"n": 3}]
    assert len([f for f in folder_for(_store_file(data)).iterdir() if (f / DB_NAME).exists()]) == 1


def test_a_world_delta_after_a_reopen_is_applied_row_by_row(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The world rows a reopened projection holds are read when it is opened, so the first world
    write afterwards is applied row by row like any other (no world part reloaded)."""
    nodes = "MATCH (n:Entity {tenant_id: $tenant_id}) RETURN n.name AS name ORDER BY name"
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        delta = {"entities": [{"ref": "c", "name": "crate", "type": "container"}], "states": [], "edges": [],
                 "rules": []}
        assert wm.apply_delta("t1", "Env", delta).ok
        assert wm.cypher("t1", nodes) == [{"name": "crate"}]
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        monkeypatch.setattr(opener_module, "load_tenant", lambda *a, **k: pytest.fail("rebuilt from SQLite"))
        assert wm.cypher("t1", nodes) == [{"name": "crate"}]  # reopened
        monkeypatch.setattr(embedded_cypher.Projection, "replace_world",
                            lambda *a, **k: pytest.fail("reloaded the whole world part"))
        delta = {"entities": [{"ref": "b", "name": "bottle", "type": "item"}, {"ref": "c", "name": "crate",
                                                                             "type": "container"}],
                 "states": [], "edges": [{"relation": "containment", "src_ref": "c", "dst_ref": "b"}], "rules": []}
        assert wm.apply_delta("t1", "Env", delta).ok
        assert wm.cypher("t1", nodes) == [{"name": "bottle"}, {"name": "crate"}]
        assert wm.cypher("t1", "MATCH (:Entity {tenant_id: $tenant_id, name: 'crate'})-[:CONTAINS]->(b) "
                               "RETURN b.name AS b") == [{"b": "bottle"}]
        # facts too: a new one inserted, then closed in place by its single-valued successor
        facts = ("MATCH (a:Entity {tenant_id: $tenant_id})-[f:FACT {predicate: 'leans_on'}]->(b) "
                 "USING INDEX a:Entity(tenant_id) RETURN b.name AS place, f.valid_to IS NULL AS now ORDER BY place")
        for on in ("crate", "wall"):
            delta = {"entities": [{"ref": "w", "name": "wall", "type": "wall"}], "states": [], "rules": [],
                     "edges": [{"relation": "fact", "predicate": "leans_on", "single_valued": True,
                                "src_ref": "bottle", "dst_ref": on}]}
            assert wm.apply_delta("t1", "Env", delta).ok
        assert wm.cypher("t1", facts) == [{"place": "crate", "now": False}, {"place": "wall", "now": True}]


def test_a_restored_sqlite_file_never_matches_a_projection_of_another_history(tmp_path: Path) -> None:
    """A backup restored under the saved projections (or a file made anew at the same path)
    reaches the same counts again with other rows: the random stamp of the last commit tells."""
    import shutil

    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        wm.record_experience("t0", _exp("another tenant"))  # the file exists, t1 holds nothing yet
    backup = tmp_path / "backup.sqlite"
    shutil.copy(_store_file(tmp_path), backup)
    tasks = "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.task_description AS t ORDER BY t"
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        wm.record_experiences("t1", [_exp(f"task {i}") for i in range(3)])
        assert [r["t"] for r in wm.cypher("t1", tasks)] == ["task 0", "task 1", "task 2"]
    saved = _meta(tmp_path)
    store_file = _store_file(tmp_path)
    for extra in ("-wal", "-shm"):
        Path(str(store_file) + extra).unlink(missing_ok=True)
    shutil.copy(backup, store_file)  # restored: the episode part's count is where it was
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        wm.record_experiences("t1", [_exp(f"other {i}") for i in range(3)])  # the same count again
        assert [r["t"] for r in wm.cypher("t1", tasks)] == ["other 0", "other 1", "other 2"]
    assert _meta(tmp_path)["gens"][0][0] == saved["gens"][0][0]


def test_a_restored_file_with_other_records_under_the_same_ids_is_rebuilt(tmp_path: Path) -> None:
    """A saved projection behind the store is reused only while every episode it holds is the
    tenant's as written: a backup restored and an id written again with other content is not."""
    import shutil

    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        wm.record_experience("t1", _exp("first"))
    backup = tmp_path / "backup.sqlite"
    shutil.copy(_store_file(tmp_path), backup)
    tasks = "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.task_description AS t ORDER BY t"
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        wm.record_experience("t1", {**_exp("written once"), "episode_id": "ep-x"})
        assert [r["t"] for r in wm.cypher("t1", tasks)] == ["first", "written once"]
    saved = _meta(tmp_path)
    store_file = _store_file(tmp_path)
    for extra in ("-wal", "-shm"):
        Path(str(store_file) + extra).unlink(missing_ok=True)
    shutil.copy(backup, store_file)
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        wm.record_experience("t1", {**_exp("written again"), "episode_id": "ep-x"})
        wm.record_experience("t1", _exp("and one more"))  # past the saved projection's count
        assert [r["t"] for r in wm.cypher("t1", tasks)] == ["and one more", "first", "written again"]
    assert _meta(tmp_path)["file"] != saved["file"]


def test_a_link_to_the_data_folder_is_the_same_file(data: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Two store objects of one process reaching the file by another name (a symbolic link) never
    write the same saved database at once: the second one's refresh writes a copy."""
    link_dir = tmp_path_factory.mktemp("elsewhere") / "data-link"
    link_dir.symlink_to(data, target_is_directory=True)
    a = EmbeddedGraphStore(_store_file(data))
    b = EmbeddedGraphStore(link_dir / _store_file(data).name)
    try:
        assert a.cypher("t1", COUNT) == [{"n": 3}]
        assert b.cypher("t1", COUNT) == [{"n": 3}]
        pa, pb = a.projections.current("t1"), b.projections.current("t1")
        assert pa is not None and pb is not None
        assert os.path.realpath(pa.path) == os.path.realpath(pb.path)  # read by both
        from worldgraph.kg.embedded.cypher.saved import claim, release

        assert claim(pb.path)  # no writer holds it between queries
        assert not claim(pa.path)  # the same file under its other name
        release(pb.path)
    finally:
        a.close()
        b.close()


def test_what_a_refresh_wrote_is_in_the_file_the_next_open_reopens(data: Path) -> None:
    """A refresh writes the saved database's log (``<file>.wal``) and names the file current at
    the new generations: the save's sweep of older files must leave that log alone (it deleted
    it, and the next process reopened the file without the refresh, at generations that said
    it held it)."""
    entities = "MATCH (n:Entity {tenant_id: $tenant_id}) RETURN n.name AS n ORDER BY n"
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        assert wm.cypher("t1", COUNT) == [{"n": 3}]  # reopened
        wm.record_experience("t1", _exp("late"))
        assert wm.apply_delta("t1", "Env", {"entities": [{"ref": "k", "name": "key", "type": "item"}], "states": [],
                                            "edges": [], "rules": []}).ok
        assert wm.cypher("t1", COUNT) == [{"n": 4}]  # refreshed row by row, saved
        assert wm.cypher("t1", entities) == [{"n": "key"}]
        wm.record_experience("t1", _exp("later"))
        assert wm.cypher("t1", COUNT) == [{"n": 5}]
        saved = _meta(data)
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        assert wm.cypher("t1", COUNT) == [{"n": 5}]
        assert wm.cypher("t1", entities) == [{"n": "key"}]
        assert wm.store.projections.current("t1").path.parent.name == saved["file"]  # type: ignore[attr-defined]


def test_a_saved_projection_too_far_behind_in_its_episodes_is_rebuilt(data: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from worldgraph.kg.embedded.cypher import episodes as episodes_module

    before = _meta(data)
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        wm.record_experience("t1", _exp("late"))
    monkeypatch.setattr(episodes_module, "INCREMENTAL_MAX", 0)  # any change is too many
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        assert wm.cypher("t1", COUNT) == [{"n": 4}]
    assert _meta(data)["file"] != before["file"]


def test_scratch_files_stay_in_the_data_folder_and_a_purge_or_a_dead_process_leaves_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small tenant's projection is a file in the store's scratch folder inside the data folder:
    a purge after a forget deletes it (even one a killed process left), and a scratch folder of a
    process no longer alive is removed by the next store that opens projections."""
    monkeypatch.setattr(opener_module, "SAVE_MIN_ROWS", 5_000)
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        wm.record_experiences("t1", [_exp(f"task {i}") for i in range(3)])
        assert wm.cypher("t1", COUNT) == [{"n": 3}]
        path = wm.store.projections.current("t1").path  # type: ignore[attr-defined]
        scratch = path.parent.parent
        assert scratch.parent == folder_for(_store_file(tmp_path)) and scratch.name.startswith("scratch-")
        left = scratch.parent / "scratch-999999999-x"  # a killed process's, holding t1's rows
        (left / path.parent.name).mkdir(parents=True)
        (left / path.parent.name / DB_NAME).write_bytes(path.read_bytes())
        ghost = scratch.parent / f"scratch-{os.getpid()}-ghost"  # a live process's
        (ghost / path.parent.name).mkdir(parents=True)
        (ghost / path.parent.name / DB_NAME).write_bytes(b"x")
        wm.forget_tenant("t1")
        wm.purge()
        assert not path.exists() and not (ghost / path.parent.name).exists()
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        wm.record_experiences("t2", [_exp("task")])
        assert wm.cypher("t2", COUNT) == [{"n": 1}]
        assert not left.exists()


def test_a_data_folder_named_relative_to_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The query children run in /: the projections' paths they are given are absolute."""
    monkeypatch.chdir(tmp_path)
    with WorldModel.open("data", embedder=HashingEmbedder(64)) as wm:
        wm.record_experiences("t1", [_exp("task")])
        assert wm.cypher("t1", COUNT) == [{"n": 1}]
