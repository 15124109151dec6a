"""The canonical snapshot: byte-stable round trips, contract keys, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worldgraph.errors import InvalidInputError, NotFoundError
from worldgraph.export.snapshot import read_snapshot, snapshot_dir, write_snapshot
from worldgraph.kg.records import EDGE_KEYS, META_KEYS, NODE_KEYS, RULE_KEYS, SCENE_KEYS, GraphView
from worldgraph.world.merge.engine import apply_plan_to_view, plan_merge, view_as_graph

FILES = ["edges.jsonl", "meta.json", "nodes.jsonl", "rules.jsonl", "scenes.jsonl"]


def built_graph() -> dict:
    """A small graph made by the merge engine, with unicode, a closed edge and a scene."""
    view = GraphView(tenant_id="acme", env_name="JerichoEnv905")
    deltas = [
        {"entities": [{"ref": "t", "name": "桌子", "type": "furniture"},
                      {"ref": "k", "name": "brass key", "type": "item", "attributes": {"note": "émoji 🔑"}}],
         "states": [], "edges": [{"relation": "containment", "src_ref": "t", "dst_ref": "k"},
                                 {"relation": "episodic", "src_ref": "k", "dst_ref": "scene"}],
         "rules": [{"condition": "门是锁着的", "outcome": "不能出去", "linked_refs": ["t"]}]},
        {"entities": [{"ref": "p", "name": "player", "type": "character"}], "states": [],
         "edges": [{"relation": "containment", "src_ref": "p", "dst_ref": "item:brass key"}], "rules": []},
    ]
    for i, d in enumerate(deltas, start=1):
        scene = {"id": f"scene-{i}", "tenant_id": "acme", "status": "running", "env_name": "JerichoEnv905",
                 "current_round": i, "trigger_reason": "首次进入客厅", "action": "look",
                 "admissible_commands": ["look", "take key"]}
        plan, _ = plan_merge(view, d, scene, f"2026-01-0{i}T00:00:00.000000+00:00")
        view = apply_plan_to_view(view, plan)
    return view_as_graph(view)


def read_all(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_snapshot_dir_layout(tmp_path):
    assert snapshot_dir(tmp_path, "default", "general", "JerichoEnv905") == \
        tmp_path / "default" / "general" / "world_model_graph" / "JerichoEnv905"


def test_write_read_write_gives_identical_bytes(tmp_path):
    first = write_snapshot(built_graph(), tmp_path / "a")
    assert sorted(p.name for p in first.iterdir()) == FILES  # no temp files left behind
    again = write_snapshot(read_snapshot(first), tmp_path / "b")
    assert read_all(first) == read_all(again)
    # and a third time, over the existing files
    write_snapshot(read_snapshot(again), again)
    assert read_all(first) == read_all(again)


def test_lines_are_canonical_sorted_and_unicode_unescaped(tmp_path):
    out = write_snapshot(built_graph(), tmp_path)
    text = (out / "nodes.jsonl").read_text("utf-8")
    assert "桌子" in text and "🔑" in text and "\\u" not in text
    assert text.endswith("\n") and not text.endswith("\n\n")
    lines = text.splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    assert ids == sorted(ids) and len(ids) == 3
    for line in lines:
        obj = json.loads(line)
        assert line == json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    assert "门是锁着的" in (out / "rules.jsonl").read_text("utf-8")


def test_every_record_has_the_contract_keys(tmp_path):
    graph = read_snapshot(write_snapshot(built_graph(), tmp_path))
    for key, keys in (("nodes", NODE_KEYS), ("edges", EDGE_KEYS), ("rules", RULE_KEYS), ("scenes", SCENE_KEYS)):
        assert graph[key], key
        for rec in graph[key]:
            assert set(keys) <= set(rec), (key, set(keys) - set(rec))
    assert set(META_KEYS) <= set(graph["meta"])
    assert graph["meta"]["counts"] == {"nodes": 3, "edges": 3, "rules": 1, "scenes": 2}
    assert graph["meta"]["graph_version"] == 2 and graph["meta"]["last_trigger_reason"] == "首次进入客厅"
    closed = [e for e in graph["edges"] if e["valid_to"] is not None]
    assert len(closed) == 1 and closed[0]["relation"] == "containment"
    meta_text = (tmp_path / "meta.json").read_text("utf-8")
    assert meta_text.startswith('{\n  "app_name": "general"') and "首次进入客厅" in meta_text


def test_missing_optional_keys_get_defaults_so_stores_that_drop_nulls_export_the_same(tmp_path):
    full = built_graph()
    sparse = json.loads(json.dumps(full))
    for part in ("nodes", "edges", "rules", "scenes"):
        for rec in sparse[part]:
            for k in [k for k, v in rec.items() if v is None]:
                del rec[k]  # what a Neo4j store returns: null properties do not exist
    write_snapshot(full, tmp_path / "full")
    write_snapshot(sparse, tmp_path / "sparse")
    assert read_all(tmp_path / "full") == read_all(tmp_path / "sparse")
    minimal = {"nodes": [{"id": "n1", "kind": "entity", "type": "item", "name": "key"}], "edges": [], "rules": [],
               "scenes": [{"id": "s1"}], "meta": None}
    graph = read_snapshot(write_snapshot(minimal, tmp_path / "env-x"))
    assert graph["nodes"][0]["valid_to"] is None and graph["nodes"][0]["evidence"] == []
    assert graph["scenes"][0]["status"] == "pending" and graph["scenes"][0]["admissible_commands"] == []
    assert graph["meta"]["env_name"] == "env-x" and graph["meta"]["graph_version"] == 0


def test_bad_lines_name_the_file_and_line(tmp_path):
    out = write_snapshot(built_graph(), tmp_path)
    lines = (out / "edges.jsonl").read_text("utf-8").splitlines()
    (out / "edges.jsonl").write_text(lines[0] + "\n" + lines[1][:-5] + "\n", "utf-8")
    with pytest.raises(InvalidInputError, match=r"^edges.jsonl line 2: not valid JSON"):
        read_snapshot(out)
    (out / "edges.jsonl").write_text(lines[0] + "\n" + '{"id": "x", "relation": "containment"}\n', "utf-8")
    with pytest.raises(InvalidInputError, match=r"^edges.jsonl line 2: missing src_id, dst_id"):
        read_snapshot(out)
    (out / "edges.jsonl").write_text(lines[0] + "\n" + lines[0] + "\n", "utf-8")
    with pytest.raises(InvalidInputError, match=r"^edges.jsonl line 2: duplicate id .* \(first on line 1\)"):
        read_snapshot(out)
    (out / "edges.jsonl").unlink()
    with pytest.raises(NotFoundError, match="edges.jsonl"):
        read_snapshot(out)
    with pytest.raises(NotFoundError):
        read_snapshot(tmp_path / "nowhere")


def test_a_failed_write_leaves_the_old_snapshot(tmp_path):
    out = write_snapshot(built_graph(), tmp_path)
    before = read_all(out)
    bad = built_graph()
    bad["rules"][0]["confidence"] = float("nan")
    with pytest.raises(InvalidInputError):
        write_snapshot(bad, out)
    bad = built_graph()
    del bad["nodes"][0]["name"]
    with pytest.raises(InvalidInputError, match=r"nodes\[0\]: missing name"):
        write_snapshot(bad, out)
    assert read_all(out) == before
