"""Coalesced embedding: concurrent embed calls share model batches, each caller gets its own rows,
and an error reaches only the caller whose texts caused it."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from worldgraph import WorldModel
from worldgraph.memory.embedders.coalesce import CoalescingEmbedder
from worldgraph.memory.embeddings import HashingEmbedder, embedder_name


class Recording(HashingEmbedder):
    """A slow model that records its batch sizes and refuses texts containing 'poison'."""

    def __init__(self, delay: float = 0.03) -> None:
        super().__init__(64)
        self.delay = delay
        self.calls: list[int] = []
        self.lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        with self.lock:
            self.calls.append(len(texts))
        time.sleep(self.delay)
        if any("poison" in t for t in texts):
            raise ValueError("poisoned text")
        return super().embed(texts)


def test_concurrent_calls_share_batches_and_get_their_own_rows() -> None:
    inner = Recording()
    emb = CoalescingEmbedder(inner, max_batch=64, max_wait=0.01)
    texts = [[f"caller {k} text {i}" for i in range(3)] for k in range(16)]
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(emb.embed, texts))
    for k, got in enumerate(results):
        assert np.array_equal(got, HashingEmbedder(64).embed(texts[k]))  # its own rows, in order
    assert sum(inner.calls) == 48 and len(inner.calls) < 8 and max(inner.calls) > 3, inner.calls
    assert emb.name == embedder_name(inner) and emb.dimensions == 64


def test_a_lone_call_runs_at_once_and_max_batch_is_kept() -> None:
    inner = Recording(delay=0.0)
    emb = CoalescingEmbedder(inner, max_batch=8, max_wait=5.0)  # a lone caller never waits for company
    start = time.monotonic()
    assert emb.embed(["a", "b"]).shape == (2, 64)
    assert time.monotonic() - start < 1.0
    inner.delay = 0.05
    with ThreadPoolExecutor(12) as pool:
        list(pool.map(emb.embed, [["x", "y", "z"]] * 12))
    assert all(n <= 8 for n in inner.calls[1:]) and max(inner.calls[1:]) == 6, inner.calls  # 2 calls of 3
    assert emb.embed(["one big call"] * 20).shape == (20, 64)  # larger than max_batch: alone, whole


def test_an_error_goes_to_the_caller_whose_texts_failed() -> None:
    inner = Recording()
    emb = CoalescingEmbedder(inner, max_batch=256, max_wait=0.02)
    inputs = [[f"fine {k}"] for k in range(10)]
    inputs[4] = ["poison here"]

    def call(texts: list[str]) -> Any:
        try:
            return emb.embed(texts)
        except ValueError as exc:
            return exc

    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(call, inputs))
    for k, r in enumerate(results):
        if k == 4:
            assert isinstance(r, ValueError) and "poisoned" in str(r)
        else:
            assert isinstance(r, np.ndarray) and r.shape == (1, 64), (k, r)
    assert emb.embed(["after the error"]).shape == (1, 64)  # nothing is left stuck


def test_the_world_model_records_concurrently_through_shared_batches(tmp_path: Path) -> None:
    inner = Recording(delay=0.05)
    with WorldModel.open(tmp_path / "data", embedder=inner) as wm:
        inner.calls.clear()
        exps = [{"agent_id": "a", "task_type": "t", "task_description": f"task {i}", "outcome": "success"}
                for i in range(24)]
        with ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(lambda e: wm.record_experience("acme", e), exps))
        assert len(set(ids)) == 24 and wm.stats("acme")["indexed"] == 24
        assert len(inner.calls) < 24, inner.calls  # shared batches
        got = wm.recall_experiences("acme", None, "task 17", 1, {"min_similarity": 0})
        assert got[0]["episode_id"] == ids[17]  # each episode indexed with its own vector
    with WorldModel.open(tmp_path / "data2", embedder=inner, embedding_coalesce=False) as wm:
        inner.calls.clear()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda e: wm.record_experience("acme", e), exps))
        assert len(inner.calls) == 24  # switched off: one model call per record


@pytest.mark.parametrize("wait", [0.0, 0.002])
def test_many_rounds_never_lose_a_caller(wait: float) -> None:
    emb = CoalescingEmbedder(Recording(delay=0.001), max_batch=16, max_wait=wait)
    with ThreadPoolExecutor(12) as pool:
        out = list(pool.map(lambda k: emb.embed([f"t{k}"] * (1 + k % 5)), range(300)))
    assert [len(o) for o in out] == [1 + k % 5 for k in range(300)]


def test_cli_sessions_share_batches_and_keep_file_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from worldgraph.cli.main import main

    calls: list[int] = []
    real = HashingEmbedder.embed

    def slow(self: HashingEmbedder, texts: list[str]) -> np.ndarray:
        calls.append(len(texts))
        time.sleep(0.03)
        return real(self, texts)

    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    monkeypatch.setattr(HashingEmbedder, "embed", slow)
    f = tmp_path / "sessions.jsonl"
    sessions = [{"session_id": f"s{k % 12}", "turns": [
        {"speaker": "A", "text": f"item {k} turn {i}", "timestamp": f"2026-01-{1 + k // 12:02d}T10:00:{i:02d}Z"}
        for i in range(5)]} for k in range(24)]  # 12 sessions, each in two items (the second later in time)
    f.write_text("\n".join(json.dumps(s) for s in sessions))
    assert main(["--data", str(tmp_path / "d"), "--tenant", "acme", "record-conversation", str(f), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["recorded"] == 120 and len(calls) < 24, calls  # fewer model calls than session items
    with WorldModel.open(tmp_path / "d", embedder=HashingEmbedder(384)) as wm:
        eps = wm.store.get_episodes("acme", out["episode_ids"])
        texts = [eps[i]["task_description"] for i in out["episode_ids"]]
        assert texts == [t["text"] for s in sessions for t in s["turns"]]  # ids in file order
        # the second item of a session follows the first: its first turn links back to the first item
        second = eps[out["episode_ids"][12 * 5]]
        assert "item 0 turn 4" in (second.get("input_summary") or ""), second


def test_cli_a_bad_session_fails_and_names_the_stored_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from worldgraph.cli.main import main

    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    f = tmp_path / "sessions.jsonl"
    good = [{"speaker": "A", "text": "hello", "timestamp": "2026-01-01T10:00:00Z"}]
    items = [{"session_id": "ok1", "turns": good}, {"session_id": "bad", "turns": [{"speaker": "A"}]},
             {"session_id": "ok2", "turns": good}]
    f.write_text("\n".join(json.dumps(i) for i in items))
    data = str(tmp_path / "d")
    assert main(["--data", data, "--tenant", "acme", "record-conversation", str(f)]) == 1
    err = capsys.readouterr().err
    assert "error:" in err and "2 of 3 session item(s) were recorded" in err and "ok1" in err and "ok2" in err
    with WorldModel.open(data, embedder=HashingEmbedder(384)) as wm:
        assert wm.stats("acme")["episodes"] == 2
    assert main(["--data", data, "--tenant", "acme", "record-conversation", str(f), "--json"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["error"]  # --json: only the error object
