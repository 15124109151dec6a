"""The LanceDB sidecar on S3-compatible object storage (moto in server mode, tests/support/s3_fixture.py):
the index itself, several processes sharing one index, and the store being unreachable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.tcp_gate import TcpGate
from worldgraph import WorldModel
from worldgraph.config import WorldGraphConfig
from worldgraph.errors import InvalidInputError, StoreUnavailableError
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.memory.index import objectstore
from worldgraph.memory.index.episode_index import META_FILE, EpisodeIndex, table_name
from worldgraph.server.app import create_app
from worldgraph.server.keys import ApiKeys

ROOT = Path(__file__).resolve().parents[2]
D = 32
HASH = HashingEmbedder(D)


def _row(eid: str, text: str, tenant: str = "A") -> dict[str, Any]:
    return {"episode_id": eid, "tenant_id": tenant, "agent_id": "a1", "agent_role": "explorer", "task_type": "t",
            "outcome": "success", "success": True, "confidence": 0.5, "timestamp": 1_700_000_000.0,
            "text": text, "vector": HASH.embed([text])[0]}


def _experience(i: int, tag: str) -> dict[str, Any]:
    return {"agent_id": "rover", "agent_role": "explorer", "task_type": "survey",
            "task_description": f"{tag} surveyed crater {i}", "outcome": "success", "learnings": [f"crater {i} ok"]}


def test_index_on_s3_writes_searches_labels_and_maintains(s3_env: dict[str, Any]) -> None:
    uri = s3_env["uri"]
    cfg = WorldGraphConfig(ann_index_min_rows=40, compact_every_writes=3)
    idx = EpisodeIndex(uri, D, HASH.name, cfg)
    idx.upsert([_row(f"e{i}", f"crater {i} has ice" if i % 2 else f"ridge {i} is steep") for i in range(60)])
    idx.upsert([_row("b1", "crater of tenant b", tenant="B")])
    for i in range(3):  # more commits: compaction (optimize) is queued in the background
        idx.upsert([_row(f"x{i}", f"crater x{i} extra")])
    assert idx.wait_for_maintenance(120)
    assert idx.count() == 64 and idx.count("B") == 1
    # the ANN index was built by the maintenance child process, on the object store
    assert idx.has_vector_index("A")
    hits = idx.vector_search("A", HASH.embed(["crater 7 has ice"])[0], k=3)
    assert hits[0]["episode_id"] == "e7"
    assert [r["episode_id"] for r in idx.text_search("A", "steep ridge", k=2)][0].startswith("e")
    assert idx.vector_search("B", HASH.embed(["crater"])[0], k=5)[0]["episode_id"] == "b1"
    idx.delete(["e7"])
    assert idx.count("A") == 62
    # compaction, index folding and old-version cleanup through the pylance dataset, on S3
    idx.upsert([_row("late", "a late crater")])
    idx.optimize("A")
    table = idx.table_for("A")
    assert all((table.index_stats(ix.name).num_unindexed_rows or 0) == 0 for ix in table.list_indices())
    assert idx.vector_search("A", HASH.embed(["a late crater"])[0], k=1)[0]["episode_id"] == "late"
    idx.delete(["late"])
    # the embedder label lives beside the tables, as on a local disk
    meta = json.loads(objectstore.read_meta(uri, META_FILE) or "{}")
    assert meta["embedder"] == HASH.name and meta["dimensions"] == D
    with pytest.raises(InvalidInputError, match="worldgraph reindex"):
        EpisodeIndex(uri, D, "another-embedder", cfg)
    reopened = EpisodeIndex(uri, D, HASH.name, cfg, read_only=True)
    assert reopened.count() == 63 and reopened.tenant_tables() == sorted([table_name("A"), table_name("B")])


def test_a_fresh_prefix_read_only_has_no_rows(s3_env: dict[str, Any]) -> None:
    idx = EpisodeIndex(s3_env["uri"] + "-never-written", D, HASH.name, WorldGraphConfig(), read_only=True)
    assert idx.count() == 0 and idx.vector_search("A", HASH.embed(["x"])[0], k=3) == []


def _run(args: list[str], env: dict[str, str]) -> list[str]:
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "support" / "s3_index_worker.py"), *args], env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("graph", [pytest.param("neo4j", marks=pytest.mark.neo4j), "embedded"])
def test_two_processes_share_one_index_on_s3_and_a_third_recalls_both(
        graph: str, s3_env: dict[str, Any], tmp_path: Path, request: pytest.FixtureRequest) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), WORLDGRAPH_LANCEDB_PATH=s3_env["uri"],
               WORLDGRAPH_ANN_INDEX_MIN_ROWS="30")
    if graph == "neo4j":
        server = request.getfixturevalue("neo4j_server")
        env.update(NEO4J_URI=server["uri"], NEO4J_USER=server["user"], NEO4J_PASSWORD=server["password"])
        # three "machines": each its own data folder; what they share is Neo4j and the bucket
        folders = [str(tmp_path / f"host{i}") for i in range(3)]
    else:  # one machine's SQLite file, the index on the object store
        folders = [str(tmp_path / "data")] * 3
    tenant = f"s3-{uuid.uuid4().hex[:8]}"
    WorldModel.open(folders[0], graph=graph, embedder=HashingEmbedder(64), lancedb_path=s3_env["uri"]).close()
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "support" / "s3_index_worker.py"), "record", folders[i],
                               graph, tenant, name, "25"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i, name in enumerate(("alpha", "beta"))]
    recorded: list[list[str]] = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
        recorded.append(json.loads(out.strip().splitlines()[-1]))
    assert len(recorded[0]) == len(recorded[1]) == 25
    found = _run(["recall", folders[2], graph, tenant, "surveyed crater 3 on the far side", "60"], env)
    assert set(recorded[0]) <= set(found) and set(recorded[1]) <= set(found), "the third process sees both"
    # nothing local: no lancedb folder was made under any data folder
    assert not any((Path(f) / "lancedb").exists() for f in folders)
    with WorldModel.open(folders[2], graph=graph, embedder=HashingEmbedder(64), lancedb_path=s3_env["uri"]) as wm:
        assert wm.index.path == s3_env["uri"]
        assert wm.index.count(tenant) == 50
        eps = wm.store.get_episodes(tenant, recorded[0] + recorded[1])
        assert {e["index_status"] for e in eps.values()} == {"indexed"}


def test_wrong_endpoint_is_a_clear_error_naming_the_settings(s3_env: dict[str, Any], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    closed = f"http://127.0.0.1:{TcpGate(('127.0.0.1', 1)).port}"  # a free port nobody listens on
    monkeypatch.setenv("AWS_ENDPOINT_URL", closed)
    with pytest.raises(StoreUnavailableError) as err:
        WorldModel.open(tmp_path / "d", embedder=HashingEmbedder(64), lancedb_path=s3_env["uri"])
    text = str(err.value)
    assert closed in text and "AWS_ENDPOINT_URL" in text and "WORLDGRAPH_LANCEDB_PATH" in text
    assert s3_env["uri"] in text
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env["server"].url)
    monkeypatch.delenv("AWS_ALLOW_HTTP")
    with pytest.raises(StoreUnavailableError, match="AWS_ALLOW_HTTP=true"):
        WorldModel.open(tmp_path / "d", embedder=HashingEmbedder(64), lancedb_path=s3_env["uri"])


def test_store_unreachable_mid_run_keeps_episodes_pending_and_indexes_them_when_it_returns(
        s3_env: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = s3_env["server"]
    gate = TcpGate(("127.0.0.1", server.port)).open()
    monkeypatch.setenv("AWS_ENDPOINT_URL", gate.url)
    wm = WorldModel.open(tmp_path / "d", embedder=HashingEmbedder(64), lancedb_path=s3_env["uri"],
                         index_retry_seconds=1.0)
    try:
        before = wm.record_experiences("t1", [_experience(i, "before") for i in range(3)])
        gate.close()  # the endpoint goes away mid-run
        t0 = time.monotonic()
        during = wm.record_experiences("t1", [_experience(i, "during") for i in range(3)])
        assert time.monotonic() - t0 < 60, "a write to an unreachable store fails in bounded time"
        eps = wm.store.get_episodes("t1", during)
        assert len(eps) == 3, "the episodes are committed in the graph store"
        for e in eps.values():
            assert e["index_status"] == "failed"
            assert gate.url in e["index_error"] and "AWS_ENDPOINT_URL" in e["index_error"]
        with pytest.raises(StoreUnavailableError, match="AWS_ENDPOINT_URL"):
            wm.recall_experiences("t1", "explorer", "surveyed crater", options={"min_similarity": 0.0})
        gate.open()  # back: the process re-indexes by itself (index_retry_seconds)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if {e["index_status"] for e in wm.store.get_episodes("t1", during).values()} == {"indexed"}:
                break
            time.sleep(0.2)
        assert {e["index_status"] for e in wm.store.get_episodes("t1", during).values()} == {"indexed"}
        found = {r["episode_id"] for r in wm.recall_experiences("t1", "explorer", "surveyed crater", limit=10,
                                                               options={"min_similarity": 0.0})}
        assert set(before) | set(during) <= found
    finally:
        wm.close()
        gate.close()


def test_reindex_pending_after_an_outage_in_a_short_lived_process(s3_env: dict[str, Any], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    gate = TcpGate(("127.0.0.1", s3_env["server"].port)).open()
    monkeypatch.setenv("AWS_ENDPOINT_URL", gate.url)
    data = tmp_path / "d"
    wm = WorldModel.open(data, embedder=HashingEmbedder(384), lancedb_path=s3_env["uri"], index_retry_seconds=3600)
    wm.record_experiences("t1", [_experience(0, "first")])
    gate.close()
    ids = wm.record_experiences("t1", [_experience(i, "lost") for i in range(4)])
    wm.close()
    from worldgraph.kg.embedded.store import EmbeddedGraphStore

    store = EmbeddedGraphStore(data / "worldgraph.db")
    assert {e["index_status"] for e in store.get_episodes("t1", ids).values()} == {"failed"}
    gate.open()
    # `worldgraph reindex --pending` (its open re-indexes what is pending, the command the rest)
    env = dict(os.environ, WORLDGRAPH_LANCEDB_PATH=s3_env["uri"], PYTHONPATH=str(ROOT),
               WORLDGRAPH_EMBEDDING_PROVIDER="hashing")
    proc = subprocess.run([sys.executable, "-m", "worldgraph.cli", "--data", str(data), "reindex", "--pending",
                           "--json"], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {e["index_status"] for e in store.get_episodes("t1", ids).values()} == {"indexed"}
    store.close()
    with WorldModel.open(data, embedder=HashingEmbedder(384), lancedb_path=s3_env["uri"]) as wm:
        assert wm.index.count("t1") == 5
    gate.close()


def _workers() -> int:
    return sum(1 for t in threading.enumerate() if t.name == objectstore.WORKER_NAME)


@pytest.mark.timeout(180)
def test_a_stalled_endpoint_cannot_stall_recording_or_recall(s3_env: dict[str, Any], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint that accepts connections and never answers (a server stopped with SIGSTOP):
    recording returns within the deadline with its episodes stored and pending, recall fails
    within it with StoreUnavailableError, the waiting threads stay bounded, and once the endpoint
    answers again everything recorded meanwhile is indexed and recalled."""
    gate = TcpGate(("127.0.0.1", s3_env["server"].port)).open()
    monkeypatch.setenv("AWS_ENDPOINT_URL", gate.url)
    deadline = 2.0
    slack = 2.0  # thread start, the store commit, marking the episodes: well under a second here
    wm = WorldModel.open(tmp_path / "d", embedder=HashingEmbedder(64), lancedb_path=s3_env["uri"],
                         index_retry_seconds=0.5, object_store_timeout_seconds=deadline)
    try:
        before = wm.record_experiences("t1", [_experience(i, "before") for i in range(3)])
        gate.stall()
        during: list[str] = []
        for round_ in range(4):
            t0 = time.monotonic()
            during += wm.record_experiences("t1", [_experience(i, f"during{round_}") for i in range(2)])
            assert time.monotonic() - t0 < deadline + slack, "recording waited past the deadline"
            t0 = time.monotonic()
            with pytest.raises(StoreUnavailableError, match="object_store_timeout_seconds") as err:
                wm.recall_experiences("t1", "explorer", "surveyed crater", options={"min_similarity": 0.0})
            assert time.monotonic() - t0 < deadline + slack, "recall waited past the deadline"
            assert gate.url in str(err.value)
        # over REST: recording answers 200 with the ids, recall 503 store_unavailable, both in time
        key, _ = ApiKeys(wm.store).create("t1")
        with TestClient(create_app(wm), raise_server_exceptions=False) as client:
            auth = {"Authorization": f"Bearer {key}"}
            t0 = time.monotonic()
            r = client.post("/v1/experiences", headers=auth, json=_experience(9, "rest"))
            assert r.status_code == 200, r.text
            during += r.json()["episode_ids"]
            r = client.post("/v1/recall", headers=auth, json={"query": "surveyed crater", "options": {"min_similarity": 0}})
            assert r.status_code == 503 and r.json()["error"]["type"] == "store_unavailable", r.text
            assert time.monotonic() - t0 < 2 * (deadline + slack)
        eps = wm.store.get_episodes("t1", during)
        assert len(eps) == len(during), "the episodes are committed in the graph store"
        assert {e["index_status"] for e in eps.values()} <= {"pending", "failed"}
        assert any("object_store_timeout_seconds" in (e["index_error"] or "") for e in eps.values())
        # every call abandoned at its deadline still waits in its thread, up to the cap
        assert 0 < _workers() <= objectstore.MAX_WAITING
        gate.resume()  # the process re-indexes by itself (index_retry_seconds)
        end = time.monotonic() + 90
        while time.monotonic() < end:
            if {e["index_status"] for e in wm.store.get_episodes("t1", during).values()} == {"indexed"}:
                break
            time.sleep(0.2)
        assert {e["index_status"] for e in wm.store.get_episodes("t1", during).values()} == {"indexed"}
        found = {r["episode_id"] for r in wm.recall_experiences("t1", "explorer", "surveyed crater", limit=20,
                                                               options={"min_similarity": 0.0})}
        assert set(before) | set(during) <= found
        end = time.monotonic() + 60
        while _workers() and time.monotonic() < end:
            time.sleep(0.2)
        assert _workers() == 0, "the abandoned calls ended once the endpoint answered"
    finally:
        gate.resume()
        wm.close()
        gate.close()


