"""The speaker-free query's embedding runs beside the query's own (conversation.speaker_free_ahead):
both model runs at once, the same results as one after the other, nothing left running, and an
error of the early run raised only where its vector is used."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.unit.memory.test_scoring import VectorEmbedder, unit
from worldgraph import WorldModel
from worldgraph.memory.recall import conversation

QUERY, FREE = "what did Melanie paint", "what did paint"
VECS = {"Melanie paint": [1.0, 0.0, 0.0, 0.0], "paint": [0.0, 0.0, 1.0, 0.0], "alpha": unit(0.8, 1),
        "bravo": unit(0.5, 2), "charlie": unit(0.6, 3)}


class GatedEmbedder(VectorEmbedder):
    """Hand-made vectors; the query and its speaker-free text each wait at ``gate`` (if set) until
    the other has started, and every run is logged with its thread, start and end."""

    def __init__(self) -> None:
        super().__init__(VECS)
        self.gate: threading.Barrier | None = None
        self.fail: str | None = None
        self.free_started = threading.Event()  # the speaker-free run has begun (it can no longer be cancelled)
        self.query_waits_free = False  # the query's own run waits for it: it is surely running
        self.runs: list[tuple[str, str, float, float]] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        start = time.monotonic()
        if texts[0] == FREE:
            self.free_started.set()
        elif texts[0] == QUERY and self.query_waits_free:
            assert self.free_started.wait(10), "the speaker-free run never started"
        if self.gate is not None and texts[0] in (QUERY, FREE):
            self.gate.wait()  # BrokenBarrierError after its timeout: the two did not run at once
        if texts[0] == FREE:
            time.sleep(0.05)
            if self.fail == FREE:
                raise RuntimeError("the model failed on the speaker-free text")
        out = super().embed(texts)
        self.runs.append((texts[0], threading.current_thread().name, start, time.monotonic()))
        return out


@pytest.fixture
def recorded(tmp_path: Path) -> Any:
    emb = GatedEmbedder()
    wm = WorldModel.open(tmp_path, embedder=emb)
    for n, (who, text) in enumerate([("Melanie", "alpha"), ("Melanie", "bravo"), ("Caroline", "charlie")]):
        wm.record_conversation("t", f"s{n}", [{"speaker": who, "text": text, "timestamp": f"2023-05-0{n + 1}T10:00:00Z"}])
    emb.runs.clear()
    yield wm, emb
    wm.close()


def _shown(res: list[Any]) -> list[tuple[str, float, dict[str, float]]]:
    return [(r["episode_id"], r["relevance_score"], r["score_breakdown"]) for r in res]


def test_the_two_embeddings_run_at_once_with_the_same_results(recorded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    wm, emb = recorded
    emb.gate = threading.Barrier(2, timeout=10)
    together = wm.recall_experiences("t", None, QUERY, limit=3)
    assert sorted(r[0] for r in emb.runs) == [QUERY, FREE]  # each embedded once
    assert len({r[1] for r in emb.runs}) == 2  # on two threads
    emb.gate = None
    monkeypatch.setattr(conversation, "AHEAD_MAX_AGENTS", 1)  # two agents: no guess, one run after the other
    emb.runs.clear()
    apart = wm.recall_experiences("t", None, QUERY, limit=3)
    assert [r[0] for r in emb.runs] == [QUERY, FREE] and emb.runs[1][2] >= emb.runs[0][3]
    assert _shown(together) == _shown(apart)
    assert together[0]["score_breakdown"]["vector_cosine"] == pytest.approx(0.866, abs=1e-3)  # bravo, speaker-free


def test_a_query_that_names_no_speaker_starts_nothing(recorded: Any) -> None:
    wm, emb = recorded
    wm.recall_experiences("t", None, "what did they paint", limit=3)
    assert [r[0] for r in emb.runs] == ["what did they paint"]


def test_a_wrong_guess_is_waited_for_and_not_used(recorded: Any) -> None:
    # Filtered to Melanie's memories, the candidates' speakers are all named: no speaker match, so
    # the early embedding (guessed from the tenant's two agents) is not used; it is finished, not
    # left running, when recall returns; and its error is not this recall's. The query's own run
    # waits until the early one has begun: a run still queued would be cancelled, not waited for.
    wm, emb = recorded
    emb.query_waits_free = True
    emb.fail = FREE
    res = wm.recall_experiences("t", None, QUERY, limit=3, options={"agent_id": "Melanie"})
    assert [r[0] for r in emb.runs] == [QUERY]  # the early run failed (after its 50 ms): never logged
    assert {r["task_description"] for r in res} == {"alpha", "bravo"}
    assert all(r["score_breakdown"]["speaker_part"] == 0 for r in res)
    assert all(r["score_breakdown"]["vector_cosine"] == pytest.approx(r["semantic_score"], abs=1e-6) for r in res)
    emb.fail = None
    emb.runs.clear()
    emb.free_started.clear()
    wm.recall_experiences("t", None, QUERY, limit=3, options={"agent_id": "Melanie"})
    assert sorted(r[0] for r in emb.runs) == [QUERY, FREE]  # the early run (50 ms) had ended by the return


def test_an_error_of_the_early_run_is_raised_where_its_vector_is_used(recorded: Any) -> None:
    wm, emb = recorded
    emb.fail = FREE
    with pytest.raises(RuntimeError, match="speaker-free text"):
        wm.recall_experiences("t", None, QUERY, limit=3)
