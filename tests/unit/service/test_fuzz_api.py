"""Hostile input through the public API: random JSON-like values (lone surrogates, NaN, deep
nesting, wrong types, huge ints) into record_experience, submit_feedback, recall options,
apply_delta and observe_round. Only the named error types may come out, and a call that raises
writes nothing."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worldgraph import WorldModel
from worldgraph.errors import DeltaValidationError, InvalidInputError, NotFoundError
from worldgraph.memory.embeddings import HashingEmbedder

T = "fuzz"
NAMED = (InvalidInputError, DeltaValidationError)
# FUZZ_EXAMPLES=1000 explores further with fresh random examples; CI replays a fixed set.
SETTINGS = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "100")), deadline=None,
                    derandomize=not os.environ.get("FUZZ_EXAMPLES"),
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# any code point, lone surrogates included (hypothesis leaves them out by default)
text = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()), max_size=12)
scalars = (st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
           | st.floats(allow_nan=True, allow_infinity=True) | text)
json_like = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                         max_leaves=12)


class Deep(list):  # type: ignore[type-arg]
    """A value nested ``depth`` containers deep, with a short repr (for failure reports)."""

    def __init__(self, depth: int) -> None:
        value: Any = "leaf"
        for i in range(depth - 1):
            value = {"k": value} if i % 2 else [value]
        super().__init__([value])
        self.depth = depth

    def __repr__(self) -> str:
        return f"Deep({self.depth})"


def deep(depth: int) -> Any:
    return Deep(depth)


odd = json_like | st.sampled_from([deep(40), deep(5000), "x" * 70_000, ["l"] * 1500, float("nan")])


# valid but unkind: any code point but surrogates (NUL, controls, RTL marks, astral planes)
good_text = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=16)  # type: ignore[arg-type]
good_json = st.recursive(st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats(allow_nan=False, allow_infinity=False)  # noqa: E501
                         | good_text, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(good_text, inner, max_size=3),
                         max_leaves=10)


def mostly(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Nine draws in ten from ``good``, the tenth anything hostile: with a dozen fields, about as
    many calls succeed (storing and indexing odd but valid values) as are refused."""
    return st.integers(0, 9).flatmap(lambda i: odd if i == 9 else good)


def experience() -> st.SearchStrategy[Any]:
    fields = {"agent_id": mostly(good_text), "task_type": mostly(good_text), "task_description": mostly(good_text),
              "outcome": mostly(st.sampled_from(["success", "failure"]))}
    optional = {"agent_role": mostly(good_text), "input_summary": mostly(good_text), "approach_taken": mostly(good_text),
                "actions_taken": mostly(st.lists(good_text, max_size=3)), "learnings": mostly(st.lists(good_text, max_size=3)),
                "constitutional_violations": mostly(st.lists(good_text, max_size=2)),
                "confidence": mostly(st.floats(0, 1)), "reasoning_chain": mostly(st.dictionaries(good_text, good_json, max_size=3)),  # noqa: E501
                "metacognitive_insights": mostly(st.dictionaries(good_text, good_json, max_size=3)),
                "timestamp": mostly(st.datetimes().map(lambda d: d.isoformat())), "canvas_id": mostly(good_text),
                "extra field": odd}
    return mostly(st.fixed_dictionaries(fields, optional=optional))


def canvas() -> st.SearchStrategy[Any]:
    action = st.fixed_dictionaries({"id": mostly(good_text), "type": mostly(good_text)},
                                   optional={"details": mostly(st.dictionaries(good_text, good_json, max_size=3)),
                                             "timestamp": mostly(st.datetimes().map(lambda d: d.isoformat()))})
    return st.none() | mostly(st.fixed_dictionaries(
        {"id": mostly(good_text)}, optional={"name": mostly(good_text), "components": mostly(st.lists(good_json, max_size=2)),
                                            "state": mostly(st.dictionaries(good_text, good_json, max_size=3)),
                                            "actions": st.lists(action, max_size=2)}))


@pytest.fixture(scope="module")
def wm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorldModel]:
    model = WorldModel.open(tmp_path_factory.mktemp("fuzz") / "data", embedder=HashingEmbedder(64))
    model.record_experience(T, {"agent_id": "a", "task_type": "t", "task_description": "a known episode",
                                "outcome": "success", "episode_id": "known"})
    yield model
    model.close()


def _snapshot(wm: WorldModel) -> dict[str, Any]:
    stats = wm.store.stats(T)
    return {**stats, "index": wm.index.count(T), "envs": wm.store.environments(T)}


def _call(wm: WorldModel, fn: Callable[[], Any], allowed: tuple[type[BaseException], ...] = NAMED) -> bool:
    """Run ``fn``; True if it returned. Anything but the allowed errors fails the test, and a
    call that raised must have written nothing."""
    before = _snapshot(wm)
    try:
        fn()
        return True
    except allowed as exc:
        assert getattr(exc, "field", None) is not None or isinstance(exc, (DeltaValidationError, NotFoundError)), exc
        str(exc).encode("utf-8")  # the message itself is printable (no lone surrogate in it)
        assert _snapshot(wm) == before, f"{type(exc).__name__} ({exc}) after a partial write"
        return False
    except Exception as exc:  # the short form: the input may be too deep to print
        raise AssertionError(f"unexpected {type(exc).__name__}: {str(exc)[:300]}") from None


