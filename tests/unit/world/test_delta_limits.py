"""A delta is parsed once, where it enters, with the configured limit (``max_delta_items``), and
that typed ParsedDelta is what the merge engine plans from: no second check with another limit.

Before, ``plan_merge`` and ``referenced`` re-parsed a raw delta with the default 500-item limit:
a delta of 550 items under ``max_delta_items=600`` passed the gate and then failed (plan_merge
raised, referenced silently found nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fake_openai import FakeOpenAI
from worldgraph import DeltaValidationError, WorldModel
from worldgraph.kg.records import GraphView
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.world.delta.parse import MAX_ITEMS, ParsedDelta, parse_delta
from worldgraph.world.merge.engine import plan_merge, referenced

ENV = "Warehouse"
N = 550  # above the default limit (500), below the configured one (600)


def big_delta(n: int = N) -> dict[str, list[dict[str, str]]]:
    return {"entities": [{"ref": f"e{i}", "name": f"crate {i}", "type": "item"} for i in range(n)],
            "states": [], "edges": [], "rules": []}


def test_the_default_limit_is_the_config_default() -> None:
    from worldgraph.config import WorldGraphConfig

    assert MAX_ITEMS == WorldGraphConfig().max_delta_items == 500


def test_the_engine_adds_no_limit_of_its_own() -> None:
    now = "2026-01-01T00:00:00.000000+00:00"
    plan, report = plan_merge(GraphView("t", ENV), big_delta(), None, now)
    assert len(plan.nodes) == N and report.dropped == []
    ids, _ = referenced("t", ENV, big_delta())
    assert len(ids) == N


def test_the_gate_applies_the_configured_limit_once() -> None:
    parsed = parse_delta(big_delta(), max_items=600)
    assert isinstance(parsed, ParsedDelta) and parsed.size() == N
    assert parse_delta(parsed, max_items=1) is parsed  # parsed once: a ParsedDelta passes through
    with pytest.raises(DeltaValidationError, match="more than the limit of 500"):
        parse_delta(big_delta())


def test_apply_delta_honours_max_delta_items_above_500(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64), max_delta_items=600) as wm:
        report = wm.apply_delta("t", ENV, big_delta())
        assert report.ok and report.dropped == [] and len(wm.world_graph("t", ENV)["nodes"]) == N
        with pytest.raises(DeltaValidationError, match=r"601 items .* limit of 600 \(config max_delta_items\)"):
            wm.apply_delta("t", ENV, big_delta(601))


def test_an_extracted_delta_above_500_merges_under_max_delta_items_600(tmp_path: Path,
                                                                          fake_openai: FakeOpenAI) -> None:
    fake_openai.default = json.dumps(big_delta())
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64), max_delta_items=600) as wm:
        packet = wm.observe_round("t", ENV, {"round": 1, "action": "look", "after_observation": "Crates.",
                                             "response": "FLAG_CURIOSITY: yes\nCURIOSITY_REASON: crates"})
        assert packet is not None
        report = wm.update_world(packet)
        assert report.ok, report.error
        assert len(wm.world_graph("t", ENV)["nodes"]) == N
