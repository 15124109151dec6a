"""The one-of-each helpers: names, clock, cosine, file locks, schema versions, and the names that
say what they hold (FeedbackResult, DeltaValidationError)."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from worldgraph import DeltaValidationError, FeedbackResult, InvalidInputError, RecallResult, StorageError, WorldModel
from worldgraph.clock import iso, now_iso, utcnow
from worldgraph.kg.embedded.store import EmbeddedGraphStore
from worldgraph.locks import file_lock
from worldgraph.memory.cosine import cosine_matrix, cosine_to
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.names import check_env, check_tenant
from worldgraph.schema import SCHEMA_VERSIONS, needs_upgrade


@pytest.mark.parametrize("name", ["acme", "A", "a.b-c_d", "9lives", "x" * 128])
def test_names_accepted_by_every_layer(name: str) -> None:
    assert check_tenant(name) == name
    assert check_env(name) == name


@pytest.mark.parametrize("name", ["", "-acme", ".hidden", "a/b", "a b", "acme\n", "x" * 129, "ü", None, 7])
def test_names_refused_with_the_field_and_the_rule(name: object) -> None:
    with pytest.raises(InvalidInputError) as info:
        check_tenant(name, "packet.tenant_id")
    assert info.value.field == "packet.tenant_id" and "letters, digits" in info.value.rule
    with pytest.raises(InvalidInputError) as info:
        check_env(name)
    assert info.value.field == "env_name" and "folder of the snapshot" in info.value.rule


def test_one_rule_at_the_service_and_the_world_updater(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        for call in (lambda: wm.record_experience("a b", {"task_description": "x", "outcome": "success"}),
                     lambda: wm.world_graph("a b", "env"),
                     lambda: wm.apply_delta("a b", "env", {"entities": [], "states": [], "edges": [], "rules": []})):
            with pytest.raises(InvalidInputError) as info:
                call()
            assert info.value.field == "tenant_id"
        with pytest.raises(InvalidInputError) as info:
            wm.world_graph("acme", "a/b")
        assert info.value.field == "env_name"


def test_the_clock_stamps_utc_with_microseconds() -> None:
    before = datetime.now(timezone.utc)
    stamp = now_iso()
    assert datetime.fromisoformat(stamp) >= before.replace(microsecond=before.microsecond)
    assert stamp.endswith("+00:00") and len(stamp.split(".")[1]) == len("000000+00:00")
    assert utcnow().tzinfo is timezone.utc
    naive = datetime(2023, 5, 8, 12, 0, 0)
    assert iso(naive) == "2023-05-08T12:00:00.000000+00:00"
    assert iso(naive.replace(tzinfo=timezone(timedelta(hours=2)))) == "2023-05-08T10:00:00.000000+00:00"


def test_cosine_matches_the_formula_and_a_zero_vector_is_similar_to_nothing() -> None:
    rng = np.random.default_rng(7)
    m = rng.normal(size=(5, 8)).astype(np.float32)
    q = rng.normal(size=8).astype(np.float32)
    expected = [float(np.dot(r, q) / (np.linalg.norm(r) * np.linalg.norm(q))) for r in m]
    assert np.allclose(cosine_to(m, q), expected, atol=1e-6)
    assert cosine_to(m, q).dtype == np.float32
    assert cosine_to(np.zeros((2, 8), np.float32), q).tolist() == [0.0, 0.0]
    assert cosine_to(m, np.zeros(8, np.float32)).tolist() == [0.0] * 5
    pair = cosine_matrix(m)
    assert pair.shape == (5, 5) and np.allclose(np.diag(pair), 1.0)
    assert np.allclose(pair[0], cosine_to(m.astype(np.float64), m[0].astype(np.float64)))


def test_file_lock_excludes_other_threads_and_is_released_on_errors(tmp_path: Path) -> None:
    lock = tmp_path / "sub" / ".write.lock"
    inside: list[int] = []
    overlap: list[bool] = []

    def work(i: int) -> None:
        with file_lock(lock):
            inside.append(i)
            overlap.append(len(inside) > 1)
            time.sleep(0.02)
            inside.remove(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap == [False] * 4
    with pytest.raises(RuntimeError):
        with file_lock(lock):
            raise RuntimeError("boom")
    with file_lock(lock, timeout=0):  # released by the exception
        with pytest.raises(StorageError, match="sub/.write.lock is locked"):
            with file_lock(lock, timeout=0.05):
                pass


def _hold(path: str, ready: multiprocessing.synchronize.Event, done: multiprocessing.synchronize.Event) -> None:
    with file_lock(path):
        ready.set()
        done.wait(10)


def test_file_lock_excludes_other_processes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold, args=(str(tmp_path / "x.lock"), ready, done))
    proc.start()
    try:
        assert ready.wait(30)
        with pytest.raises(StorageError):
            with file_lock(tmp_path / "x.lock", timeout=0.1):
                pass
    finally:
        done.set()
        proc.join(10)
    with file_lock(tmp_path / "x.lock", timeout=1):
        pass


def test_schema_versions_are_one_record() -> None:
    assert SCHEMA_VERSIONS == {"embedded": 1, "lancedb": 2, "neo4j": 4}
    assert needs_upgrade("neo4j", None) and needs_upgrade("neo4j", 3) and not needs_upgrade("neo4j", "4")
    with pytest.raises(StorageError, match="upgrade worldgraph"):
        needs_upgrade("lancedb", 3)


def test_a_store_written_by_a_newer_worldgraph_is_refused(tmp_path: Path) -> None:
    EmbeddedGraphStore(tmp_path / "wg.db").close()
    conn = sqlite3.connect(tmp_path / "wg.db")
    assert conn.execute("SELECT value FROM schema_info").fetchall() == [("1",)]
    conn.execute("UPDATE schema_info SET value = '2' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    for read_only in (False, True):
        with pytest.raises(StorageError, match=r"schema version 2, newer than this worldgraph knows \(1\)"):
            EmbeddedGraphStore(tmp_path / "wg.db", read_only=read_only)


def test_feedback_returns_a_feedback_result_of_the_same_shape(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        eid = wm.record_experience("acme", {"agent_id": "a1", "task_type": "t", "task_description": "x",
                                             "outcome": "success"})
        fb = wm.submit_feedback("acme", eid, 0.5, notes="good")
    assert type(fb) is FeedbackResult and isinstance(fb, RecallResult)  # the old name still matches
    assert fb.average == 0.75 and fb["count"] == 1 and fb.feedback_notes == "good" and fb.episode_id == eid


def test_delta_validation_error_keeps_the_answer() -> None:
    err = DeltaValidationError(["entities: must be an array"], raw='{"entities": 1}')
    assert err.raw == '{"entities": 1}' and "invalid graph delta" in str(err)