@SETTINGS
@given(exp=experience(), can=canvas())
def test_record_experience(wm: WorldModel, exp: Any, can: Any) -> None:
    if _call(wm, lambda: wm.record_experience(T, exp, canvas=can)):
        assert wm.store.unindexed_episodes() == []


@SETTINGS
@given(episode=mostly(st.sampled_from(["known", "missing"])), score=mostly(st.floats(-1, 1)),
       notes=st.none() | mostly(good_text), category=st.none() | mostly(good_text), by=st.none() | mostly(good_text))
def test_submit_feedback(wm: WorldModel, episode: Any, score: Any, notes: Any, category: Any, by: Any) -> None:
    _call(wm, lambda: wm.submit_feedback(T, episode, score, notes=notes, category=category, created_by=by),
          NAMED + (NotFoundError,))


@SETTINGS
@given(query=mostly(good_text), role=st.none() | mostly(good_text), limit=mostly(st.integers(1, 50)),
       options=st.none() | mostly(st.fixed_dictionaries({}, optional={
           k: odd for k in ("limit", "min_similarity", "agent_role", "agent_id", "canvas_ids", "date_range",
                            "success_only", "min_feedback_score", "feedback_category", "include_canvas_context",
                            "include_neighborhood", "hybrid", "extract_filters")})))
def test_recall_options(wm: WorldModel, query: Any, role: Any, limit: Any, options: Any) -> None:
    if isinstance(limit, float) and not math.isfinite(limit):
        limit = 5
    _call(wm, lambda: wm.recall_experiences(T, role, query, limit=limit, options=options))


item = st.dictionaries(st.sampled_from(["ref", "name", "type", "attributes", "evidence", "confidence", "entity_ref",
                                        "relation", "src_ref", "dst_ref", "action", "condition", "outcome",
                                        "linked_refs", "retract"]) | text, mostly(good_json), max_size=6)


@SETTINGS
@given(delta=mostly(st.fixed_dictionaries({k: mostly(st.lists(item, max_size=3))
                                           for k in ("entities", "states", "edges", "rules")})),
       scene=st.none() | mostly(good_text) | odd)
def test_apply_delta(wm: WorldModel, delta: Any, scene: Any) -> None:
    _call(wm, lambda: wm.apply_delta(T, "fuzzland", delta, scene=scene))


@SETTINGS
@given(rnd=mostly(st.fixed_dictionaries({"round": mostly(st.integers(0, 10**6))}, optional={
    k: mostly(good_text) for k in ("action", "before_observation", "after_observation", "feedback", "response",
                                   "agent_id")} | {"admissible_commands": mostly(st.lists(good_text, max_size=3))})),
       flagged=st.booleans())
def test_observe_round(wm: WorldModel, rnd: Any, flagged: bool) -> None:
    if flagged and isinstance(rnd, dict):
        rnd = {**rnd, "response": f"{rnd.get('response')}\nFLAG_CURIOSITY: yes"}
    _call(wm, lambda: wm.observe_round(T, "fuzzland", rnd))


def test_the_issue_examples_name_their_field(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        base = {"agent_id": "a", "task_type": "t", "task_description": "d", "outcome": "success"}
        with pytest.raises(InvalidInputError) as info:
            wm.record_experience(T, base, canvas={"id": "c", "state": deep(10_000)})
        assert info.value.field.startswith("canvas.state") and "max_nesting_depth" in info.value.rule
        # item-level salvage (docs/architecture.md, "World update"): the item is dropped with its reason, nothing merges
        report = wm.apply_delta(T, "env", {"entities": [{"name": "door\udc80", "type": "x"}], "states": [],
                                           "edges": [], "rules": []})
        assert [d.reason for d in report.dropped] == [
            "entities[0].name: not valid Unicode text (a lone surrogate); send UTF-8 text"]
        json.dumps(report.to_dict(), ensure_ascii=False).encode("utf-8")  # the report itself is sendable
        assert report.ok is False  # every item dropped: not ok
        with pytest.raises(NotFoundError):  # nothing merged: the environment was never made
            wm.world_graph(T, "env")
        with pytest.raises(InvalidInputError) as info:
            wm.record_experience(T, {**base, "confidence_score": float("nan")})
        assert info.value.field == "experience.confidence_score" and "finite" in info.value.rule
        assert wm.store.stats(T)["episodes"] == 0


@pytest.mark.parametrize("call, field", [
    (lambda wm: wm.record_experiences(T, None), "experiences"),
    (lambda wm: wm.record_experiences(T, 5), "experiences"),
    (lambda wm: wm.record_experiences(T, [{}], canvases={"a": 1}), "canvases"),
    (lambda wm: wm.get_agent_episodes(T, "a", limit=10**30), "limit"),
    (lambda wm: wm.readiness(T, "a", window="30"), "window"),
    (lambda wm: wm.update_world({"tenant_id": T, "id": "not-stored"}), "packet.env_name"),
    (lambda wm: wm.update_world({"tenant_id": T, "id": "x", "env_name": "../up", "created_at": "now"}), "env_name"),
])
def test_odd_arguments_name_their_field(wm: WorldModel, call: Callable[[WorldModel], Any], field: str) -> None:
    before = _snapshot(wm)
    with pytest.raises(InvalidInputError) as info:
        call(wm)
    assert info.value.field == field
    assert _snapshot(wm) == before
