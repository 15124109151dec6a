"""bench/recall_expansion.py, the RM3-style expansion measured (and not shipped) in bench/README.md
"The first hits' words as a second query": the terms it picks, the bridge memory it lifts, and
recall left as shipped once the measurement is over."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

import recall_expansion as rx  # noqa: E402

from worldgraph import WorldModel  # noqa: E402
from worldgraph.memory.recall import pipeline  # noqa: E402

TEXTS = {
    "first": "We went camping at the lake near Tahoe",  # the query's words: the first hit
    "bridge": "Tahoe was freezing at night",  # none of the query's words, one rare word of the first hit's
    "trip": "The business trip was long",
    "dentist": "A trip to the dentist",
    "garden": "The garden needs water",
}
OPTIONS = {"min_similarity": -1.0}  # no floor: every memory is a candidate, only the ranking moves


def _open(tmp_path: Path) -> tuple[WorldModel, dict[str, str]]:
    wm = WorldModel.open(tmp_path, embedding_provider="hashing")
    ids = wm.record_experiences("t", [{"agent_id": "a", "task_type": "note", "task_description": text,
                                       "outcome": "success"} for text in TEXTS.values()])
    wm.index.wait_for_maintenance()
    return wm, dict(zip(ids, TEXTS))


def _bm25_parts(wm: WorldModel, names: dict[str, str]) -> dict[str, float]:
    got = wm.recall_experiences("t", None, "camping trip at the lake", limit=10, options=OPTIONS)
    return {names[r["episode_id"]]: r["score_breakdown"]["bm25_part"] for r in got}


def test_salient_terms_skip_the_query_and_the_terms_no_other_memory_has(tmp_path: Path) -> None:
    wm, names = _open(tmp_path)
    try:
        wm.recall_experiences("t", None, "camping", options=OPTIONS)  # the table's in-process copy
        table = wm.index._small_table(wm.index._part("t"), ["episode_id"])
        row = {names[e]: r for r, e in enumerate(table.columns["episode_id"])}
        query = set(rx.terms("camping trip at the lake"))
        picked = rx.salient_terms(table, query, [row["first"]], [1.0], 5)
        # the rarest shared word first (the date's words, in every memory's indexed text, weigh little);
        # "went" and "near" are in the first memory only (they link nothing), "camp" and "lake" are the query's
        assert picked[0] == "taho"
        assert not {"camp", "lake", "went", "near"} & set(picked)
        assert "camp" not in rx.salient_terms(table, set(), [row["first"]], [1.0], 50)  # in one memory only
    finally:
        wm.close()


def test_the_stage_lifts_the_memory_that_shares_the_first_hits_rare_word(tmp_path: Path) -> None:
    wm, names = _open(tmp_path)
    try:
        shipped = _bm25_parts(wm, names)
        assert shipped["bridge"] == 0.0 and shipped["first"] > 0
        settings: dict[str, Any] = {**rx.DEFAULTS, "k": 1, "m": 1, "mode": "add", "lam": 1.0,
                                    "with_query": False}  # the search: "taho" alone
        rx.STATE.reset(settings)
        with rx.installed():
            lifted = _bm25_parts(wm, names)
        assert lifted["bridge"] > 0.0  # the extra search ("taho") found it, and its share counts
        assert lifted["first"] == shipped["first"]  # "add": the query's own hits keep their share
        assert rx.STATE.expanded == {e for e, n in names.items() if n in ("first", "bridge")}
    finally:
        rx.STATE.reset(None)
        wm.close()


def test_recall_is_as_shipped_once_the_measurement_is_over(tmp_path: Path) -> None:
    shipped = pipeline._recall
    try:
        with rx.installed():
            assert pipeline._recall is rx._recall
            raise RuntimeError("a variant failed")
    except RuntimeError:
        pass
    assert pipeline._recall is shipped
