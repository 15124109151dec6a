"""bench/recall_probe.py on a small store built the way bench_memory.py --keep builds one: it
times recall and feedback on it, reports the worldgraph package it measured, and refuses a folder
that is not such a store or a --size that does not match it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

import bench_memory as bm  # noqa: E402
import recall_probe  # noqa: E402

import worldgraph  # noqa: E402

N = 300


def kept_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of ``N`` episodes built as ``bench_memory.py --keep DIR`` builds DIR/wg-bench-N."""
    path = tmp_path_factory.mktemp("keep") / f"wg-bench-{N}"
    emb = bm.PrecomputedEmbedder()
    with bm.WorldModel.open(path, embedder=emb) as wm:
        bm.bench_record(wm, emb, bm.Corpus(N, seed=20260101), 100, lambda _msg: None)
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return kept_store(tmp_path_factory)


def test_probe_times_recall_and_feedback(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert recall_probe.main(["--store", str(store), "--size", str(N), "--queries", "12", "--feedback", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["worldgraph"] == str(Path(worldgraph.__file__).parent)
    for part in ("recall", "filtered", "feedback"):
        assert out[part]["p50_ms"] > 0 and out[part]["cpu_p50_ms"] >= 0
    corpus = bm.Corpus(N, seed=20260101)
    with bm.WorldModel.open(store, embedder=bm.PrecomputedEmbedder()) as wm:  # the 5 ratings were stored
        stats = wm.store.feedback_stats(bm.TENANT, [corpus.episode_id(i) for i in range(N)])
    assert sum(count for _, count in stats.values()) == 5


def test_probe_refuses_a_folder_that_is_no_kept_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        recall_probe.main(["--store", str(tmp_path), "--size", str(N)])
    assert exc.value.code == 2
    assert "no worldgraph.db" in capsys.readouterr().err


def test_probe_refuses_a_size_the_store_was_not_built_with(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        recall_probe.main(["--store", str(store), "--size", str(N + 1), "--feedback", "0"])
    assert exc.value.code == 2
    assert f"holds {N} episodes" in capsys.readouterr().err
