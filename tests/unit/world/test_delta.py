"""The delta's structural gate, its schema, and the lenient item models."""

from __future__ import annotations

import json

import jsonschema
import pytest

from worldgraph.errors import DeltaValidationError
from worldgraph.kg.ids import edge_id, node_id, normalise_name, normalise_type, rule_id
from worldgraph.world.delta.parse import (
    EdgeItem,
    EntityItem,
    RuleItem,
    StateItem,
    clamp_confidence,
    load_delta_schema,
    parse_delta,
    parse_item,
    validate_delta,
)

CONTRACT_EXAMPLE = {
    "entities": [{"ref": "e1", "name": "brass key", "type": "item", "attributes": {"color": "brass"},
                  "evidence": "You see a brass key.", "confidence": 0.8}],
    "states": [{"ref": "s1", "name": "front door open", "type": "door_state", "entity_ref": "e2",
                "attributes": {}, "evidence": "...", "confidence": 0.7}],
    "edges": [{"relation": "containment", "src_ref": "e3", "dst_ref": "e1", "evidence": "...", "confidence": 0.9},
              {"relation": "transition", "src_ref": "s0", "dst_ref": "s1", "action": "open door"},
              {"relation": "episodic", "src_ref": "e1", "dst_ref": "scene"}],
    "rules": [{"condition": "the front door is locked", "outcome": "going outside fails",
               "linked_refs": ["e2"], "evidence": "...", "confidence": 0.6}],
}


def empty(**kw):
    return {"entities": [], "states": [], "edges": [], "rules": [], **kw}


def errors_of(obj, **kw) -> list[str]:
    with pytest.raises(DeltaValidationError) as exc:
        validate_delta(obj, **kw)
    return exc.value.errors


# ---------------------------------------------------------------- structure


def test_contract_example_passes_and_is_returned_as_is():
    assert validate_delta(CONTRACT_EXAMPLE) is CONTRACT_EXAMPLE


def test_json_text_is_parsed_first_including_a_fenced_block():
    text = json.dumps(CONTRACT_EXAMPLE, ensure_ascii=False)
    assert validate_delta(text) == CONTRACT_EXAMPLE
    assert validate_delta("```json\n" + text + "\n```") == CONTRACT_EXAMPLE
    assert validate_delta(text.encode("utf-8")) == CONTRACT_EXAMPLE


@pytest.mark.parametrize(
    "obj, expected",
    [
        ("not json", "$: not valid JSON"),
        ("[1, 2]", "$: must be a JSON object with arrays entities, states, edges, rules, got array"),
        (None, "got null"),
        (42, "got number"),
        ('{"entities": [], "states": [], "edges": [], "rules": [NaN]}', "$: not valid JSON: NaN is not JSON"),
        ("[" * 5000 + "]" * 5000, "$: not valid JSON"),
    ],
)
def test_not_an_object_is_rejected(obj, expected):
    errs = errors_of(obj)
    assert len(errs) == 1 and expected in errs[0], errs


def test_missing_and_non_array_keys_are_each_named():
    errs = errors_of({"entities": {}, "edges": "x", "rules": None})
    assert errs == [
        "entities: must be an array, got object",
        "states: missing (required array)",
        "edges: must be an array, got string",
        "rules: must be an array, got null",
    ]


def drops(obj, **kw) -> list[tuple[str, int, str]]:
    return [(d.kind, d.index, d.reason) for d in parse_delta(obj, **kw).dropped()]


def test_every_non_object_item_is_dropped_on_its_own_with_its_reason():
    parsed = parse_delta(empty(edges=[{}, {"relation": "episodic", "src_ref": "a", "dst_ref": "scene"}, "src -> dst"],
                               rules=[[1], None]))
    dropped = [(d.kind, d.index, d.reason) for d in parsed.dropped()]
    # an edge without a relation is told the relations there are, relation: fact among them
    assert dropped[0][2].startswith("relation: missing (required); src_ref: missing (required); dst_ref: missing "
                                    "(required). The relations allowed: containment (parent -> child")
    assert 'relation: fact with a snake_case predicate: {"relation": "fact", "predicate": "located_near"' in dropped[0][2]
    assert dropped == [
        ("edge", 0, dropped[0][2]),
        ("edge", 2, "must be an object, got string"),
        ("rule", 0, "must be an object, got array"),
        ("rule", 1, "must be an object, got null"),
    ]
    assert parsed.edges[1].item is not None and parsed.size() == 5


