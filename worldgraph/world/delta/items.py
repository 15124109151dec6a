"""The items of a graph delta: one pydantic model per array, lenient where the meaning is clear.

The merge never writes dirty data and keeps what is clean: it checks each item on its own
(docs/architecture.md, "World update"): an item with a missing name, a wrong field type, ... is dropped and listed in the
MergeReport with the reason ``parse_item`` gives; the rest of the delta still merges.

``retract: true`` on an entity, state or edge item says the fact stopped being true (an object
eaten, a key no longer on the table); the merge closes what it names instead of asserting it.

An edge's relation is one of the three seed relations (containment, transition, episodic) or
``fact``: any other kind of fact between two entities, named by its ``predicate`` (snake_case,
``ids.PREDICATE_RULE``; "Works At" / "worksAt" are read as works_at), ``single_valued`` when the
subject has one such fact at a time. An unknown relation is dropped with a reason that shows
the fact form, so that a model's repair round (or a user) learns the fix.
"""

from __future__ import annotations

import math
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from worldgraph.kg.ids import PREDICATE_RULE, is_predicate, normalise_name, normalise_predicate, normalise_type
from worldgraph.kg.records import RELATIONS

DEFAULT_CONFIDENCE = 0.5

Scalar = Union[str, int, float, bool, None]  # noqa: UP007 - a runtime alias pydantic reads on 3.10


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


def _flag(v: Any) -> Any:
    # "retract": null / "" means not given; "true" / "yes" / 1 are what a model means by true
    if v is None or v == "":
        return False
    if isinstance(v, str) and v.strip().lower() in ("yes", "y"):
        return True
    return v


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
    retract: bool = False
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
    _retract = field_validator("retract", mode="before")(lambda cls, v: _flag(v))

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
    # fact only (see the module doc); validated even when absent, so a fact without one is named
    predicate: str | None = Field(default=None, validate_default=True)
    single_valued: bool = False
    retract: bool = False

    _refs = field_validator("src_ref", "dst_ref", mode="before")(lambda cls, v: _ref(v))
    _flags = field_validator("retract", "single_valued", mode="before")(lambda cls, v: _flag(v))

    @field_validator("relation")
    @classmethod
    def _relation(cls, v: str) -> str:
        rel = v.strip().lower()
        if rel not in RELATIONS:
            raise ValueError(unknown_relation(v))
        return rel

    @field_validator("predicate")
    @classmethod
    def _predicate(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None or not v.strip():
            if info.data.get("relation") == "fact":
                raise ValueError("missing (required for relation fact): the kind of fact, " + PREDICATE_RULE)
            return None
        p = normalise_predicate(v)
        if not is_predicate(p):
            raise ValueError(f"must be {PREDICATE_RULE}; got {v!r}")
        return p

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
    relation = raw.get("relation") if key == "edges" else None
    if isinstance(relation, str) and relation.strip().lower() not in RELATIONS:
        return None, unknown_relation(relation)
    try:
        return ITEM_MODELS[key].model_validate(raw), None
    except ValidationError as exc:
        reason = "; ".join(_describe(e) for e in exc.errors()[:5])
        if key == "edges" and not isinstance(relation, str):  # missing, null, a number: the same teaching
            p = normalise_predicate(raw["predicate"]) if isinstance(raw.get("predicate"), str) else ""
            reason += f". The relations {ALLOWED_RELATIONS}. {_AS_FACT.format(example=p if is_predicate(p) else 'located_near')}"
        return None, reason


def unknown_relation(relation: str) -> str:
    """Why an edge of an unknown relation is dropped, and the fix: the seed relations, else
    ``relation: fact`` with the relation as its predicate when it makes one."""
    p = normalise_predicate(relation)
    example = p if is_predicate(p) else "located_near"
    return f"unknown relation {relation!r}; {ALLOWED_RELATIONS}. {_AS_FACT.format(example=example)}"


ALLOWED_RELATIONS = ("allowed: containment (parent -> child: one thing inside or on another), transition (state -> "
                     "state, with an action), episodic (node -> scene), fact (any other kind of fact between two "
                     "entities)")
_AS_FACT = ('Write another kind as relation: fact with a snake_case predicate: {{"relation": "fact", "predicate": '
            '"{example}", "src_ref": ..., "dst_ref": ...}}, adding "single_valued": true when the subject has one '
            'such fact at a time')


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


# ---------------------------------------------------------------------------- internals


def _is_scalar(v: Any) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    return v is None or isinstance(v, (str, int, bool))


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
