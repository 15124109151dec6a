"""The consistency model of recall across processes (README "Security and reliability"):

- once ``record_experience(s)`` has returned in one process, a recall in any other process that
  has the folder open finds the episode at once (the index row is written before the call
  returns, and LanceDB reads see other processes' commits: ``read_consistency_interval=0``);
- while the call is still running -- between the store's commit and the index write, or after an
  index write that failed -- the episode is held by the store (by id, by agent) but not recalled,
  until it is indexed (by the call itself, the index retrier or the next open).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 8
WRITER = """
import sys
from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder
with WorldModel.open(sys.argv[1], embedder=HashingEmbedder(384)) as wm:
    for i in range(int(sys.argv[2])):
        eid = wm.record_experience("t1", {"agent_id": "w", "task_type": "t", "outcome": "success",
                                          "task_description": f"calibrate telescope mirror number {i} zq{i}x"})
        print(eid, flush=True)  # returned: from now on every reader must recall it
        sys.stdin.readline()    # the reader checked; next one
"""


def _found(wm: WorldModel, i: int) -> list[str]:
    hits = wm.recall_experiences("t1", None, f"calibrate telescope mirror number {i} zq{i}x", 50,
                                 {"min_similarity": 0.0})
    return [h["episode_id"] for h in hits]


def test_a_returned_write_is_recalled_at_once_by_another_process(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with WorldModel.open(data, embedder=HashingEmbedder(384)) as reader:  # open before any write
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(data), str(ROUNDS)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
        try:
            assert writer.stdin is not None and writer.stdout is not None
            for i in range(ROUNDS):
                eid = writer.stdout.readline().strip()
                assert eid, writer.stderr.read() if writer.stderr else ""
                started = time.monotonic()
                assert eid in _found(reader, i), f"round {i}: recalled no episode the writer had returned"
                assert time.monotonic() - started < 30
                writer.stdin.write("\n")
                writer.stdin.flush()
            assert writer.wait(timeout=120) == 0
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait()


def test_a_stored_episode_not_yet_indexed_is_held_but_not_recalled(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(384)) as wm:
        def not_indexed_yet(*args: Any, **kw: Any) -> None:
            raise RuntimeError("the index row has not been written yet")

        # the state a reader can meet while the writer's call runs: committed, index row not written
        monkeypatch.setattr(wm.indexer, "embed", not_indexed_yet)
        monkeypatch.setattr(wm.recorder.retrier, "kick", lambda: None)
        eid = wm.record_experience("t1", {"agent_id": "w", "task_type": "t", "outcome": "success",
                                          "task_description": "calibrate telescope mirror number 0 zq0x"})
        assert wm.get_episode("t1", eid)["index_status"] != "indexed"
        assert [e["id"] for e in wm.get_agent_episodes("t1", "w")] == [eid]  # held by the store
        assert eid not in _found(wm, 0)  # ... not recalled: the documented window
        monkeypatch.undo()
        assert wm.retry_indexing() == 1  # what the call (or the retrier, or the next open) does
        assert eid in _found(wm, 0)
