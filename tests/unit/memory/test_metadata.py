"""The metadata filter (memory/metadata.py): JSON semantics of every condition, and the rule the
index relies on: every episode a filter matches carries the terms the filter pushes down."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worldgraph import InvalidInputError
from worldgraph.memory.metadata import check_metadata, filter_terms, matches, metadata_terms, parse_filter

META = {"color": "red", "score": 4.5, "n": 3, "ok": True, "tags": ["a", "b"], "user": {"id": "u1", "level": 2},
        "none": None, "date": "2024-05-01"}


@pytest.mark.parametrize("spec, expected", [
    ({"color": "red"}, True),
    ({"color": "blue"}, False),
    ({"n": 3.0}, True),  # numbers by value
    ({"ok": 1}, False),  # a boolean is not a number
    ({"n": True}, False),
    ({"tags": ["a", "b"]}, True),  # lists element by element
    ({"tags": ["b", "a"]}, False),
    ({"tags": "a"}, False),
    ({"user": {"id": "u1"}}, True),  # a nested object matches partially
    ({"user": {"id": "u2"}}, False),
    ({"user": {"id": "u1", "level": {"$gte": 2}}}, True),
    ({"missing": None}, True),  # a missing field equals null
    ({"none": None}, True),
    ({"score": {"$gt": 3.2}}, True),
    ({"score": {"$gt": 4.5}}, False),
    ({"score": {"$gte": 4.5, "$lt": 5}}, True),
    ({"score": {"$lte": "9"}}, False),  # a number and a string never compare
    ({"date": {"$gte": "2024-01-01"}}, True),  # strings compare as strings (ISO dates)
    ({"color": {"$ne": "blue"}}, True),
    ({"missing": {"$ne": "x"}}, True),
    ({"color": {"$in": ["red", "green"]}}, True),
    ({"color": {"$nin": ["red", "green"]}}, False),
    ({"missing": {"$exists": False}}, True),
    ({"color": {"$exists": True}, "n": {"$eq": 3}}, True),
    ({"color": "red", "n": 4}, False),  # all conditions hold
    ({}, True),
])
def test_conditions(spec: dict[str, Any], expected: bool) -> None:
    assert matches(META, spec) is expected
    flt = parse_filter(spec)
    assert flt is None or flt.matches(META) is expected


@pytest.mark.parametrize("spec, field", [
    ("red", "metadata"),
    ({"$gt": 3}, "metadata.$gt"),
    ({"score": {"$between": [1, 2]}}, "metadata.score.$between"),
    ({"score": {"$gt": 1, "x": 2}}, "metadata.score.x"),
    ({"score": {"$in": "a"}}, "metadata.score.$in"),
    ({"score": {"$exists": 1}}, "metadata.score.$exists"),
    ({"score": {"$gt": [1]}}, "metadata.score.$gt"),
    ({"score": float("nan")}, "metadata.score"),
    ({"": 1}, "metadata"),
])
def test_bad_filters_name_the_part(spec: Any, field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        parse_filter(spec)
    assert err.value.field == field


@pytest.mark.parametrize("value, field", [
    ([1], "metadata"),
    ({"a": {1: "x"}}, "metadata.a"),
    ({"a": [1, {"b": float("inf")}]}, "metadata.a[1].b"),
    ({"a": {"b": object()}}, "metadata.a.b"),
])
def test_metadata_is_json(value: Any, field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        check_metadata(value)
    assert err.value.field == field


def test_terms_of_leaves_and_list_elements() -> None:
    terms = metadata_terms({"a": "x", "b": [1, 2.0, {"c": 1}], "d": {"e": True}, "f": None, "g": "y" * 600})
    assert terms == ['["a","x"]', '["b",1]', '["b",2]', '["d","e",true]']
    assert filter_terms({"b": 2, "d": {"e": {"$eq": True}}, "a": {"$in": ["x", "z"]}, "n": {"$gt": 1}}) == (
        ['["b",2]', '["d","e",true]'], [['["a","x"]', '["a","z"]']])


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from([1.0, 2.5, -0.5]),
                         st.sampled_from(["a", "b", "", "é"]))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)), max_leaves=8)
conditions = st.one_of(
    json_values,
    st.dictionaries(st.sampled_from(["$eq", "$ne", "$in", "$nin"]), json_values.map(lambda v: [v]), min_size=1),
    st.dictionaries(st.sampled_from(["$gt", "$lte"]), st.one_of(st.integers(-5, 5), st.sampled_from(["a", "b"])),
                    min_size=1))


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), json_values, max_size=3),
       st.dictionaries(st.sampled_from(["a", "b", "c"]), conditions, max_size=2))
def test_a_match_carries_the_pushed_terms(metadata: dict[str, Any], spec: dict[str, Any]) -> None:
    """What the index search requires (every term, one term of each group) never drops a match."""
    flt = parse_filter(spec)
    if flt is None or not flt.matches(metadata):
        return
    have = set(metadata_terms(metadata))
    assert set(flt.terms) <= have
    assert all(have & set(group) for group in flt.any_terms)
