"""Read-only open: a backup, a mounted snapshot or a folder without write permission opens for
reading (recall, episodes, readiness, world graph, export elsewhere), writes nothing, and every
write raises ReadOnlyError naming the call."""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.mounts import read_only_view, require_mount
from worldgraph import ReadOnlyError, WorldModel
from worldgraph.memory.embeddings import HashingEmbedder

T = "ro"
ENV = "cellar"
WORDS = ["amber", "birch", "cobalt", "damson", "ember", "fennel", "garnet", "hazel", "indigo", "juniper", "kelp",
         "lilac"]
DELTA = {"entities": [{"ref": "b", "name": "barrel", "type": "container"}, {"ref": "w", "name": "wine", "type": "item"}],
         "states": [], "edges": [{"relation": "containment", "src_ref": "b", "dst_ref": "w"}], "rules": []}


def _make(data: Path) -> list[str]:
    with WorldModel.open(data, embedder=HashingEmbedder(384)) as wm:
        ids = wm.record_experiences(T, [{"agent_id": "cellarer", "agent_role": "keeper", "task_type": "count",
                                         "task_description": f"count the {w} barrels", "outcome": "success",
                                         "confidence": 0.9} for w in WORDS])
        wm.submit_feedback(T, ids[7], 1.0)
        wm.apply_delta(T, ENV, DELTA, scene="stocktake")
        wm.index.wait_for_maintenance()
    return ids


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _reads_work(wm: WorldModel, ids: list[str], out: Path) -> None:
    res = wm.recall_experiences(T, "keeper", "the hazel barrels", options={"min_similarity": 0.0})
    assert res[0]["episode_id"] == ids[7]
    assert res[0]["task_description"] == "count the hazel barrels"
    assert len(wm.get_agent_episodes(T, "cellarer")) == 12
    assert wm.readiness(T, "cellarer")["episodes"] == 12
    assert wm.get_episode(T, ids[0])["id"] == ids[0]
    graph = wm.world_graph(T, ENV)
    assert sorted(n["name"] for n in graph["nodes"]) == ["barrel", "wine"] and len(graph["edges"]) == 1
    folder = wm.export(T, ENV, out)
    assert (folder / "meta.json").exists() and (folder / "nodes.jsonl").read_text().count("\n") == 2
    assert wm.stats(T)["episodes"] == 12


WRITES: dict[str, Callable[[WorldModel, list[str]], Any]] = {
    "record_experience": lambda wm, ids: wm.record_experience(T, {"agent_id": "a", "task_type": "t",
                                                                  "task_description": "d", "outcome": "success"}),
    "record_experiences": lambda wm, ids: wm.record_experiences(T, []),
    "submit_feedback": lambda wm, ids: wm.submit_feedback(T, ids[1], 0.5),
    "observe_round": lambda wm, ids: wm.observe_round(T, ENV, {"round": 1, "action": "look"}),
    "apply_delta": lambda wm, ids: wm.apply_delta(T, ENV, DELTA),
    "update_world": lambda wm, ids: wm.update_world({"tenant_id": T, "id": "scene-1"}),
    "retry_updates": lambda wm, ids: wm.retry_updates(),
    "import_snapshot": lambda wm, ids: wm.import_snapshot(T, "/nonexistent"),
    "reindex": lambda wm, ids: wm.reindex(),
    "retry_indexing": lambda wm, ids: wm.retry_indexing(),
}


def _writes_refused(wm: WorldModel, ids: list[str], why: str) -> None:
    for op, call in WRITES.items():
        with pytest.raises(ReadOnlyError) as info:
            call(wm, ids)
        assert info.value.operation == op and why in str(info.value) and "WorldModel.open(path)" in str(info.value)
    # below the facade too: the stores and the index refuse writes themselves
    with pytest.raises(ReadOnlyError):
        wm.store.set_index_status(T, ids[:1], "pending")
    with pytest.raises(ReadOnlyError):
        wm.index.clear()


def test_read_only_flag_writes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ids = _make(data)
    before = _tree(data)
    wm = WorldModel.open(data, embedder=HashingEmbedder(384), read_only=True)
    assert wm.read_only and wm.read_only_reason == "the WorldModel was opened with read_only=True"
    with wm:
        _reads_work(wm, ids, tmp_path / "export")
        _writes_refused(wm, ids, "read_only=True")
    after = _tree(data)
    # Every file is byte-identical. The folder is writable, so SQLite may add its own (empty)
    # write-ahead log and shared-memory index: a reader needs them to stay consistent with a
    # writer in another process (see worldgraph/kg/embedded/sqlite_open.py).
    assert {k: v for k, v in after.items() if k in before} == before
    extra = set(after) - set(before)
    assert extra <= {"worldgraph.db-wal", "worldgraph.db-shm"}, extra
    if "worldgraph.db-wal" in extra:
        assert (data / "worldgraph.db-wal").stat().st_size == 0
    with pytest.raises(ReadOnlyError, match="rebuild_index"):
        WorldModel.open(data, embedder=HashingEmbedder(384), read_only=True, rebuild_index=True)


