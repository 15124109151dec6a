"""An episode's metadata: a JSON object the caller stores with it, kept verbatim, and the filter
that selects episodes by its fields in recall and listing (docs/architecture.md "Metadata").

A filter is a dict of conditions on top-level fields, all of which must hold:

- a scalar, a list or ``None``: the field equals it as JSON values compare (``1 == 1.0``, ``true``
  is not ``1``, lists element by element; a missing field equals ``None``);
- a dict without ``$`` keys: the field is an object whose fields meet these conditions (a
  partial match, recursively);
- a dict of operators: ``$eq``, ``$ne`` (a missing field is not equal), ``$gt`` / ``$gte`` /
  ``$lt`` / ``$lte`` (numbers with numbers, strings with strings; other pairs never match),
  ``$in`` / ``$nin`` (a list of values), ``$exists`` (true or false); all must hold.

The filter is checked exactly on the records of the system of record. What part of it every
matching episode must carry as index *terms* (``filter_terms``) is also pushed into the index
search, so a filter that few episodes pass still finds its nearest ones: each scalar leaf of the
metadata (and each scalar element of a list) is one term, ``[path..., value]`` as compact JSON.
Equality and ``$in`` are pushed; ``$ne``, ``$nin``, the ranges and ``$exists`` are checked on the
search's candidates only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from worldgraph.errors import InvalidInputError

__all__ = ["OPERATORS", "TERM_MAX_BYTES", "MetadataFilter", "check_metadata", "filter_terms", "matches",
           "metadata_terms", "parse_filter"]

OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists"})
_RANGES = {"$gt": lambda a, b: a > b, "$gte": lambda a, b: a >= b, "$lt": lambda a, b: a < b,
           "$lte": lambda a, b: a <= b}
# A leaf longer than this is not an index term (a long text is not what a filter names); a filter
# on such a value is checked on the candidates only.
TERM_MAX_BYTES = 512


def check_metadata(value: Any, field: str = "metadata") -> dict[str, Any]:
    """``value`` if it is a JSON object (string keys; values strings, finite numbers, booleans,
    null, lists and objects of them), else InvalidInputError naming the path that is not."""
    if not isinstance(value, dict):
        raise InvalidInputError(field, f"must be a JSON object (a dict), got {type(value).__name__}")
    _check_json(value, field)
    return value


def _check_json(value: Any, path: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInputError(path, f"has a key that is not a string: {key!r}")
            _check_json(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(item, f"{path}[{i}]")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(path, f"must be a finite number, got {value!r}")
    elif value is not None and not isinstance(value, (str, int, bool)):
        raise InvalidInputError(path, f"must be a JSON value (string, number, boolean, null, list or object), "
                                      f"got {type(value).__name__}")


@dataclass(frozen=True)
class MetadataFilter:
    """A checked filter (``parse_filter``): ``matches`` decides, ``terms`` / ``any_terms`` are what
    the index search may require (every term of ``terms``, one term of each ``any_terms`` group)."""

    spec: dict[str, Any]
    terms: tuple[str, ...]
    any_terms: tuple[tuple[str, ...], ...]

    def matches(self, metadata: Any) -> bool:
        return matches(metadata, self.spec)


def parse_filter(spec: Any, field: str = "metadata") -> MetadataFilter | None:
    """The filter ``spec`` checked (None or ``{}``: no filter); InvalidInputError names the part
    that is not a condition."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise InvalidInputError(field, f"must be a dict of field conditions, got {type(spec).__name__}")
    _check_conditions(spec, field)
    if not spec:
        return None
    terms, any_terms = filter_terms(spec)
    return MetadataFilter(spec, tuple(terms), tuple(tuple(g) for g in any_terms))


def _check_conditions(spec: dict[str, Any], path: str) -> None:
    for key, cond in spec.items():
        if not isinstance(key, str) or not key:
            raise InvalidInputError(path, f"field names must be non-empty strings, got {key!r}")
        if key.startswith("$"):
            raise InvalidInputError(f"{path}.{key}", f"an operator must be inside a field's condition, "
                                                     f"e.g. {{'score': {{'{key}': ...}}}}")
        _check_condition(cond, f"{path}.{key}")


