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


def test_alone_times_each_part(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "alone.json"
    assert recall_timeline.main(["--store", str(store), "--size", str(N), "--queries", "12", "--alone",
                                 "--out", str(out)]) == 0
    assert set(json.loads(out.read_text())["alone"]) == {"vector_search", "text_search", "records", "recall"}
