"""The graph delta: its JSON Schema, and the one parse every delta goes through.

Two gates, format first and knowledge second (docs/architecture.md "World update"): a merge never
writes dirty data, and keeps what is clean:

1. Structure (``validate_delta``): a JSON object with the four arrays entities, states, edges and
   rules, no more items than ``max_items`` (config ``max_delta_items``). Anything else rejects the
   WHOLE delta with ``DeltaValidationError``; nothing is written.
2. Items (``parse_delta``): each item is checked on its own. An item that is a string holding a
   JSON object (a common model slip) is parsed; an item that is not an object, breaks its model
   (``delta_items``), or is nested too deep / holds too long a string is dropped with its reason.

``parse_delta`` returns a ``ParsedDelta``: the typed items and the drops, parsed once and passed on
(the extractor's repair round, ``referenced_node_ids``, ``plan_merge``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import DeltaValidationError
from worldgraph.kg.records import DroppedItem
from worldgraph.world.delta.items import (  # noqa: F401 - re-exported: the item models are part of this module's API
    DEFAULT_CONFIDENCE,
    ITEM_MODELS,
    EdgeItem,
    EntityItem,
    NodeItem,
    RuleItem,
    StateItem,
    clamp_confidence,
    clean_attributes,
    json_type,
    parse_item,
)

DELTA_KEYS: tuple[str, ...] = ("entities", "states", "edges", "rules")
KIND_OF: dict[str, str] = {"entities": "entity", "states": "state", "edges": "edge", "rules": "rule"}
MAX_ITEMS: int = WorldGraphConfig.model_fields["max_delta_items"].default  # the config default, one number
MAX_DEPTH = 8  # containers nested inside one item's field (attributes: {"a": [..]} is 2)
MAX_STRING = 4000
MAX_ERRORS = 50
MAX_VISITS = 1_000_000


@dataclass
class Entry:
    """One item of a delta array: its position, what was given (a stringified object already
    parsed), and the typed model or the reason it was dropped."""

    index: int
    raw: Any
    item: Any = None
    reason: str | None = None


@dataclass
class ParsedDelta:
    entities: list[Entry] = field(default_factory=list)
    states: list[Entry] = field(default_factory=list)
    edges: list[Entry] = field(default_factory=list)
    rules: list[Entry] = field(default_factory=list)

    def entries(self, key: str) -> list[Entry]:
        return getattr(self, key)  # type: ignore[no-any-return]

    def size(self) -> int:
        return sum(len(self.entries(k)) for k in DELTA_KEYS)

    def dropped(self) -> list[DroppedItem]:
        """The items parsing dropped, with their reasons, in delta order."""
        return [DroppedItem(kind=KIND_OF[k], index=e.index, reason=e.reason or "invalid", item=e.raw)
                for k in DELTA_KEYS for e in self.entries(k) if e.item is None]

    def to_dict(self) -> dict[str, list[Any]]:
        """The delta as plain JSON (stringified items parsed): what was merged, for storage and tests."""
        return {k: [e.raw for e in self.entries(k)] for k in DELTA_KEYS}

    def extended(self, other: ParsedDelta) -> ParsedDelta:
        """This delta with ``other``'s items appended (numbered after this one's): the answer of a
        repair round added to the first answer."""
        out = ParsedDelta()
        for k in DELTA_KEYS:
            mine = list(self.entries(k))
            n = len(mine)
            mine += [Entry(n + e.index, e.raw, e.item, e.reason) for e in other.entries(k)]
            setattr(out, k, mine)
        return out


def load_delta_schema(strict: bool = False) -> dict[str, Any]:
    """The delta's JSON Schema (``worldgraph/prompts/graph_delta.schema.json``).

    ``strict=True`` gives the OpenAI structured-output variant: every property required
    (optional ones nullable), no numeric bounds or patterns, and ``attributes`` as a list of
    ``{"key", "value"}`` pairs (strict mode forbids free-form objects); the item models accept
    that form too.
    """
    text = resources.files("worldgraph.prompts").joinpath("graph_delta.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return _strict_variant(schema) if strict else schema


def validate_delta(obj: Any, max_items: int | None = MAX_ITEMS) -> dict[str, Any]:
    """The structural gate: return the delta as a dict, or raise ``DeltaValidationError`` naming
    every broken rule (``edges: must be an array, got string``). A ``str`` / ``bytes`` is parsed
    first. Items are not looked at here beyond counting them (``parse_delta`` does that).
    ``max_items``: the caller's limit (config ``max_delta_items``); None counts nothing."""
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
        elif not isinstance(obj[key], list):
            errors.append(f"{key}: must be an array, got {json_type(obj[key])}")
        else:
            total += len(obj[key])
    if max_items is not None and total > max_items:
        errors.append(f"$: {total} items in entities/states/edges/rules, more than the limit of {max_items} "
                      "(config max_delta_items)")
    if errors:
        raise DeltaValidationError(errors)
    return obj


def parse_delta(
    obj: Any,
    max_items: int | None = MAX_ITEMS,
    max_depth: int = MAX_DEPTH,
    max_string: int = MAX_STRING,
) -> ParsedDelta:
    """Parse a delta once: the structural gate (raises ``DeltaValidationError``), then every item
    on its own (kept as a typed model, or dropped with its reason). A ``ParsedDelta`` is returned
    as it is."""
    if isinstance(obj, ParsedDelta):
        return obj
    delta = validate_delta(obj, max_items)
    out = ParsedDelta()
    for key in DELTA_KEYS:
        entries = out.entries(key)
        for i, raw in enumerate(delta[key]):
            entries.append(_parse_entry(key, i, raw, max_depth, max_string))
    return out


def _parse_entry(key: str, i: int, raw: Any, max_depth: int, max_string: int) -> Entry:
    if isinstance(raw, str) and raw.strip().startswith("{"):
        try:
            raw = _parse_json(raw)
        except DeltaValidationError as exc:
            return Entry(i, raw, reason=f"a string that is not a JSON object ({exc.errors[0].removeprefix('$: ')})")
    if not isinstance(raw, dict):
        return Entry(i, raw, reason=f"must be an object, got {json_type(raw)}")
    abuse = _abuse_errors(raw, max_depth, max_string, f"{key}[{i}]")
    if abuse:
        return Entry(i, raw, reason="; ".join(abuse[:3]))
    item, reason = parse_item(key, raw)
    return Entry(i, raw, item, reason)


# ---------------------------------------------------------------------------- internals


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


def _abuse_errors(root: dict[str, Any], max_depth: int, max_string: int, path: str) -> list[str]:
    """Depth and string-length limits, walked without recursion (a deep value must not crash us)."""
    errors: list[str] = []
    # (value, path, depth): depth counts containers inside the item's fields (the item is level 0)
    stack: list[tuple[Any, str, int]] = [(root, path, 0)]
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
                stack.append((v, f"{path}.{k}", depth + 1))
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
            spec.pop("pattern", None)  # the parser checks predicates (and reads "Works At" as works_at)
            if prop not in d["required"]:
                if "$ref" in spec:
                    d["properties"][prop] = {"anyOf": [spec, {"type": "null"}]}
                else:
                    t = spec["type"]
                    spec["type"] = [t, "null"] if isinstance(t, str) else [*t, "null"]
        d["required"] = list(d["properties"])
    out.pop("$id", None)
    return out