def test_read_only_of_a_folder_never_written(tmp_path: Path) -> None:
    from worldgraph.errors import NotFoundError

    with pytest.raises(NotFoundError, match="open the folder writable once"):
        WorldModel.open(tmp_path / "nothing", embedder=HashingEmbedder(384), read_only=True)
    assert not (tmp_path / "nothing").exists()  # no mkdir


def test_a_read_only_mount_opens_read_only_by_itself(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    require_mount(tmp_path)
    data = tmp_path / "data"
    ids = _make(data)
    before = _tree(data)
    with read_only_view(data, tmp_path / "snapshot") as snap:
        with caplog.at_level(logging.WARNING, logger="worldgraph"):
            wm = WorldModel.open(snap, embedder=HashingEmbedder(384))
        assert wm.read_only and "not writable" in (wm.read_only_reason or "")
        assert any("read-only" in r.getMessage() and str(snap) in r.getMessage() for r in caplog.records)
        with wm:
            _reads_work(wm, ids, tmp_path / "export")
            _writes_refused(wm, ids, "not writable")
    assert _tree(data) == before


CRASHER = textwrap.dedent('''
    import sys
    from worldgraph import WorldModel
    from worldgraph.memory.embeddings import HashingEmbedder
    wm = WorldModel.open(sys.argv[1], embedder=HashingEmbedder(384))
    wm.record_experiences("ro", [{"agent_id": "late", "task_type": "count", "task_description": f"late count {i}",
                                  "outcome": "success"} for i in range(5)])
    print("committed", flush=True)
    sys.stdin.read()  # wait to be killed, the database still open
''')


@pytest.mark.parametrize("keep_shm", [True, False])
def test_a_snapshot_taken_after_a_crash_reads_its_write_ahead_log(tmp_path: Path, keep_shm: bool) -> None:
    """kill -9 leaves committed transactions in worldgraph.db-wal; a read-only open must read
    them: through the -shm when it is there, else through a private copy (never by writing)."""
    require_mount(tmp_path)
    data = tmp_path / "data"
    ids = _make(data)
    proc = subprocess.Popen([sys.executable, "-c", CRASHER, str(data)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "committed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (data / "worldgraph.db-wal").stat().st_size > 0
    if not keep_shm:
        (data / "worldgraph.db-shm").unlink()
    with read_only_view(data, tmp_path / "snapshot") as snap:
        with WorldModel.open(snap, embedder=HashingEmbedder(384)) as wm:
            assert wm.read_only
            assert len(wm.get_agent_episodes(T, "late")) == 5  # only in the -wal
            assert len(wm.get_agent_episodes(T, "cellarer")) == len(ids)
            ro = wm.store.db.opened
            assert ro is not None and ro.how == ("ro" if keep_shm else "copy")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions (the mount tests cover root)")
def test_a_folder_without_write_permission_opens_read_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ids = _make(data)
    modes = {p: p.stat().st_mode for p in [data, *data.rglob("*")]}
    try:
        for p in modes:
            p.chmod(p.stat().st_mode & ~0o222)
        with WorldModel.open(data, embedder=HashingEmbedder(384)) as wm:
            assert wm.read_only and "not writable" in (wm.read_only_reason or "")
            _reads_work(wm, ids, tmp_path / "export")
            _writes_refused(wm, ids, "not writable")
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


@pytest.mark.neo4j
def test_read_only_on_neo4j(tmp_path: Path, neo4j_server: dict[str, str]) -> None:
    import uuid

    tenant = f"t-{uuid.uuid4().hex[:10]}"
    kw: dict[str, Any] = {"graph": "neo4j", "neo4j_uri": neo4j_server["uri"], "neo4j_user": neo4j_server["user"],
                          "neo4j_password": neo4j_server["password"]}
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(384), **kw) as wm:
        eid = wm.record_experience(tenant, {"agent_id": "a", "task_type": "t", "task_description": "wind the clock",
                                            "outcome": "success"})
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(384), read_only=True, **kw) as wm:
        assert wm.recall_experiences(tenant, None, "wind the clock", options={"min_similarity": 0.0})[0]["episode_id"] == eid
        with pytest.raises(ReadOnlyError, match="submit_feedback"):
            wm.submit_feedback(tenant, eid, 1.0)
        with pytest.raises(ReadOnlyError, match="Neo4j store was opened read-only"):
            wm.store.set_index_status(tenant, [eid], "pending")
        assert wm.store.feedback_stats(tenant, [eid]) == {}