def test_stalled_calls_never_hold_more_than_max_waiting_threads(s3_env: dict[str, Any],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """With every worker slot held by a call that never returns, a new call fails at its deadline
    without starting a thread."""
    release = threading.Event()
    base = _workers()
    monkeypatch.setattr(objectstore, "MAX_WAITING", 2)
    monkeypatch.setattr(objectstore, "_slots", threading.BoundedSemaphore(2))
    for _ in range(2):
        with pytest.raises(StoreUnavailableError, match="object_store_timeout_seconds"):
            objectstore.with_deadline(s3_env["uri"], "a stalled call", release.wait, 0.2)
    assert _workers() == base + 2
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailableError, match="2 earlier calls are still waiting"):
        objectstore.with_deadline(s3_env["uri"], "one more", lambda: None, 0.3)
    assert 0.25 < time.monotonic() - t0 < 2 and _workers() == base + 2
    release.set()
    end = time.monotonic() + 5
    while _workers() > base and time.monotonic() < end:
        time.sleep(0.05)
    assert objectstore.with_deadline(s3_env["uri"], "after", lambda: 42, 1.0) == 42


def test_mirror_on_s3_sees_other_writers(s3_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A table on S3 searched through its in-process mirror (memory/index/mirror.py, kept in memory
    off the local disk, with its lists, ivf.py) sees another writer's appends, forgets and
    compaction at its next search."""
    from worldgraph.memory.index import ivf

    monkeypatch.setattr(ivf, "MIN_ROWS", 20)
    uri = s3_env["uri"]
    cfg = WorldGraphConfig(mirror_min_rows=1, mirror_exact_rows=10, ann_index_min_rows=40, ann_partition_rows=16)
    idx = EpisodeIndex(uri, D, HASH.name, cfg)
    idx._small.max_rows = 0  # never the small-table copy: the mirror
    idx.upsert([_row(f"e{i}", f"crater {i} has ice" if i % 2 else f"ridge {i} is steep") for i in range(60)])
    idx.ensure_indexes()
    q = HASH.embed(["crater 7 has ice"])[0]
    assert idx.vector_search("A", q, k=1)[0]["episode_id"] == "e7"
    assert idx._mirrors.index_path is None  # nothing saved beside an object store
    assert idx._mirrors.wait(60) and idx._mirrors.held(table_name("A")).lists.covered == 60  # in memory only
    other = EpisodeIndex(uri, D, HASH.name, cfg)
    other.upsert([_row("n1", "crater 7 has ice")])
    assert {h["episode_id"] for h in idx.vector_search("A", q, k=2)} == {"e7", "n1"}
    other.delete(["e7", "n1"])
    assert not {h["episode_id"] for h in idx.vector_search("A", q, k=5, where={"agent_id": "a1"})} & {"e7", "n1"}
    assert not {h["episode_id"] for h in idx.text_search("A", "crater ice", k=60)} & {"e7", "n1"}
    other.optimize("A")
    hits = idx.vector_search("A", HASH.embed(["crater 9 has ice"])[0], k=1)
    assert hits[0]["episode_id"] == "e9"
    assert idx._mirrors.get(table_name("A"), idx._part("A").latest_dataset()).live == 59
