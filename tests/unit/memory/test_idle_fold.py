"""Rows a write leaves unfolded are folded once the writes stop (``optimize_idle_rows``): a bulk
ingest that does not end on a multiple of ``optimize_every_rows`` would otherwise leave up to
that many rows for every text search to scan until the next write."""

from __future__ import annotations

import time

import numpy as np

from worldgraph.config import WorldGraphConfig
from worldgraph.memory.index.episode_index import EpisodeIndex

D = 16


def _config(**over: object) -> WorldGraphConfig:
    # mirror_min_rows 1: no table is searched in process (small.py), so every table counts as big
    base = {"ann_index_min_rows": 100_000, "compact_every_writes": 1000, "optimize_every_rows": 100_000,
            "mirror_min_rows": 1, "optimize_idle_rows": 100, "optimize_idle_seconds": 0.5}
    return WorldGraphConfig(**{**base, **over})


def _write(idx: EpisodeIndex, start: int, n: int, rng: np.random.Generator) -> None:
    idx.upsert([{"episode_id": f"e{i}", "tenant_id": "A", "vector": rng.normal(size=D), "text": f"row {i} words"}
                for i in range(start, start + n)])


def _indexed_then(idx: EpisodeIndex, rows: int, seed: int) -> np.random.Generator:
    """50 rows (the first write builds the indexes over them), then ``rows`` more, not folded;
    returns the generator, for more rows."""
    rng = np.random.default_rng(seed)
    _write(idx, 0, 50, rng)
    assert idx.wait_for_maintenance(60)
    _write(idx, 50, rows, rng)
    return rng


def _unfolded(idx: EpisodeIndex) -> int:
    table = idx.table_for("A")
    table.checkout_latest()
    return int(table.index_stats("text_idx").num_unindexed_rows)


def _optimize_runs(idx: EpisodeIndex) -> int:
    return sum(1 for run in idx.maintenance_runs if ["optimize", idx.table_for("A").name] in run["tasks"])


def _wait_folded(idx: EpisodeIndex, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if _unfolded(idx) == 0:
            return True
        time.sleep(0.2)
    return False


def test_rows_left_by_writes_that_stopped_are_folded(tmp_path):
    idx = EpisodeIndex(tmp_path / "db", D, "synthetic", _config())
    try:
        rng = _indexed_then(idx, 60, 1)
        _write(idx, 110, 60, rng)
        assert _unfolded(idx) == 120  # 120 rows < optimize_every_rows: no fold asked
        assert _wait_folded(idx, 60), "the rows were not folded after the writes stopped"
        assert idx.wait_for_maintenance(60)  # the run is counted once it ended
        assert _optimize_runs(idx) == 1
        assert idx.text_search("A", "row 150 words", k=1)[0]["episode_id"] == "e150"
    finally:
        idx.close()


def test_no_idle_fold_when_off_or_below_the_rows(tmp_path):
    # "below": the first write's 50 rows count too (rows written since the last optimize): 50 + 40 < 100
    for name, over, rows in (("off", {"optimize_idle_rows": 0}, 120), ("below", {}, 40)):
        idx = EpisodeIndex(tmp_path / name, D, "synthetic", _config(**over))
        try:
            _indexed_then(idx, rows, 2)
            time.sleep(3)  # six times optimize_idle_seconds
            assert _unfolded(idx) == rows, name
            assert _optimize_runs(idx) == 0, name
        finally:
            idx.close()


def test_tables_searched_in_process_are_not_folded_when_idle(tmp_path):
    # mirror_min_rows 10,000: tables of fewer rows are searched in process, where rows not folded cost nothing
    idx = EpisodeIndex(tmp_path / "db", D, "synthetic", _config(mirror_min_rows=10_000))
    try:
        _indexed_then(idx, 150, 3)
        time.sleep(3)
        assert _unfolded(idx) == 150 and _optimize_runs(idx) == 0
    finally:
        idx.close()


def test_no_idle_fold_while_the_writes_go_on(tmp_path):
    idx = EpisodeIndex(tmp_path / "db", D, "synthetic", _config(optimize_idle_seconds=1.5))
    try:
        rng = _indexed_then(idx, 0, 4)
        start = 50
        for _ in range(12):  # a write every ~0.3 s for ~3.6 s, more than twice optimize_idle_seconds
            _write(idx, start, 20, rng)
            start += 20
            time.sleep(0.3)
            assert _optimize_runs(idx) == 0, "folded while the writes went on"
        assert _wait_folded(idx, 60)
        assert idx.wait_for_maintenance(60)
        assert _optimize_runs(idx) == 1
    finally:
        idx.close()


def _left_unfolded_by_a_writer(path):
    """150 rows at ``path`` that their writer, closed right after writing them, left unfolded."""
    writer = EpisodeIndex(path, D, "synthetic", _config())
    try:
        _indexed_then(writer, 150, 5)
    finally:
        writer.close()  # at once: no idle fold in the writer


def test_rows_another_process_left_are_folded_after_a_search(tmp_path):
    """An import that closes right after its last write leaves its rows unfolded; the next process
    to search the table counts them from the manifest and folds them (it writes nothing itself)."""
    path = tmp_path / "db"
    _left_unfolded_by_a_writer(path)
    reader = EpisodeIndex(path, D, "synthetic", _config())
    try:
        assert _unfolded(reader) == 150
        assert reader.text_search("A", "row 120 words", k=1)[0]["episode_id"] == "e120"
        assert _wait_folded(reader, 60), "the rows left by the other process were not folded"
    finally:
        reader.close()


def test_a_read_only_process_folds_nothing(tmp_path):
    path = tmp_path / "db"
    _left_unfolded_by_a_writer(path)
    reader = EpisodeIndex(path, D, "synthetic", _config(), read_only=True)
    try:
        assert reader.text_search("A", "row 120 words", k=1)[0]["episode_id"] == "e120"
        time.sleep(3)
        assert _unfolded(reader) == 150
    finally:
        reader.close()