def _check_condition(cond: Any, path: str) -> None:
    if isinstance(cond, dict) and any(isinstance(k, str) and k.startswith("$") for k in cond):
        for op, arg in cond.items():
            if op not in OPERATORS:
                raise InvalidInputError(f"{path}.{op}", f"is not an operator; use one of {sorted(OPERATORS)} "
                                                        "(and no field names beside them)")
            if op in ("$in", "$nin"):
                if not isinstance(arg, list):
                    raise InvalidInputError(f"{path}.{op}", f"takes a list of values, got {type(arg).__name__}")
                _check_json(arg, f"{path}.{op}")
            elif op == "$exists":
                if not isinstance(arg, bool):
                    raise InvalidInputError(f"{path}.{op}", "takes true or false")
            elif op in _RANGES:
                if isinstance(arg, bool) or not isinstance(arg, (int, float, str)):
                    raise InvalidInputError(f"{path}.{op}", "takes a number or a string")
                _check_json(arg, f"{path}.{op}")
            else:
                _check_json(arg, f"{path}.{op}")
    elif isinstance(cond, dict):
        _check_conditions(cond, path)
    else:
        _check_json(cond, path)


# ------------------------------------------------------------------------------------ matching
def matches(metadata: Any, spec: dict[str, Any]) -> bool:
    """Whether ``metadata`` (an episode's, ``{}`` when it has none) meets every condition of ``spec``."""
    obj = metadata if isinstance(metadata, dict) else {}
    return all(_meets(obj.get(key), key in obj, cond) for key, cond in spec.items())


def _meets(value: Any, present: bool, cond: Any) -> bool:
    if isinstance(cond, dict) and any(k.startswith("$") for k in cond):
        return all(_operator(value, present, op, arg) for op, arg in cond.items())
    if isinstance(cond, dict):
        return isinstance(value, dict) and matches(value, cond)
    return json_equal(value, cond)


def _operator(value: Any, present: bool, op: str, arg: Any) -> bool:
    if op == "$eq":
        return json_equal(value, arg)
    if op == "$ne":
        return not json_equal(value, arg)
    if op == "$in":
        return any(json_equal(value, a) for a in arg)
    if op == "$nin":
        return not any(json_equal(value, a) for a in arg)
    if op == "$exists":
        return present is arg
    if _is_number(value) and _is_number(arg) or isinstance(value, str) and isinstance(arg, str):
        return bool(_RANGES[op](value, arg))
    return False


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def json_equal(a: Any, b: Any) -> bool:
    """Equality of two JSON values: numbers by value, booleans apart from numbers, lists and
    objects element by element."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


# ------------------------------------------------------------------------------------ terms
def _term(path: list[str], value: Any) -> str | None:
    """The index term of a scalar leaf, or None (null, or longer than TERM_MAX_BYTES)."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        value = int(value)  # 1.0 and 1 are one value
    text = json.dumps([*path, value], ensure_ascii=False, separators=(",", ":"))
    return text if len(text.encode("utf-8", "surrogatepass")) <= TERM_MAX_BYTES else None


def metadata_terms(metadata: Any) -> list[str]:
    """Every index term of ``metadata``: one per scalar leaf of its objects and per scalar element
    of its lists, sorted and without repeats."""
    out: set[str] = set()

    def walk(value: Any, path: list[str]) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, [*path, key])
        elif isinstance(value, list):
            for item in value:
                if not isinstance(item, (dict, list)) and (t := _term(path, item)) is not None:
                    out.add(t)
        elif path and (t := _term(path, value)) is not None:
            out.add(t)

    if isinstance(metadata, dict):
        walk(metadata, [])
    return sorted(out)


def filter_terms(spec: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """What every episode matching ``spec`` carries among its ``metadata_terms``: terms it has all
    of, and groups of which it has at least one term each ($in). A condition no term implies
    (null, a long value, $ne, $nin, ranges, $exists) adds nothing."""
    every: list[str] = []
    groups: list[list[str]] = []

    def equal(path: list[str], value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                equal([*path, key], item)
        elif isinstance(value, list):
            every.extend(t for item in value if not isinstance(item, (dict, list))
                         and (t := _term(path, item)) is not None)
        elif (t := _term(path, value)) is not None:
            every.append(t)

    def walk(conds: dict[str, Any], path: list[str]) -> None:
        for key, cond in conds.items():
            here = [*path, key]
            if isinstance(cond, dict) and any(k.startswith("$") for k in cond):
                for op, arg in cond.items():
                    if op == "$eq":
                        equal(here, arg)
                    elif op == "$in":
                        group = [_term(here, a) if not isinstance(a, (dict, list)) else None for a in arg]
                        if group and all(t is not None for t in group):
                            groups.append(sorted({t for t in group if t is not None}))
            elif isinstance(cond, dict):
                walk(cond, here)
            else:
                equal(here, cond)

    walk(spec, [])
    return sorted(set(every)), groups