def test_a_string_holding_a_json_object_is_parsed():
    item = {"ref": "e1", "name": "key", "type": "item"}
    parsed = parse_delta(empty(entities=[json.dumps(item), " " + json.dumps(item)[:-1]]))
    assert parsed.entities[0].raw == item and parsed.entities[0].item.name == "key"
    assert parsed.entities[1].item is None and parsed.entities[1].reason.startswith("a string that is not a JSON object")
    assert parsed.to_dict()["entities"][0] == item


def test_too_many_items_rejects_the_whole_delta():
    delta = empty(entities=[{"name": f"n{i}", "type": "item"} for i in range(300)],
                  rules=[{"condition": "c", "outcome": "o"}] * 201)
    assert errors_of(delta) == ["$: 501 items in entities/states/edges/rules, more than the limit of 500 "
                                "(config max_delta_items)"]
    assert validate_delta(delta, max_items=501) is delta
    assert parse_delta(delta, max_items=501).size() == 501


def test_deep_nesting_drops_the_item_with_its_path():
    deep: object = "leaf"
    for _ in range(9):
        deep = {"x": deep}
    assert drops(empty(entities=[{"name": "a", "type": "b", "attributes": deep}, {"name": "c", "type": "d"}])) == [
        ("entity", 0, "entities[0].attributes.x.x.x.x.x.x.x.x: nested deeper than 8 levels")]
    shallow: object = "leaf"
    for _ in range(8):
        shallow = [shallow]
    assert drops(empty(entities=[{"name": "a", "type": "b", "attributes": shallow}])) == []


def test_long_strings_drop_the_item_with_their_path():
    assert drops(empty(edges=[{"relation": "episodic", "src_ref": "a", "dst_ref": "scene", "evidence": "x" * 4001}])) == [
        ("edge", 0, "edges[0].evidence: string of 4001 characters, longer than the limit of 4000")]
    assert drops(empty(edges=[{"relation": "episodic", "src_ref": "a", "dst_ref": "scene", "evidence": "x" * 4000}])) == []


def test_a_cyclic_python_value_is_dropped_not_looped_on():
    a: list = []
    a.append(a)
    [(kind, index, reason)] = drops(empty(entities=[{"name": "x", "type": "y", "attributes": {"a": a}}]))
    assert (kind, index) == ("entity", 0) and "nested deeper than 8 levels" in reason


def test_item_level_problems_are_not_structural():
    delta = empty(edges=[{"relation": "friendship", "src_ref": 1}], entities=[{"name": 7}])
    assert validate_delta(delta) is delta
    entity, edge = [d[2] for d in drops(delta)]
    assert entity == "name: must be a string, got number; type: missing (required)"
    # the reason teaches the fix: any other kind of fact is relation: fact with a predicate
    assert edge.startswith("unknown relation 'friendship'; allowed: containment (parent -> child")
    assert 'relation: fact with a snake_case predicate: {"relation": "fact", "predicate": "friendship"' in edge


def test_retract_is_a_lenient_flag():
    assert EdgeItem.model_validate({"relation": "containment", "src_ref": "a", "dst_ref": "b", "retract": "true"}).retract
    assert not EntityItem.model_validate({"name": "a", "type": "b", "retract": None}).retract
    assert StateItem.model_validate({"name": "a", "type": "b", "retract": "yes"}).retract


# ---------------------------------------------------------------- schema


def test_schema_loads_and_accepts_the_contract_example():
    schema = load_delta_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(CONTRACT_EXAMPLE, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(empty(edges=[{"relation": "friendship", "src_ref": "a", "dst_ref": "b"}]), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"entities": []}, schema)


def test_schema_takes_facts_with_a_snake_case_predicate():
    schema = load_delta_schema()
    fact = {"relation": "fact", "predicate": "works_at", "src_ref": "e1", "dst_ref": "e2", "single_valued": True}
    jsonschema.validate(empty(edges=[fact]), schema)
    for bad in ("Works At", "works-at", "_x", "x__y", ""):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(empty(edges=[dict(fact, predicate=bad)]), schema)
    strict = load_delta_schema(strict=True)  # no pattern there: the parser reads "Works At" as works_at
    jsonschema.validate(empty(edges=[dict(fact, predicate="Works At", action=None, retract=None, evidence=None,
                                          confidence=None)]), strict)
    item, _ = parse_item("edges", dict(fact, predicate="Works At"))
    assert (item.predicate, item.single_valued) == ("works_at", True)


