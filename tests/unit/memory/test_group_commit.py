"""Group commit: concurrent record calls of a tenant are stored in one transaction and one index
append per group; each caller returns after its episodes are stored and gets its own error; a
failed group never drops a valid caller's episodes; nothing acknowledged is lost on SIGKILL."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.unit.service.test_service_stores import tenant  # noqa: F401 - fixture
from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder

T = "gc"


@pytest.fixture
def wm(tmp_path: Path) -> Iterator[WorldModel]:
    m = WorldModel.open(tmp_path / "d", embedder=HashingEmbedder(64))
    try:
        yield m
    finally:
        m.close()


def exp(k: int, **extra: Any) -> dict[str, Any]:
    return {"agent_id": f"agent-{k % 3}", "task_type": "deploy", "task_description": f"deploy shard {k} zq{k}token",
            "outcome": "success", **extra}


def grouped(wm: WorldModel, calls: list[Callable[[], Any]], tenant: str = T) -> list[Any]:
    """Runs ``calls[0]`` alone and holds it inside the index's write window until every other
    call is queued behind it, so ``calls[1:]`` form exactly one group. Returns each call's
    result or the exception it raised, in order."""
    gc = wm.recorder.group_commit
    assert gc is not None
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            out[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - returned to the test
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    with wm.index._lock:  # the leader blocks on it inside EpisodeIndex.adding
        threads[0].start()
        deadline = time.monotonic() + 30
        while gc.stats.groups < 1:
            assert time.monotonic() < deadline, "the first call did not start its commit"
            time.sleep(0.005)
        for t in threads[1:]:
            t.start()
        while gc.queued(tenant) < len(calls) - 1:
            assert time.monotonic() < deadline, f"only {gc.queued(tenant)} calls queued"
            time.sleep(0.005)
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    return out


def stored_ids(wm: WorldModel, tenant: str = T) -> list[str]:
    return [e["id"] for batch in wm.store.iter_episodes(tenant) for e in batch]


def test_concurrent_calls_form_one_group_each_gets_its_ids(wm: WorldModel) -> None:
    calls = [lambda k=k: wm.record_experiences(T, [exp(k * 10 + j) for j in range(k % 3 + 1)]) for k in range(16)]
    out = grouped(wm, calls)
    assert all(isinstance(r, list) for r in out), out
    assert [len(r) for r in out] == [k % 3 + 1 for k in range(16)]
    assert wm.recorder.group_commit is not None and wm.recorder.group_commit.stats.sizes == [1, 15]  # one leader, then one group
    every = [i for r in out for i in r]
    ids = stored_ids(wm)
    assert sorted(ids) == sorted(every) and len(set(ids)) == len(ids)  # each id stored exactly once
    assert all(e["index_status"] == "indexed" for e in wm.store.get_episodes(T, every).values())
    assert wm.index.count(T) == len(every)  # one index row each
    got = wm.recall_experiences(T, None, "zq150token", limit=3)
    assert any(r.get("episode_id", r.get("id")) == out[15][0] for r in got), got


def test_session_links_across_one_group_follow_time_order(wm: WorldModel) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    # eight callers record turns of one session out of time order, most in the same group
    order = [5, 2, 7, 0, 3, 6, 1, 4]
    calls = [lambda k=k: wm.record_experiences(T, [exp(k, session_id="s1", episode_id=f"turn-{k}",
                                                        timestamp=(t0 + timedelta(minutes=k)).isoformat())])
             for k in order]
    out = grouped(wm, calls)
    assert all(isinstance(r, list) for r in out), out
    links = wm.store.session_neighbors(T, [f"turn-{k}" for k in range(8)])
    for k in range(8):
        assert links[f"turn-{k}"] == (f"turn-{k - 1}" if k else None, f"turn-{k + 1}" if k < 7 else None)


def test_a_failing_part_fails_only_its_caller(wm: WorldModel) -> None:
    # caller 5 names the id the first caller is storing: both pass the "already recorded" check,
    # the first commits it, then the group holding caller 5 fails in the store (a taken id); each
    # part of that group is written again alone: caller 5 gets the error, the other ten succeed
    calls = [lambda k=k: wm.record_experiences(T, [exp(k, episode_id="same" if k in (0, 5) else f"ep-{k}")])
             for k in range(12)]
    out = grouped(wm, calls)
    assert [k for k, r in enumerate(out) if isinstance(r, Exception)] == [5], out
    assert wm.recorder.group_commit is not None and wm.recorder.group_commit.stats.retried_alone == 11
    ok = [r[0] for r in out if isinstance(r, list)]
    assert sorted(stored_ids(wm)) == sorted(ok) and "same" in ok
    assert wm.index.count(T) == 11


def test_two_callers_naming_one_id_are_not_grouped(wm: WorldModel) -> None:
    # callers 3 and 9 name the same new id: the second is held back from the group (one
    # transaction holding both would fail for everyone), then refused as already recorded
    calls = [lambda k=k: wm.record_experiences(T, [exp(k, episode_id="same" if k in (3, 9) else f"ep-{k}")])
             for k in range(12)]
    out = grouped(wm, calls)
    errors = [(k, r) for k, r in enumerate(out) if isinstance(r, Exception)]
    assert len(errors) == 1 and errors[0][0] in (3, 9) and "already recorded" in str(errors[0][1]), out
    assert wm.recorder.group_commit is not None and wm.recorder.group_commit.stats.retried_alone == 0
    ok = [r[0] for r in out if isinstance(r, list)]
    assert sorted(stored_ids(wm)) == sorted(ok) and "same" in ok
    assert wm.index.count(T) == 11


@pytest.mark.neo4j
def test_on_neo4j_a_group_links_sessions_and_fails_only_its_bad_part(
        tmp_path: Path, neo4j_server: dict[str, str], tenant: str) -> None:  # noqa: F811
    m = WorldModel.open(tmp_path / "d", embedder=HashingEmbedder(64), graph="neo4j", neo4j_uri=neo4j_server["uri"],
                        neo4j_user=neo4j_server["user"], neo4j_password=neo4j_server["password"])
    try:
        t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
        order = [5, 2, 7, 0, 3, 6, 1, 4]
        calls = [lambda k=k: m.record_experiences(tenant, [exp(k, session_id="s1", episode_id=f"turn-{k}",
                                                              timestamp=(t0 + timedelta(minutes=k)).isoformat())])
                 for k in order]
        calls += [lambda: m.record_experience(tenant, exp(99, episode_id="same"))] * 2  # one of the two fails
        out = grouped(m, calls, tenant)
        errors = [k for k, r in enumerate(out) if isinstance(r, Exception)]
        assert errors in ([8], [9]), out  # held back from the group, then refused: not merged into one
        assert sorted(stored_ids(m, tenant)) == sorted([f"turn-{k}" for k in range(8)] + ["same"])
        links = m.store.session_neighbors(tenant, [f"turn-{k}" for k in range(8)])
        for k in range(8):
            assert links[f"turn-{k}"] == (f"turn-{k - 1}" if k else None, f"turn-{k + 1}" if k < 7 else None)
        assert m.index.count(tenant) == 9
    finally:
        m.close()


def test_a_failed_group_transaction_is_retried_per_caller(wm: WorldModel, monkeypatch: pytest.MonkeyPatch) -> None:
    # the store refuses the group's transaction once (a transient failure): nothing of it is stored,
    # so each caller's part is written again alone and every caller succeeds
    real = wm.store.add_appending  # how a record call stores its batch (one commit: GraphStore.add_appending)
    failed: list[int] = []

    def flaky(tenant_id: str, episodes: list[dict[str, Any]], *a: Any) -> Any:
        if len(episodes) > 1 and not failed:
            failed.append(len(episodes))
            raise sqlite3.OperationalError("database is locked")
        return real(tenant_id, episodes, *a)

    monkeypatch.setattr(wm.store, "add_appending", flaky)
    out = grouped(wm, [lambda k=k: wm.record_experience(T, exp(k)) for k in range(10)])
    assert failed == [9] and all(isinstance(r, str) for r in out), out
    assert sorted(stored_ids(wm)) == sorted(out)
    assert wm.index.count(T) == 10


def test_a_group_stored_then_failing_acknowledges_every_caller(wm: WorldModel, monkeypatch: pytest.MonkeyPatch) -> None:
    # the group's transaction commits and something after it raises: the episodes are stored, so
    # no caller is told it failed (and none is written twice); indexing is the retrier's to redo
    real = wm.store.add_appending

    def then_fail(tenant_id: str, episodes: list[dict[str, Any]], *a: Any) -> Any:
        entry = real(tenant_id, episodes, *a)
        if len(episodes) > 1:
            raise OSError("connection reset after commit")
        return entry

    monkeypatch.setattr(wm.store, "add_appending", then_fail)
    out = grouped(wm, [lambda k=k: wm.record_experience(T, exp(k)) for k in range(6)])
    assert all(isinstance(r, str) for r in out), out
    ids = stored_ids(wm)
    assert sorted(ids) == sorted(out)
    monkeypatch.setattr(wm.store, "add_appending", real)
    wm.retry_indexing()  # stored "indexed" with their journal entry and no rows: reopened and indexed
    assert wm.index.count(T) == 6
    assert all(e["index_status"] == "indexed" for e in wm.store.get_episodes(T, out).values())


def test_off_by_config_commits_each_call_alone(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path / "d", embedder=HashingEmbedder(64), record_group_commit=False) as m:
        assert m.recorder.group_commit is None
        threads = [threading.Thread(target=m.record_experience, args=(T, exp(k))) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert m.index.count(T) == 8


WRITER = textwrap.dedent('''
    import json, sys, threading
    from worldgraph import WorldModel
    from worldgraph.memory.embeddings import HashingEmbedder

    path, tenant = sys.argv[1], sys.argv[2]
    wm = WorldModel.open(path, embedder=HashingEmbedder(384))
    out = threading.Lock()
    print(json.dumps({"ready": True}), flush=True)

    def writer(k):
        n = 0
        while True:
            ids = [f"w{k:02d}-{n:06d}-{i}" for i in range(1 + n % 3)]
            got = wm.record_experiences(tenant, [{"episode_id": e, "agent_id": f"agent-{k}", "task_type": "t",
                                                  "task_description": f"write {e}", "outcome": "success"}
                                                 for e in ids])
            assert got == ids
            with out:
                print(json.dumps({"ids": ids}), flush=True)
            n += 1

    for k in range(12):
        threading.Thread(target=writer, args=(k,), daemon=True).start()
    threading.Event().wait()
''')


@pytest.mark.slow
def test_sigkill_under_concurrent_records_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data = tmp_path / "d"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    proc = subprocess.Popen([sys.executable, str(script), str(data), T], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    acked: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while len(acked) < 300 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"writer exited: {proc.stderr.read() if proc.stderr else ''}")
            acked.extend(json.loads(line).get("ids", []))
        assert len(acked) >= 300, "writer too slow"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        # lines written before the kill but not read yet are acknowledged too
        rest = proc.stdout.read()
        acked.extend(i for line in rest.splitlines() if line.strip().startswith("{")
                     for i in json.loads(line).get("ids", []))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    with WorldModel.open(data, embedder=HashingEmbedder(384)) as m:  # the open re-indexes what is pending
        ids = stored_ids(m)
        assert set(acked) <= set(ids) and len(set(ids)) == len(ids)
        assert m.index.count(T) == len(ids)
        assert all(e["index_status"] == "indexed" for b in m.store.iter_episodes(T) for e in b)
