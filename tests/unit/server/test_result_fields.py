"""Every field the library returns is declared by the REST record that carries it
(server/results.py): the records drop undeclared fields (so the OpenAPI document and the TypeScript
types are closed), and this test fails the day the library returns a field no record declares."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from worldgraph import RecallOptions, WorldModel
from worldgraph.bundled import examples_dir
from worldgraph.cli.common import read_json_items
from worldgraph.cli.replay import replay_log
from worldgraph.cli.samples import split_samples, store_ratings
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server import results
from worldgraph.server.lifecycle_routes import StatsOut


@pytest.fixture(scope="module")
def wm() -> Iterator[WorldModel]:
    with tempfile.TemporaryDirectory() as tmp, \
            WorldModel.open(Path(tmp), embedder=HashingEmbedder(384), world_background_updates=False) as model:
        samples = split_samples(list(read_json_items(str(examples_dir() / "experiences.jsonl"))), "samples")
        ids = model.record_experiences("t", samples.experiences, canvases=samples.canvases)
        store_ratings(model, "t", ids, samples)
        model.record_conversation("t", "chat-1", [{"speaker": "bob", "text": "Where is the key?"},
                                                  {"speaker": "amy", "text": "On the workbench."}])
        replay_log(model, "t", "Cottage", examples_dir() / "text_adventure.jsonl", use_shipped_deltas=True)
        yield model


def undeclared(record: dict[str, Any], model: type[BaseModel]) -> set[str]:
    return set(record) - set(model.model_fields)


def test_recall_results_with_every_option(wm: WorldModel) -> None:
    options = RecallOptions(min_similarity=-1.0, include_neighborhood=True, include_canvas_context=True)
    found = wm.recall_experiences("t", None, "reconcile the canvas-123 dashboard key workbench", 30, options)
    assert any(r.get("neighborhood") for r in found) and any(r.get("canvas_snapshot") for r in found)
    for r in found:
        assert undeclared(r, results.RecallResultOut) == set(), r["episode_id"]
        assert undeclared(r["score_breakdown"], results.ScoreBreakdown) == set()
        assert undeclared(r.get("neighborhood") or {}, results.NeighborhoodOut) == set()


def test_episodes_feedback_readiness_packets_reports_stats(wm: WorldModel) -> None:
    page = wm.list_episodes("t", limit=100)
    for e in page.items:
        assert undeclared(e, results.EpisodeOut) == set()
    first = page.items[0]
    assert undeclared(wm.submit_feedback("t", first["id"], 0.5), results.FeedbackOut) == set()
    assert undeclared(wm.readiness("t", first["agent_id"]), results.Readiness) == set()
    packet = wm.observe_round("t", "Attic", {"round": 1, "action": "look", "response": "FLAG_CURIOSITY: yes\n"
                                             "CURIOSITY_REASON: new room"})
    assert packet is not None and undeclared(dict(packet), results.ScenePacket) == set()
    report = wm.apply_delta("t", "Attic", {"entities": [{"name": "box", "type": "item"}], "states": [],
                                           "edges": [{"relation": "containment", "src_ref": "box", "dst_ref": "x"}],
                                           "rules": []}).to_dict()
    assert report["dropped"] and undeclared(report, results.MergeReportOut) == set()
    for item in report["dropped"] + report["notes"]:
        assert undeclared(item, results.DroppedItemOut) == set()
    with tempfile.TemporaryDirectory() as tmp:
        imported = wm.import_snapshot("t", wm.export("t", "Attic", tmp))
    assert undeclared(imported, results.ImportResult) == set()
    assert undeclared(wm.stats("t"), StatsOut) == set()
    assert undeclared(wm.world_graph("t", "Cottage"), results.WorldGraphOut) == set()


def test_forget_reports_of_every_kind(wm: WorldModel) -> None:
    """Every kind of forget (in a tenant of its own, the others' tests keep theirs)."""
    turns = [{"speaker": "bob", "text": "one"}, {"speaker": "amy", "text": "two"}, {"speaker": "bob", "text": "three"}]
    ids = wm.record_conversation("f", "chat", turns)
    wm.record_conversation("f", "other", turns)
    wm.apply_delta("f", "Attic", {"entities": [{"name": "box", "type": "item"}], "states": [], "edges": [],
                                  "rules": []})
    reports = [wm.forget_episode("f", ids[0]), wm.forget_agent("f", "amy"), wm.forget_session("f", "other"),
               wm.forget_environment("f", "Attic"), wm.forget_tenant("f")]
    for report in reports:
        out = report.to_dict()
        assert undeclared(out, results.ForgetReportOut) == set(), out["kind"]
        assert undeclared(out["removed"], results.ForgetCountsOut) == set(), out["kind"]
        results.ForgetReportOut.model_validate(out)  # the kind is one the type names


def test_world_hits_and_context(wm: WorldModel) -> None:
    assert wm.wait_for_updates(120)
    hits = [h.model_dump() for h in wm.search_world("t", "where is the brass key", k=30)]
    assert hits and any(h["neighbourhood"] for h in hits)
    for h in hits:
        assert undeclared(h, results.WorldHitOut) == set(), h
        for n in h["neighbourhood"]:
            assert undeclared(n, results.NeighbourOut) == set()
    ctx = wm.context("t", "where is the brass key").model_dump()
    assert ctx["citations"] and undeclared(ctx, results.ContextOut) == set()
    for c in ctx["citations"]:
        assert undeclared(c, results.CitationOut) == set()