def test_strict_schema_requires_every_property_and_forbids_free_objects():
    schema = load_delta_schema(strict=True)
    jsonschema.Draft202012Validator.check_schema(schema)

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "object":
                assert node["additionalProperties"] is False
                assert sorted(node["required"]) == sorted(node["properties"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    strict_item = {"ref": "e1", "name": "key", "type": "item", "attributes": [{"key": "color", "value": "red"}],
                   "retract": None, "evidence": None, "confidence": None}
    jsonschema.validate(empty(entities=[strict_item]), schema)
    item, _ = parse_item("entities", strict_item)
    assert item.attributes == {"color": "red"} and item.confidence == 0.5 and item.evidence == []


# ---------------------------------------------------------------- item models


@pytest.mark.parametrize("raw, expected", [
    (None, 0.5), (0.8, 0.8), (1.7, 1.0), (-3, 0.0), ("0.25", 0.25), ("80%", 0.8),
    ("high", 0.5), (True, 0.5), (float("nan"), 0.5), (float("inf"), 1.0), ([0.3], 0.5),
])
def test_confidence_is_clamped_with_a_default(raw, expected):
    assert clamp_confidence(raw) == expected
    assert EntityItem.model_validate({"name": "a", "type": "b", "confidence": raw}).confidence == expected


def test_attributes_keep_scalars_and_lists_and_say_why_others_went():
    item = EntityItem.model_validate({"name": "lamp", "type": "item", "attributes": {
        "lit": True, "watts": 40, "tags": ["old", 1, None], "pos": {"x": 1}, "nested": [[1]], "nan": float("nan")}})
    assert item.attributes == {"lit": True, "watts": 40, "tags": ["old", 1, None]}
    assert len(item.attribute_problems) == 3 and "attributes.pos" in item.attribute_problems[0]
    item = EntityItem.model_validate({"name": "lamp", "type": "item", "attributes": "bright"})
    assert item.attributes == {} and item.attribute_problems == ["attributes: must be an object, got string; ignored"]


@pytest.mark.parametrize("key, raw, reason", [
    ("entities", {"type": "item"}, "name: missing (required)"),
    ("entities", {"name": "key"}, "type: missing (required)"),
    ("entities", {"name": 7, "type": "item"}, "name: must be a string, got number"),
    ("entities", {"name": " ... ", "type": "item"}, "name: is empty"),
    ("states", {"name": "open", "type": "door_state", "entity_ref": ["e1"]}, "entity_ref: must be a string, got array"),
    ("edges", {"relation": "containment", "src_ref": "a"}, "dst_ref: missing (required)"),
    ("edges", {"relation": 3, "src_ref": "a", "dst_ref": "b"}, "relation: must be a string, got number"),
    ("rules", {"condition": "x"}, "outcome: missing (required)"),
    ("rules", {"condition": "x", "outcome": "y", "evidence": 5}, "evidence: must be a string or a list of strings"),
])
def test_bad_items_give_a_reason_naming_the_field(key, raw, reason):
    item, why = parse_item(key, raw)
    assert item is None and why is not None and why.startswith(reason), why


def test_lenient_coercions():
    edge = EdgeItem.model_validate({"relation": " Containment ", "src_ref": 1, "dst_ref": " e2 ", "action": ""})
    assert (edge.relation, edge.src_ref, edge.dst_ref, edge.action) == ("containment", "1", "e2", None)
    state = StateItem.model_validate({"name": "open", "type": "door_state", "entity_ref": "", "evidence": ["a", " ", "b"]})
    assert state.entity_ref is None and state.evidence == ["a", "b"]
    rule = RuleItem.model_validate({"condition": "c", "outcome": "o", "linked_refs": ["e1", 2, {"x": 1}]})
    assert rule.linked_refs == ["e1", "2"] and len(rule.linked_ref_problems) == 1


# ---------------------------------------------------------------- ids


def test_names_normalise():
    assert normalise_name("The  Brass Key.") == normalise_name("brass key") == "brass key"
    assert normalise_name("  An apple!! ") == "apple"
    assert normalise_name("theatre") == "theatre"
    assert normalise_name("Door #2") == "door #2"
    assert normalise_name("前门。") == "前门"
    assert normalise_type("Door State") == normalise_type("door-state") == "door_state"


def test_ids_are_deterministic_and_scoped():
    a = node_id("t", "env", "entity", "Item", "The Brass Key.")
    assert a == node_id("t", "env", "entity", "item", "brass key")
    assert a != node_id("t2", "env", "entity", "item", "brass key")
    assert a != node_id("t", "env", "state", "item", "brass key")
    assert edge_id("t", "e", "transition", "a", "b", "Open the door") == edge_id("t", "e", "transition", "a", "b", "open the door")  # noqa: E501
    assert edge_id("t", "e", "containment", "a", "b") != edge_id("t", "e", "containment", "a", "b", occurrence=1)
    assert rule_id("t", "e", "The door is locked.", "you fail") == rule_id("t", "e", "door is locked", "You fail")
