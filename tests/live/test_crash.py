"""Durability: a writer killed with SIGKILL mid-batch loses nothing it reported as committed,
never leaves half a batch behind, and every stored episode is indexed after the next open.
An index failure keeps the episodes (marked 'failed') and ``retry_indexing`` indexes them later."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from worldgraph import WorldModel
from worldgraph.kg.embedded.episode_format import unpack
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.memory.record import searchable_text

TENANT = "crash"
BATCH = 200
REQUIRED_FIELDS = (
    "id", "episode_id", "tenant_id", "agent_id", "agent_role", "task_type", "task_description", "input_summary",
    "reasoning_chain", "approach_taken", "actions_taken", "outcome", "success", "error_message",
    "confidence_score", "constitutional_violations", "human_intervention_required", "learnings",
    "metacognitive_insights", "timestamp", "ts", "maturity_level", "canvas_id", "canvas_action_ids",
)

WRITER = textwrap.dedent('''
    import json, sys
    from worldgraph import WorldModel
    from worldgraph.memory.embeddings import HashingEmbedder

    path, tenant, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    wm = WorldModel.open(path, embedder=HashingEmbedder(384))
    print(json.dumps({"ready": True}), flush=True)
    b = 0
    while True:
        ids = [f"ep-{b:05d}-{i:03d}" for i in range(batch)]
        exps = [{"episode_id": eid, "agent_id": f"agent-{i % 7}", "agent_role": "Ops",
                 "task_type": "deploy", "task_description": f"deploy service {b} shard {i}",
                 "input_summary": "rollout of build " + str(b), "outcome": "success" if i % 4 else "failure",
                 "confidence": 0.5 + (i % 5) / 10, "learnings": ["canary first", f"batch {b}"],
                 "actions": ["build", "push", "verify"], "canvas_id": f"canvas-{i % 3}"}
                for i, eid in enumerate(ids)]
        got = wm.record_experiences(tenant, exps)
        assert got == ids, (got[:3], ids[:3])
        print(json.dumps({"batch": b, "ids": ids}), flush=True)
        b += 1
''')


def _read_line(proc: subprocess.Popen[str], deadline: float) -> dict[str, Any]:
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line:
            return json.loads(line)
        if proc.poll() is not None:
            raise AssertionError(f"writer exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
    raise AssertionError("writer produced no output in time")


def _stored_rows(db: Path) -> dict[str, tuple[str, str]]:
    """id -> (raw JSON, index_status), read straight from the SQLite file (no worldgraph code)."""
    conn = sqlite3.connect(str(db))
    try:
        return {r[0]: (r[1], r[2]) for r in conn.execute(
            "SELECT id, data, index_status FROM episodes WHERE tenant_id = ?", (TENANT,))}
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.08])
def test_sigkill_mid_batch_loses_nothing_committed(tmp_path: Path, delay: float) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    data = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, str(script), str(data), TENANT, str(BATCH)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    committed: dict[int, list[str]] = {}
    try:
        deadline = time.monotonic() + 120
        assert _read_line(proc, deadline) == {"ready": True}
        while len(committed) < 3:
            msg = _read_line(proc, deadline)
            committed[msg["batch"]] = msg["ids"]
        # the writer went straight on to the next batch: kill it while that one is in flight
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        # batches the writer reported before it died but the test had not read yet also count
        # as committed (on a slow machine it can finish a batch or two during the sleep)
        assert proc.stdout is not None
        for line in proc.stdout.read().splitlines():
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by the kill
            if isinstance(msg, dict) and "batch" in msg:
                committed[msg["batch"]] = msg["ids"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL

    # 1. the store as the killed writer left it, before any worldgraph code touches it
    rows = _stored_rows(data / "worldgraph.db")
    for b, ids in committed.items():
        for eid in ids:
            assert eid in rows, f"batch {b}: committed episode {eid} is missing"
    batches: dict[int, set[str]] = {}
    for eid, (raw, status) in rows.items():
        json.loads(raw)  # valid JSON
        rec = unpack(raw)  # the record as the store reads it (kg/embedded/episode_format.py: format 2)
        for f in REQUIRED_FIELDS:
            assert f in rec, f"{eid} lacks {f}"
        assert rec["id"] == eid and rec["tenant_id"] == TENANT
        assert status in ("pending", "indexed", "failed")
        batches.setdefault(int(eid.split("-")[1]), set()).add(eid)
    for b, ids in batches.items():
        assert len(ids) == BATCH, f"batch {b} is partial: {len(ids)} of {BATCH} episodes stored"
    assert set(committed) <= set(batches)
    assert max(batches) <= max(committed) + 1  # at most the batch in flight got in

    # 2. reopening retries pending indexing: everything stored is indexed and recallable
    with WorldModel.open(data, embedder=HashingEmbedder(384)) as wm:
        stats = wm.stats(TENANT)
        assert stats["episodes"] == len(rows)
        assert stats["indexed"] == stats["episodes"]
        assert wm.store.unindexed_episodes() == []
        assert all(s == "indexed" for _, s in _stored_rows(data / "worldgraph.db").values())
        # every stored episode has its row in the index, once (even if the killed writer had
        # indexed it already), and recall finds them
        assert wm.index.count(TENANT) == len(rows)
        assert {r["episode_id"] for r in wm.index.get(TENANT, sorted(rows))} == set(rows)
        # each batch's episodes are found by their own text (near-copies make the re-ranked
        # order depend on confidence and diversity, so the candidate search is what is checked)
        for b in batches:
            target = f"ep-{b:05d}-005"
            text = searchable_text(unpack(rows[target][0]))
            hits = wm.index.vector_search(TENANT, wm.embedder.embed([text])[0], k=5)
            assert hits[0]["episode_id"] == target and hits[0]["similarity"] == pytest.approx(1.0, abs=1e-5)
        res = wm.recall_experiences(TENANT, "Ops", f"deploy service {max(batches)} shard 5", limit=10,
                                    options={"min_similarity": 0.0})
        assert len(res) == 10 and {r["episode_id"] for r in res} <= set(rows)


class FlakyEmbedder(HashingEmbedder):
    """Raises ConnectionError on its first ``fail_calls`` calls (an embedding server that is down)."""

    def __init__(self, fail_calls: int = 1) -> None:
        super().__init__(384)
        self.name = "hashing-v1-384"  # the same index label as the plain hashing embedder
        self.fail_calls = fail_calls
        self.calls = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        if self.calls <= self.fail_calls:
            raise ConnectionError("embedding server unreachable")
        return super().embed(texts)


def _exps(n: int, word: str = "invoice") -> list[dict[str, Any]]:
    return [{"agent_id": "fin-1", "agent_role": "Finance", "task_type": "reconcile",
             "task_description": f"reconcile {word} number {i}", "outcome": "success"} for i in range(n)]


def test_embedding_failure_stores_marks_failed_and_retry_indexes(tmp_path: Path) -> None:
    emb = FlakyEmbedder(fail_calls=1)
    with WorldModel.open(tmp_path, embedder=emb) as wm:
        ids = wm.record_experiences("t1", _exps(5))
        assert len(ids) == 5
        stored = wm.store.get_episodes("t1", ids)
        assert set(stored) == set(ids)
        for e in stored.values():
            assert e["index_status"] == "failed"
            assert "embedding server unreachable" in e["index_error"]
        assert wm.stats("t1")["indexed"] == 0
        assert wm.recall_experiences("t1", None, "reconcile invoice number 3", options={"min_similarity": 0.0}) == []

        assert wm.retry_indexing() == 5
        stored = wm.store.get_episodes("t1", ids)
        assert all(e["index_status"] == "indexed" and e["index_error"] is None for e in stored.values())
        assert wm.stats("t1")["indexed"] == 5
        res = wm.recall_experiences("t1", None, "reconcile invoice number 3", options={"min_similarity": 0.0})
        assert res[0]["episode_id"] == ids[3]
        assert wm.retry_indexing() == 0  # nothing left


def test_index_write_failure_marks_failed_and_open_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(384))
    real_to_arrow = wm.index._to_arrow  # every index write (append or upsert) goes through it
    calls = {"n": 0}

    def failing_to_arrow(rows: list[dict[str, Any]]) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("disk full while writing the LanceDB fragment")
        return real_to_arrow(rows)

    monkeypatch.setattr(wm.index, "_to_arrow", failing_to_arrow)
    ids = wm.record_experiences("t1", _exps(4, "freight"))
    stored = wm.store.get_episodes("t1", ids)
    assert [stored[i]["index_status"] for i in ids] == ["failed"] * 4
    assert "disk full" in stored[ids[0]]["index_error"]
    assert wm.stats("t1") ["episodes"] == 4 and wm.stats("t1")["indexed"] == 0
    # a later batch indexes fine; the failed one waits for a retry
    more = wm.record_experiences("t1", _exps(2, "parcel"))
    assert all(e["index_status"] == "indexed" for e in wm.store.get_episodes("t1", more).values())
    wm.close()

    # opening again retries what failed
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(384)) as wm2:
        stored = wm2.store.get_episodes("t1", ids + more)
        assert all(e["index_status"] == "indexed" for e in stored.values())
        assert wm2.stats("t1")["indexed"] == wm2.stats("t1")["episodes"] == 6
        res = wm2.recall_experiences("t1", None, "reconcile freight number 2", options={"min_similarity": 0.0})
        assert res[0]["episode_id"] == ids[2]


KILLED_AFTER_COMMIT = textwrap.dedent('''
    import os, signal, sys
    from worldgraph import WorldModel
    from worldgraph.memory.embeddings import HashingEmbedder
    from worldgraph.memory.index.indexer import EpisodeIndexer

    path, tenant = sys.argv[1], sys.argv[2]
    calls = []
    index_rows = EpisodeIndexer.index_rows

    def killed_on_the_third(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # the third batch is committed to the store; its rows are not appended
            os.kill(os.getpid(), signal.SIGKILL)
        return index_rows(self, *args, **kwargs)

    EpisodeIndexer.index_rows = killed_on_the_third
    wm = WorldModel.open(path, embedder=HashingEmbedder(384))
    for b in range(3):
        wm.record_experiences(tenant, [{"episode_id": f"ep-{b}-{i:03d}", "agent_id": "ops-1", "task_type": "deploy",
                                        "task_description": f"deploy service {b} shard {i}", "outcome": "success"}
                                       for i in range(50)])
''')


@pytest.mark.slow
def test_sigkill_between_store_commit_and_index_append(tmp_path: Path) -> None:
    """A writer killed after a batch's store commit, before its index rows are appended: the
    batch is stored (the store's one commit of it: "indexed", with its append journal entry),
    and the next open indexes what has no row, so every stored episode is recallable."""
    script = tmp_path / "writer.py"
    script.write_text(KILLED_AFTER_COMMIT)
    data = tmp_path / "data"
    proc = subprocess.run([sys.executable, str(script), str(data), TENANT], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    rows = _stored_rows(data / "worldgraph.db")
    assert len(rows) == 150 and {s for _, s in rows.values()} == {"indexed"}
    conn = sqlite3.connect(str(data / "worldgraph.db"))
    try:
        entries = conn.execute("SELECT tenant_id, first_rowid, last_rowid FROM index_appends").fetchall()
    finally:
        conn.close()
    assert (TENANT, 101, 150) in entries  # the third batch's entry; the second's may be there too
    with WorldModel.open(data, embedder=HashingEmbedder(384)) as wm:
        assert wm.index.count(TENANT) == 150
        assert {r["episode_id"] for r in wm.index.get(TENANT, sorted(rows))} == set(rows)
        assert wm.store.unindexed_episodes() == []
        hit = wm.recall_experiences(TENANT, None, "deploy service 2 shard 17", options={"min_similarity": 0.0})
        assert hit[0]["episode_id"] == "ep-2-017"
    conn = sqlite3.connect(str(data / "worldgraph.db"))
    try:
        assert conn.execute("SELECT COUNT(*) FROM index_appends").fetchone()[0] == 0
    finally:
        conn.close()
