"""The stores' JSON codec: orjson where it writes what json.dumps would, json where it would not."""

from __future__ import annotations

import enum
import json
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from worldgraph.kg.codec import dumps, loads


def _reference(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20)
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                             max_size=4), max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_same_bytes_as_json_without_floats(value: Any) -> None:
    assert dumps(value) == _reference(value)
    assert loads(dumps(value)) == value


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.floats(allow_nan=False, allow_infinity=False) | _scalars,
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=30))
def test_same_value_as_json_with_floats(value: Any) -> None:
    assert json.loads(dumps(value)) == json.loads(_reference(value))


class Colour(str, enum.Enum):
    RED = "red"


def test_what_orjson_refuses_is_written_by_json() -> None:
    for value in ({"n": 2**70}, {1: "int key", 2: None}, {"s": "lone \udc80 surrogate"}, {"c": Colour.RED},
                  {"f": np.float64(0.25)}, [{"é": "ü"}, "日本"]):
        assert dumps(value) == _reference(value), value
    assert loads(dumps({"n": 2**70})) == {"n": 2**70}


def test_values_json_cannot_write_still_fail() -> None:
    import datetime

    import pytest

    for value in (datetime.datetime(2026, 1, 1), {"a": np.array([1.0])}, object()):
        with pytest.raises(TypeError):
            dumps(value)
