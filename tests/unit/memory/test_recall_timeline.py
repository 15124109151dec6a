"""bench/recall_timeline.py on a small kept store: the timed kinds, the parts' marks, the results
it records for comparing two trees, the parts alone, and the comparison of two runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

import recall_timeline  # noqa: E402

from tests.unit.memory.test_recall_probe import N, kept_store  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return kept_store(tmp_path_factory)


def test_timeline_times_each_kind_and_records_the_results(store: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for out in (a, b):
        assert recall_timeline.main(["--store", str(store), "--size", str(N), "--queries", "12",
                                     "--kinds", "plain,role", "--out", str(out)]) == 0
    run = json.loads(a.read_text())
    assert set(run["kinds"]) == {"plain", "role"}
    for r in run["kinds"].values():
        assert len(r["wall"]) == len(r["ids"]) == len(r["scores"]) == 12 and r["p50"] > 0
        assert any(r["ids"])  # (a role filter can leave a query of this small store nothing)
        assert {"vector_search start", "episodes_with_feedback end"} <= set(r["timeline_p50"])
    assert recall_timeline.main(["--compare", str(a), str(b)]) == 0
    assert "12 of 12 same ids, 12 same scores" in capsys.readouterr().out


def test_alone_times_each_part_of_each_kind_with_its_filter(store: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from worldgraph.memory.index.episode_index import EpisodeIndex

    wheres: list[object] = []
    real = EpisodeIndex.vector_search
    monkeypatch.setattr(EpisodeIndex, "vector_search",
                        lambda self, *a, **kw: wheres.append(kw.get("where")) or real(self, *a, **kw))
    out = tmp_path / "alone.json"
    assert recall_timeline.main(["--store", str(store), "--size", str(N), "--queries", "12", "--alone",
                                 "--kinds", "plain,canvas", "--out", str(out)]) == 0
    alone = json.loads(out.read_text())["alone"]
    assert set(alone) == {"plain", "canvas"}
    assert all(set(parts) == {"vector_search", "text_search", "records", "recall"} for parts in alone.values())
    assert None in wheres and any(isinstance(w, dict) and w.get("canvas_ids") for w in wheres)
