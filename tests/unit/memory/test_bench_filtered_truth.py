"""bench/filtered.py: the exact filtered top 10 the memory benchmark measures the index against is
what a filter over the experiences themselves gives (role, agent, canvases, dates, outcome), and
its cache gives the same rows back."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from corpus import Corpus, unit_rows  # noqa: E402
from filtered import KINDS, exact_truth, make_filter  # noqa: E402


def passes(exp: dict, where: dict) -> bool:
    """The index's ``where`` applied to an experience as recorded."""
    ts = datetime.fromisoformat(exp["timestamp"]).timestamp()
    return (where.get("agent_role") in (None, exp["agent_role"])
            and where.get("agent_id") in (None, exp["agent_id"])
            and (not where.get("canvas_ids") or exp.get("canvas_id") in where["canvas_ids"])
            and ("start" not in where or ts >= where["start"] - 1e-3)
            and ("end" not in where or ts <= where["end"] + 1e-3)
            and (not where.get("success_only") or exp["outcome"] == "success"))


def test_exact_filtered_truth_matches_the_experiences(tmp_path):
    corpus = Corpus(12_000, seed=11)
    queries = corpus.queries(6, seed=12)
    exps = corpus.experiences
    vectors = np.concatenate([v for _, v in corpus.vector_chunks()])
    truth = exact_truth(corpus, queries, KINDS, 10, tmp_path)
    assert not truth["cached"]
    for kind in KINDS:
        for i, (_, vec, topic) in enumerate(queries):
            where = make_filter(kind, corpus, i, topic).where
            keep = np.array([passes(e, where) for e in exps])
            assert abs(truth[kind]["share"][i] - keep.mean()) < 1e-9, kind
            sims = np.where(keep, vectors @ unit_rows(vec[None, :])[0], -np.inf)
            want = [r for r in np.argsort(-sims, kind="stable")[:10] if keep[r]]
            got = [r for r in truth[kind]["rows"][i] if r >= 0]
            assert got == want, kind
    again = exact_truth(corpus, queries, KINDS, 10, tmp_path)
    assert again["cached"]
    for kind in KINDS:
        assert np.array_equal(again[kind]["rows"], truth[kind]["rows"])
