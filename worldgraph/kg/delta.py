"""The graph delta: its JSON Schema, the structural check, and the item models of the merge.

Two gates, as the seed says ("先过格式关，再过知识关"):

1. ``validate_delta`` — structure. The delta must be a JSON object with four arrays
   (entities, states, edges, rules) of objects, and must not be abusive (too many items, values
   nested too deep, strings too long). Any failure rejects the WHOLE delta with
   ``DeltaValidationError``; nothing is written.
2. The item models below — knowledge. The merge checks each item on its own; an item with a
   missing name, a wrong field type, ... is dropped and listed in the MergeReport, the rest of
   the delta still merges.
"""

from __future__ import annotations

import copy
import json
import math
from importlib import resources
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from worldgraph.errors import DeltaValidationError
from worldgraph.kg.ids import normalise_name, normalise_type

DELTA_KEYS: tuple[str, ...] = ("entities", "states", "edges", "rules")
MAX_ITEMS = 500
MAX_DEPTH = 8  # containers nested inside one item's field (attributes: {"a": [..]} is 2)
MAX_STRING = 4000
MAX_ERRORS = 50
MAX_VISITS = 1_000_000
DEFAULT_CONFIDENCE = 0.5

Scalar = Union[str, int, float, bool, None]


def load_delta_schema(strict: bool = False) -> dict[str, Any]:
    """The delta's JSON Schema (``worldgraph/prompts/graph_delta.schema.json``).

    ``strict=True`` gives the OpenAI structured-output variant: every property required
    (optional ones nullable), no numeric bounds, and ``attributes`` as a list of
    ``{"key", "value"}`` pairs (strict mode forbids free-form objects); the item models accept
    that form too.
    """
    text = resources.files("worldgraph.prompts").joinpath("graph_delta.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return _strict_variant(schema) if strict else schema


def validate_delta(
    obj: Any,
    max_items: int = MAX_ITEMS,
    max_depth: int = MAX_DEPTH,
    max_string: int = MAX_STRING,
) -> dict[str, Any]:
    """Return the delta as a dict, or raise ``DeltaValidationError`` naming every broken rule
    with its path (``edges[3]: must be an object, got string``). A ``str`` is parsed first."""
    if isinstance(obj, (bytes, bytearray)):
        try:
            obj = obj.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DeltaValidationError([f"$: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
    if isinstance(obj, str):
        obj = _parse_json(obj)
    if not isinstance(obj, dict):
        raise DeltaValidationError([f"$: must be a JSON object with arrays {', '.join(DELTA_KEYS)}, got {json_type(obj)}"])

    errors: list[str] = []
    total = 0
    for key in DELTA_KEYS:
        if key not in obj:
            errors.append(f"{key}: missing (required array)")
            continue
        value = obj[key]
        if not isinstance(value, list):
            errors.append(f"{key}: must be an array, got {json_type(value)}")
            continue
        total += len(value)
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                errors.append(f"{key}[{i}]: must be an object, got {json_type(item)}")
    if total > max_items:
        errors.append(f"$: {total} items in entities/states/edges/rules, more than the limit of {max_items}")
    errors.extend(_abuse_errors(obj, max_depth, max_string))
    if errors:
        if len(errors) > MAX_ERRORS:
            errors = errors[:MAX_ERRORS] + [f"... and {len(errors) - MAX_ERRORS} more errors"]
        raise DeltaValidationError(errors)
    return obj


def json_type(value: Any) -> str:
    """The JSON name of a Python value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


# ---------------------------------------------------------------------------- item models


class _Item(BaseModel):
    """Fields every item may carry; coercion is lenient where the meaning is clear."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    evidence: list[str] = []
    confidence: float = DEFAULT_CONFIDENCE

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence(cls, v: Any) -> float:
        return clamp_confidence(v)

    @field_validator("evidence", mode="before")
    @classmethod
    def _evidence(cls, v: Any) -> list[str]:
        if v is None:
            return []
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(e, str) for e in v):
            raise ValueError(f"must be a string or a list of strings, got {json_type(v)}")
        return [e.strip() for e in v if e.strip()]


def _ref(v: Any) -> Any:
    # refs are strings; an LLM writing "ref": 1 means "1"
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    if isinstance(v, str):
        return v.strip() or None
    return v


class NodeItem(_Item):
    """An entity (``kind`` entity) or, via StateItem, a state."""

    ref: str | None = None
    name: str
    type: str
    attributes: dict[str, Any] = {}
    attribute_problems: list[str] = []  # filled by the merge-side cleaner, reported as notes

    @model_validator(mode="before")
    @classmethod
    def _clean(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            data["attributes"], data["attribute_problems"] = clean_attributes(data.get("attributes"))
        return data

    _refs = field_validator("ref", mode="before")(lambda cls, v: _ref(v))

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not normalise_name(v):
            raise ValueError("is empty (after trimming articles and punctuation)")
        return v

    @field_validator("type")
    @classmethod
    def _type(cls, v: str) -> str:
        if not normalise_type(v):
            raise ValueError("is empty")
        return v


class EntityItem(NodeItem):
    pass


class StateItem(NodeItem):
    entity_ref: str | None = None

    _entity_ref = field_validator("entity_ref", mode="before")(lambda cls, v: _ref(v))


class EdgeItem(_Item):
    relation: str
    src_ref: str
    dst_ref: str
    action: str | None = None

    _refs = field_validator("src_ref", "dst_ref", mode="before")(lambda cls, v: _ref(v))

    @field_validator("relation")
    @classmethod
    def _relation(cls, v: str) -> str:
        return v.strip().lower()

    @field_validator("action")
    @classmethod
    def _action(cls, v: str | None) -> str | None:
        return v or None


class RuleItem(_Item):
    condition: str
    outcome: str
    linked_refs: list[str] = []
    linked_ref_problems: list[str] = []

    @model_validator(mode="before")
    @classmethod
    def _clean(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            refs, problems = [], []
            raw = data.get("linked_refs")
            if isinstance(raw, str):
                raw = [raw]
            if raw is not None and not isinstance(raw, list):
                problems.append(f"linked_refs: must be an array of strings, got {json_type(raw)}; ignored")
                raw = []
            for i, r in enumerate(raw or []):
                r = _ref(r)
                if isinstance(r, str):
                    refs.append(r)
                elif r is not None:
                    problems.append(f"linked_refs[{i}]: must be a string, got {json_type(r)}; ignored")
            data["linked_refs"], data["linked_ref_problems"] = refs, problems
        return data

    @field_validator("condition", "outcome")
    @classmethod
    def _text(cls, v: str) -> str:
        if not normalise_name(v):
            raise ValueError("is empty")
        return v


ITEM_MODELS: dict[str, type[_Item]] = {
    "entities": EntityItem,
    "states": StateItem,
    "edges": EdgeItem,
    "rules": RuleItem,
}


def parse_item(key: str, raw: dict[str, Any]) -> tuple[Any, str | None]:
    """(model, None) for a usable item of ``delta[key]``, else (None, reason)."""
    try:
        return ITEM_MODELS[key].model_validate(raw), None
    except ValidationError as exc:
        return None, "; ".join(_describe(e) for e in exc.errors()[:5])


def clamp_confidence(v: Any) -> float:
    """A number in [0, 1]; numbers outside are clamped, unusable values give 0.5."""
    if isinstance(v, str):
        try:
            v = float(v.strip().rstrip("%")) / (100 if v.strip().endswith("%") else 1)
        except ValueError:
            return DEFAULT_CONFIDENCE
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        return DEFAULT_CONFIDENCE
    return min(1.0, max(0.0, float(v)))


def clean_attributes(value: Any) -> tuple[dict[str, Any], list[str]]:
    """Keep attributes whose values are JSON scalars or lists of scalars; say why others went."""
    if value is None:
        return {}, []
    if isinstance(value, list) and all(isinstance(p, dict) and "key" in p for p in value):
        value = {p["key"]: p.get("value") for p in value}  # the strict-schema key/value form
    if not isinstance(value, dict):
        return {}, [f"attributes: must be an object, got {json_type(value)}; ignored"]
    clean: dict[str, Any] = {}
    problems: list[str] = []
    for k, v in value.items():
        if not isinstance(k, str) or not k.strip():
            problems.append(f"attributes: key {k!r} is not a non-empty string; dropped")
        elif _is_scalar(v):
            clean[k] = v
        elif isinstance(v, (list, tuple)) and all(_is_scalar(x) for x in v):
            clean[k] = list(v)
        else:
            problems.append(
                f"attributes.{k}: must be a string, number, boolean, null or a list of them, "
                f"got {json_type(v)}; dropped"
            )
    return clean, problems


# ---------------------------------------------------------------------------- internals


def _is_scalar(v: Any) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    return v is None or isinstance(v, (str, int, bool))


def _parse_json(text: str) -> Any:
    body = text.strip()
    if body.startswith("```"):  # an LLM's fenced block: ```json ... ```
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(body, parse_constant=no_constants)
    except RecursionError:
        raise DeltaValidationError(["$: not valid JSON: nested too deeply to parse"]) from None
    except ValueError as exc:
        raise DeltaValidationError([f"$: not valid JSON: {exc}"]) from None


def _abuse_errors(root: dict[str, Any], max_depth: int, max_string: int) -> list[str]:
    """Depth and string-length limits, walked without recursion (a deep value must not crash us)."""
    errors: list[str] = []
    # (value, path, depth): depth counts containers inside an item's field; the root object,
    # the four arrays and the items themselves are levels -2, -1 and 0.
    stack: list[tuple[Any, str, int]] = [(root, "$", -2)]
    visited = 0  # a cycle in a Python value ends at the depth limit
    while stack and len(errors) <= MAX_ERRORS:
        value, path, depth = stack.pop()
        if isinstance(value, str):
            if len(value) > max_string:
                errors.append(f"{path}: string of {len(value)} characters, longer than the limit of {max_string}")
            elif not _is_unicode(value):
                errors.append(f"{path}: not valid Unicode text (a lone surrogate); send UTF-8 text")
            continue
        if not isinstance(value, (dict, list, tuple)):
            continue
        if depth > max_depth:
            errors.append(f"{path}: nested deeper than {max_depth} levels")
            continue
        visited += 1
        if visited > MAX_VISITS:  # only a Python value sharing sub-objects gets here
            errors.append(f"$: more than {MAX_VISITS} values")
            break
        if isinstance(value, dict):
            for k, v in reversed(list(value.items())):
                if isinstance(k, str) and len(k) > max_string:
                    errors.append(f"{path}: key of {len(k)} characters, longer than the limit of {max_string}")
                elif isinstance(k, str) and not _is_unicode(k):
                    errors.append(f"{path}: key {k.encode('utf-8', 'backslashreplace').decode()!r} is not valid "
                                  "Unicode text (a lone surrogate)")
                stack.append((v, str(k) if path == "$" else f"{path}.{k}", depth + 1))
        else:
            for i in reversed(range(len(value))):
                stack.append((value[i], f"{path}[{i}]", depth + 1))
    return errors


def _is_unicode(text: str) -> bool:
    """False for text holding a lone surrogate, which no store can encode."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _describe(err: Any) -> str:
    loc = ".".join(str(p) for p in err["loc"]) or "item"
    typ = err["type"]
    if typ == "missing":
        return f"{loc}: missing (required)"
    if typ in ("string_type", "float_type", "list_type", "dict_type"):
        want = {"string_type": "a string", "float_type": "a number", "list_type": "an array", "dict_type": "an object"}[typ]
        return f"{loc}: must be {want}, got {json_type(err.get('input'))}"
    msg = str(err["msg"])
    return f"{loc}: {msg.removeprefix('Value error, ')}"


def _strict_variant(schema: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(schema)
    defs = out["$defs"]
    pair = {
        "type": "object",
        "additionalProperties": False,
        "required": ["key", "value"],
        "properties": {"key": {"type": "string"}, "value": {"type": ["string", "number", "boolean", "null"]}},
    }
    defs["attributes"] = {"type": "array", "description": defs["attributes"]["description"], "items": pair}
    defs.pop("scalar", None)
    for name in ("entity", "state", "edge", "rule"):
        d = defs[name]
        for prop, spec in d["properties"].items():
            spec.pop("minimum", None)
            spec.pop("maximum", None)
            if prop not in d["required"]:
                if "$ref" in spec:
                    d["properties"][prop] = {"anyOf": [spec, {"type": "null"}]}
                else:
                    t = spec["type"]
                    spec["type"] = [t, "null"] if isinstance(t, str) else [*t, "null"]
        d["required"] = list(d["properties"])
    out.pop("$id", None)
    return out
