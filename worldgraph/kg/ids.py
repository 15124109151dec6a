"""Deterministic identity: the same names give the same ids on every run and in every store.

Nodes, edges and rules are UUID5 under ``records.WORLDGRAPH_NS`` of their identity fields,
normalised, so "The  Brass Key." and "brass key" are one node and a delta merged twice changes
nothing but evidence counts. Scenes are events, not identities: they get a random id.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from functools import lru_cache

from worldgraph.kg.records import WORLDGRAPH_NS

_SEP = "\x1f"  # unit separator: cannot occur in a normalised name, so fields never run together
_WS = re.compile(r"\s+")
_ENDS = re.compile(r"^[\W_]+|[\W_]+$")
_ARTICLE = re.compile(r"^(?:a|an|the)\s+")
_TYPE_SEP = re.compile(r"[\s\-_]+")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_PREDICATE_SEP = re.compile(r"[\s\-]+")
_SNAKE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")
PREDICATE_MAX = 64
PREDICATE_RULE = ("snake_case: lowercase ASCII words of letters and digits joined by single underscores, "
                  f"starting with a letter, at most {PREDICATE_MAX} characters (works_at, depends_on)")


def normalise_name(s: str) -> str:
    """Case-fold, collapse whitespace, trim punctuation at the ends and a leading article.

    ``normalise_name("The  Brass Key.") == normalise_name("brass key") == "brass key"``.
    Punctuation inside a name is kept ("door #2", "o'brien").
    """
    # cached: a merge normalises the same names many times (ids, refs, rule texts)
    return _normalise_name(s) if type(s) is str else _normalise_name.__wrapped__(s)


def clear_name_cache() -> None:
    """Forget the names normalised so far (a purge's memo caches of words: facade/generations.py)."""
    _normalise_name.cache_clear()


@lru_cache(maxsize=1 << 16)
def _normalise_name(s: str) -> str:
    text = unicodedata.normalize("NFKC", str(s)).casefold()
    text = _ENDS.sub("", _WS.sub(" ", text))
    stripped = _ARTICLE.sub("", text)
    # a name that is only an article ("The") keeps it rather than becoming empty
    return _ENDS.sub("", stripped) if stripped else text


def normalise_type(s: str) -> str:
    """Types are identifiers: ``"Door State"``, ``"door-state"`` and ``"door_state"`` are one."""
    text = unicodedata.normalize("NFKC", str(s)).casefold()
    return _TYPE_SEP.sub("_", _ENDS.sub("", text))


def normalise_predicate(s: str) -> str:
    """A fact's predicate as snake_case where the meaning is clear: ``"Works At"``, ``"works-at"``
    and ``"worksAt"`` are ``works_at``. The result may still break the rule (``is_predicate``):
    other characters are kept, for the error message to show."""
    text = _CAMEL.sub("_", unicodedata.normalize("NFKC", str(s)).strip())
    return _PREDICATE_SEP.sub("_", text.lower())


def is_predicate(s: str) -> bool:
    """Whether ``s`` is a predicate as stored: ``PREDICATE_RULE``."""
    return len(s) <= PREDICATE_MAX and bool(_SNAKE.match(s))


def is_uuid(s: str) -> bool:
    return bool(_UUID.match(s))


def node_id(tenant_id: str, env_name: str, kind: str, type: str, name: str) -> str:
    """Id of the entity/state node of this (normalised) type and name."""
    return _uuid5("node", tenant_id, env_name, kind, normalise_type(type), normalise_name(name))


def edge_id(
    tenant_id: str,
    env_name: str,
    relation: str,
    src_id: str,
    dst_id: str,
    action: str | None = None,
    occurrence: int = 0,
) -> str:
    """Id of one edge record. ``action`` qualifies the fact: a transition's action, or a fact's
    predicate (``works_at``: part of what the fact is, so two predicates between the same ends
    are two facts). ``occurrence`` counts earlier, closed records of the same fact: a containment
    closed and asserted again later becomes occurrence 1, and so on."""
    act = normalise_name(action) if action else ""
    return _uuid5("edge", tenant_id, env_name, relation, src_id, dst_id, act, str(occurrence))


def rule_id(tenant_id: str, env_name: str, condition: str, outcome: str) -> str:
    return _uuid5("rule", tenant_id, env_name, normalise_name(condition), normalise_name(outcome))


def new_scene_id() -> str:
    """Scenes are events (two identical rounds are two scenes), so their ids are random."""
    return str(uuid.uuid4())


def _uuid5(*parts: str) -> str:
    return str(uuid.uuid5(WORLDGRAPH_NS, _SEP.join(parts)))
