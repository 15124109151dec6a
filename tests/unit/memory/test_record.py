"""Recording, feedback and recall inputs: every bad input is refused with an error naming the
field and the rule, and leaves the store unchanged; good inputs keep what they were given."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from worldgraph import (
    AgentExperience,
    CanvasContext,
    EmbeddingDimensionError,
    InvalidInputError,
    NotFoundError,
    WorldModel,
)
from worldgraph.memory.embeddings import HashingEmbedder

T = "acme"


def exp(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"agent_id": "fin-1", "agent_role": "Finance", "task_type": "reconciliation",
                            "task_description": "Reconcile SKU-123 inventory", "outcome": "success"}
    base.update(kw)
    return base


@pytest.fixture
def wm(tmp_path: Path) -> Iterator[WorldModel]:
    w = WorldModel.open(tmp_path, embedder=HashingEmbedder(384))
    yield w
    w.close()


def counts(w: WorldModel, tenant: str = T) -> dict[str, Any]:
    s = w.stats(tenant)
    return {k: s[k] for k in ("episodes", "agents", "feedback", "canvases", "canvas_audits", "indexed")}


def refused(w: WorldModel, fn: Any, field: str, *rule_words: str, exc: type[Exception] = InvalidInputError,
            tenant: str = T) -> Exception:
    """``fn()`` raises ``exc`` naming ``field`` (and the rule words), and nothing is written."""
    before = counts(w, tenant)
    with pytest.raises(exc) as info:
        fn()
    err = info.value
    if isinstance(err, InvalidInputError):
        assert err.field == field, f"field {err.field!r} != {field!r} ({err})"
    else:
        assert field in str(err)
    for word in rule_words:
        assert word.lower() in str(err).lower(), f"{word!r} not in {err}"
    assert counts(w, tenant) == before
    return err


# ------------------------------------------------------------------------------------ bad input


def test_missing_required_field(wm: WorldModel) -> None:
    bad = exp()
    del bad["task_description"]
    refused(wm, lambda: wm.record_experience(T, bad), "experience.task_description", "required")


def test_outcome_must_be_success_or_failure(wm: WorldModel) -> None:
    refused(wm, lambda: wm.record_experience(T, exp(outcome="maybe")), "experience.outcome", "success", "failure")


def test_confidence_out_of_range(wm: WorldModel) -> None:
    err = refused(wm, lambda: wm.record_experience(T, exp(confidence=1.5)), "experience.confidence", "1")
    assert "less than or equal" in str(err)
    refused(wm, lambda: wm.record_experience(T, exp(confidence_score=-0.1)), "experience.confidence_score",
            "greater than or equal")


def test_success_contradicting_outcome(wm: WorldModel) -> None:
    refused(wm, lambda: wm.record_experience(T, exp(outcome="failure", success=True)), "experience",
            "success=True contradicts outcome='failure'")


@pytest.mark.parametrize("bad", ["a string", 42, ["a", "list"], None])
def test_experience_must_be_a_dict(wm: WorldModel, bad: Any) -> None:
    refused(wm, lambda: wm.record_experience(T, bad), "experience", "AgentExperience or a dict")


def test_one_bad_item_rejects_the_whole_batch(wm: WorldModel) -> None:
    batch = [exp(task_description=f"good {i}") for i in range(4)]
    batch[2]["outcome"] = "maybe"
    refused(wm, lambda: wm.record_experiences(T, batch), "experiences[2].outcome")
    batch[2] = exp(task_description="")
    refused(wm, lambda: wm.record_experiences(T, batch), "experiences[2].task_description", "must not be empty")
    batch[2] = "not an experience"
    refused(wm, lambda: wm.record_experiences(T, batch), "experiences[2]")
    assert wm.stats(T)["episodes"] == 0


@pytest.mark.parametrize("tenant", ["", "a/b", None, "../etc", " acme", "acme\n", 7])
def test_bad_tenant_ids(wm: WorldModel, tenant: Any) -> None:
    wm.record_experience(T, exp())  # something to compare with
    refused(wm, lambda: wm.record_experience(tenant, exp()), "tenant_id", "letters, digits")
    refused(wm, lambda: wm.recall_experiences(tenant, None, "reconcile"), "tenant_id")
    refused(wm, lambda: wm.get_agent_episodes(tenant, "fin-1"), "tenant_id")


def test_unknown_field(wm: WorldModel) -> None:
    refused(wm, lambda: wm.record_experience(T, exp(colour="blue")), "experience.colour", "not a known field")


@pytest.mark.parametrize("score", [1.5, -2, float("nan"), True, "high", None, float("inf")])
def test_feedback_score_must_be_a_number_in_range(wm: WorldModel, score: Any) -> None:
    eid = wm.record_experience(T, exp())
    refused(wm, lambda: wm.submit_feedback(T, eid, score), "score")
    assert wm.store.feedback_for(T, eid) == []


def test_feedback_for_unknown_or_foreign_episode(wm: WorldModel) -> None:
    mine = wm.record_experience(T, exp())
    theirs = wm.record_experience("other", exp())
    refused(wm, lambda: wm.submit_feedback(T, "no-such-episode", 0.5), "no-such-episode", exc=NotFoundError)
    refused(wm, lambda: wm.submit_feedback(T, theirs, 0.5), theirs, exc=NotFoundError)
    refused(wm, lambda: wm.submit_feedback("other", mine, 0.5), mine, exc=NotFoundError, tenant="other")
    assert wm.store.feedback_for("other", theirs) == [] and wm.store.feedback_for(T, mine) == []
    assert wm.stats("other")["feedback"] == 0


@pytest.mark.parametrize("query", ["", "   ", "\n\t", None, 5])
def test_empty_query(wm: WorldModel, query: Any) -> None:
    wm.record_experience(T, exp())
    refused(wm, lambda: wm.recall_experiences(T, "Finance", query), "query", "non-empty")


def test_malformed_date_range(wm: WorldModel) -> None:
    wm.record_experience(T, exp())
    refused(wm, lambda: wm.recall_experiences(T, None, "reconcile", options={
        "date_range": {"start": "2026-10-31", "end": "2026-10-01"}}), "options.date_range", "after")
    refused(wm, lambda: wm.recall_experiences(T, None, "reconcile", options={
        "date_range": {"start": "not a date", "end": "2026-10-01"}}), "options.date_range.start", "datetime")
    refused(wm, lambda: wm.recall_experiences(T, None, "reconcile", options={"date_range": {}}),
            "options.date_range", "start, end or both")
    refused(wm, lambda: wm.recall_experiences(T, None, "reconcile", options={"date_rnage": {}}),
            "options.date_rnage", "not a known field")


class WrongDimEmbedder:
    """Says 384 dimensions, returns 10."""

    name = "hashing-v1-384"
    dimensions = 384

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 10), dtype=np.float32)


def test_embedder_with_wrong_dimension_leaves_store_unchanged(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(384)) as w:
        w.record_experience(T, exp())
    with WorldModel.open(tmp_path, embedder=WrongDimEmbedder()) as w:
        err = refused(w, lambda: w.record_experience(T, exp(task_description="another")), "embedding",
                      "(1, 384)", "(1, 10)", exc=EmbeddingDimensionError)
        assert isinstance(err, InvalidInputError)
        refused(w, lambda: w.record_experiences(T, [exp(task_description=f"x{i}") for i in range(3)]),
                "embedding", exc=EmbeddingDimensionError)
        refused(w, lambda: w.recall_experiences(T, None, "reconcile"), "embedding", exc=EmbeddingDimensionError)
        assert w.stats(T)["episodes"] == 1


@pytest.mark.parametrize("limit", [0, -1, True, 2.5])
def test_bad_limit(wm: WorldModel, limit: Any) -> None:
    wm.record_experience(T, exp())
    refused(wm, lambda: wm.recall_experiences(T, None, "reconcile", limit=limit), "limit", "positive")
    refused(wm, lambda: wm.get_agent_episodes(T, "fin-1", limit=limit), "limit", "positive")


def test_duplicate_episode_id(wm: WorldModel) -> None:
    wm.record_experience(T, exp(episode_id="ep-1"))
    refused(wm, lambda: wm.record_experience(T, exp(episode_id="ep-1")), "experience.episode_id", "already recorded")
    refused(wm, lambda: wm.record_experiences(T, [exp(episode_id="ep-2"), exp(episode_id="ep-2")]),
            "experiences[1].episode_id", "twice")


# ------------------------------------------------------------------------------------ good input


def test_aliases_are_accepted(wm: WorldModel) -> None:
    eid = wm.record_experience(T, exp(approach="Weighted average costing", actions=["Query ERP", "Adjust"],
                                      confidence=0.9, error=None, input="Discrepancy between counts",
                                      violations=["rounding"], intervention=True, metacognitive={"uncertainty": "low"}))
    ep = wm.get_episode(T, eid)
    assert ep["approach_taken"] == "Weighted average costing"
    assert ep["actions_taken"] == ["Query ERP", "Adjust"]
    assert ep["confidence_score"] == 0.9
    assert ep["input_summary"] == "Discrepancy between counts"
    assert ep["constitutional_violations"] == ["rounding"]
    assert ep["human_intervention_required"] is True
    assert ep["metacognitive_insights"]["uncertainty"] == "low"
    assert ep["success"] is True
    eid2 = wm.record_experience(T, exp(outcome="failure", error="ERP timed out"))
    ep2 = wm.get_episode(T, eid2)
    assert ep2["error_message"] == "ERP timed out" and ep2["success"] is False
    # an AgentExperience object works as well as a dict
    eid3 = wm.record_experience(T, AgentExperience(**exp(task_description="object form")))
    assert wm.get_episode(T, eid3)["task_description"] == "object form"


def test_given_timestamp_is_kept(wm: WorldModel) -> None:
    eid = wm.record_experience(T, exp(timestamp="2020-01-01T00:00:00Z"))
    ep = wm.get_episode(T, eid)
    assert ep["timestamp"].startswith("2020-01-01T00:00:00")
    assert ep["ts"] == datetime(2020, 1, 1, tzinfo=timezone.utc).timestamp()
    naive = wm.record_experience(T, exp(timestamp="2021-06-01T12:30:00"))  # naive = UTC
    assert wm.get_episode(T, naive)["timestamp"].startswith("2021-06-01T12:30:00")
    res = wm.recall_experiences(T, None, "Reconcile SKU-123 inventory", limit=5,
                                options={"min_similarity": 0.0, "date_range": {"end": "2020-12-31"}})
    assert [r["episode_id"] for r in res] == [eid]
    assert res[0]["timestamp"].startswith("2020-01-01")


def test_canvas_aware_creation(wm: WorldModel) -> None:
    canvas = {"id": "canvas-456", "name": "Q3 revenue board", "components": [{"id": "chart-1", "kind": "bar"}],
              "state": {"filter": "EMEA"},
              "actions": [{"id": "act-1", "type": "create_component", "component_id": "chart-1",
                           "timestamp": "2026-01-02T10:00:00Z", "details": {"kind": "bar"}},
                          {"id": "act-2", "action_type": "update_component", "component_id": "chart-1",
                           "timestamp": "2026-01-02T10:05:00+00:00", "details": {"title": "Revenue"}}]}
    eid = wm.record_experience(T, exp(task_description="Create revenue chart", canvas_action_ids=["act-0"]),
                               canvas=canvas)
    ep = wm.get_episode(T, eid)
    assert ep["canvas_id"] == "canvas-456" and ep["canvas_name"] == "Q3 revenue board"
    assert ep["canvas_action_ids"] == ["act-0", "act-1", "act-2"]
    assert ep["canvas_snapshot"]["state"] == {"filter": "EMEA"}
    audits = wm.store.canvas_audits(T, eid)
    assert [(a["action_id"], a["action_type"], a["episode_id"], a["canvas_id"], a["agent_id"]) for a in audits] == [
        ("act-1", "create_component", eid, "canvas-456", "fin-1"),
        ("act-2", "update_component", eid, "canvas-456", "fin-1")]
    assert audits[0]["timestamp"].startswith("2026-01-02T10:00:00") and audits[0]["details"] == {"kind": "bar"}
    assert wm.stats(T)["canvas_audits"] == 2 and wm.stats(T)["canvases"] == 1

    res = wm.recall_experiences(T, "Finance", "Create revenue chart", options={
        "canvas_ids": ["canvas-456"], "include_canvas_context": True, "min_similarity": 0.0})
    assert len(res) == 1 and res[0]["episode_id"] == eid
    assert res[0]["canvas_actions"] == ["act-0", "act-1", "act-2"]
    assert res[0]["canvas_snapshot"] == CanvasContext.model_validate(canvas).serialize()
    assert [a["action_id"] for a in res[0]["canvas_action_details"]] == ["act-1", "act-2"]
    plain = wm.recall_experiences(T, "Finance", "Create revenue chart", options={"min_similarity": 0.0})
    assert "canvas_snapshot" not in plain[0]

    # the canvas given must agree with the experience's canvas_id
    refused(wm, lambda: wm.record_experience(T, exp(canvas_id="canvas-1"), canvas={"id": "canvas-2"}),
            "experience.canvas_id", "canvas-2")
    refused(wm, lambda: wm.record_experience(T, exp(), canvas={"id": "canvas-3", "actions": [{"id": "a"}]}),
            "canvas.actions.0.type")


def test_tenant_isolation(wm: WorldModel) -> None:
    a_ids = wm.record_experiences("tenant-a", [exp(task_description=f"Reconcile ledger {i}") for i in range(5)])
    wm.record_experience("tenant-b", exp(agent_id="other-agent", task_description="Plan a marketing campaign"))
    res = wm.recall_experiences("tenant-b", None, "Reconcile ledger 3", limit=10, options={"min_similarity": -1.0})
    assert res and not set(r["episode_id"] for r in res) & set(a_ids)
    with pytest.raises(NotFoundError) as unknown:  # another tenant's agent is unknown, and not named
        wm.get_agent_episodes("tenant-b", "fin-1")
    assert "other-agent" in str(unknown.value) and "tenant-a" not in str(unknown.value)
    assert len(wm.get_agent_episodes("tenant-a", "fin-1")) == 5
    with pytest.raises(NotFoundError):
        wm.get_episode("tenant-b", a_ids[0])
    assert wm.stats("tenant-b")["episodes"] == 1 and wm.stats("tenant-a")["episodes"] == 5
    assert wm.recall_experiences("tenant-c", None, "Reconcile ledger 3", options={"min_similarity": -1.0}) == []


def test_agent_episodes_newest_first_with_limit(wm: WorldModel) -> None:
    base = datetime(2026, 3, 1, tzinfo=timezone.utc)
    order = [3, 0, 4, 1, 2]  # recorded out of time order
    ids = {}
    for d in order:
        ids[d] = wm.record_experience(T, exp(task_description=f"day {d}", timestamp=(base + timedelta(days=d)).isoformat()))
    wm.record_experience(T, exp(agent_id="someone-else", timestamp=(base + timedelta(days=10)).isoformat()))
    got = wm.get_agent_episodes(T, "fin-1", limit=3)
    assert [g["episode_id"] for g in got] == [ids[4], ids[3], ids[2]]
    assert [g["task_description"] for g in wm.get_agent_episodes(T, "fin-1")] == [f"day {d}" for d in (4, 3, 2, 1, 0)]
    with pytest.raises(NotFoundError):
        wm.get_agent_episodes(T, "nobody")


def test_readiness_exact_ratios(wm: WorldModel) -> None:
    base = datetime(2026, 5, 1, tzinfo=timezone.utc)
    batch = []
    for i in range(10):
        batch.append(exp(task_description=f"task {i}", timestamp=(base + timedelta(hours=i)).isoformat(),
                         outcome="failure" if i in (0, 1) else "success",   # 8 / 10 succeed
                         intervention=i == 2,                                # 9 / 10 without intervention
                         violations=["privacy"] if i == 3 else [],           # 9 / 10 compliant
                         confidence=0.5 if i < 5 else 0.9))                   # mean 0.7
    wm.record_experiences(T, batch)
    r = wm.readiness(T, "fin-1", window=30)
    assert r["episodes"] == 10
    assert r["success_rate"] == 0.8
    assert r["zero_intervention_ratio"] == 0.9
    assert r["constitutional_compliance"] == 0.9
    assert r["mean_confidence"] == pytest.approx(0.7)
    assert r["score"] == pytest.approx((0.8 + 0.9 + 0.9 + 0.7) / 4)
    assert r["ready"] is False and r["failing"] == ["constitutional_compliance"]
    # the window takes the newest episodes only: hours 5..9 are all clean successes at 0.9
    w5 = wm.readiness(T, "fin-1", window=5)
    assert (w5["episodes"], w5["success_rate"], w5["zero_intervention_ratio"], w5["constitutional_compliance"],
            w5["mean_confidence"]) == (5, 1.0, 1.0, 1.0, 0.9)
    assert w5["failing"] == ["episodes"]  # fewer than readiness_min_episodes (10)
    with pytest.raises(NotFoundError):
        wm.readiness(T, "nobody")


def test_a_batch_is_recorded_with_the_cyclic_collector_paused(tmp_path: Path) -> None:
    """A batch's records are acyclic and freed by their reference counts: the cyclic collector is
    paused while a batch is checked, embedded and stored (bench/README.md, "Recording with the
    collector paused"), and on again after it, also after a batch that was refused."""
    import gc

    seen: list[bool] = []

    class Watching(HashingEmbedder):
        def embed(self, texts: list[str]) -> np.ndarray:
            seen.append(gc.isenabled())
            return super().embed(texts)

    w = WorldModel.open(tmp_path, embedder=Watching(384))
    try:
        assert gc.isenabled()
        w.embedder.embed(["a query, outside a record"])
        w.record_experiences(T, [exp(task_description=f"Reconcile SKU-{i}") for i in range(3)])
        assert gc.isenabled()
        with pytest.raises(InvalidInputError):
            w.record_experiences(T, [exp(), exp(outcome="maybe")])
        assert gc.isenabled()
        w.record_experience(T, exp())
        assert gc.isenabled()
    finally:
        w.close()
    assert seen[0] is True and seen[1:] and not any(seen[1:]), seen
