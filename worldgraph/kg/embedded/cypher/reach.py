"""What a query can reach, read from its text: ``world_only``, whether a projection of the world
part alone answers it (``opener``)."""

from __future__ import annotations

import re

from worldgraph.kg.embedded.cypher.model import NODE_TABLES, REL_TABLES, WORLD_NODE_TABLES, WORLD_REL_TABLES
from worldgraph.kg.embedded.cypher.text import NAME, blank

__all__ = ["world_only"]

# A node pattern's labels, or the rest of a parenthesis that is not one; a relationship's types
_NODE_OPEN_RE = re.compile(rf"\s*(?:{NAME})?\s*(?P<next>[:){{]|\Z)")
_NODE_LABELS_RE = re.compile(rf"\s*(?:{NAME})?\s*(?P<labels>(?::\s*{NAME}\s*)+)")
_REL_TYPES_RE = re.compile(rf"\s*(?:{NAME})?\s*:\s*(?P<types>{NAME}(?:\s*\|\s*:?\s*{NAME})*)")
# The episode part's tables (FROM_EPISODE, a world table, ends at an Episode), and the world part's
_EPISODE_PART = frozenset(n.upper() for n in (*NODE_TABLES, *REL_TABLES)
                          if n not in WORLD_NODE_TABLES and n not in WORLD_REL_TABLES) | {"FROM_EPISODE"}
_WORLD_LABELS = frozenset(WORLD_NODE_TABLES) | {"WorldNode"}
_WORLD_TYPES = frozenset(WORLD_REL_TABLES) - {"FROM_EPISODE"}
# words after which a parenthesis may open a pattern; after any other name it holds a function's
# arguments (count(x), exists(x.p): a pattern inside them opens a parenthesis of its own)
_PATTERN_AFTER = frozenset({"MATCH", "OPTIONAL", "WHERE", "AND", "OR", "XOR", "NOT", "RETURN", "WITH", "UNWIND",
                            "IN", "CASE", "WHEN", "THEN", "ELSE", "AS", "DISTINCT", "BY", "UNION", "ALL", "MERGE",
                            "CREATE", "DELETE", "SET", "REMOVE", "YIELD", "ON", "SKIP", "LIMIT"})


def world_only(query: str) -> bool:
    """Whether ``query`` can reach nothing but the world part's tables (Scene, Environment, Entity,
    State, Rule and the relationships among them), so a projection of the world part alone
    returns its rows. Conservative, since a wrong True would mean missing rows: True only when
    the text names no table of the episode part (in any case, as any word), quotes no name, and
    every relationship pattern names world types (so no ``--`` or ``-[r]-``), and every node
    pattern names world labels or is joined to such a relationship (``(a:Entity)-[:CONTAINS]->(x)``:
    a world relationship's ends are world nodes). A node pattern alone without a label (``(n)``),
    or a parenthesis that might be one, gives False; so does anything it cannot read."""
    code = blank(query)
    # a quoted name, a bare relationship, or a name this reading cannot see (outside strings and
    # comments, only ASCII names are read: ``(é)`` would pass for an expression in brackets)
    if "`" in code or "--" in code or not code.isascii():
        return False
    if any(w.upper() in _EPISODE_PART for w in re.findall(NAME, code)):
        return False
    for m in re.finditer(r"-\s*\[", code):
        close = code.find("]", m.end())
        body = code[m.end():close] if close >= 0 else ""
        typed = _REL_TYPES_RE.match(body)
        if close < 0 or "[" in body or typed is None:
            return False
        if any(t.strip(" :") not in _WORLD_TYPES for t in typed.group("types").split("|")):
            return False
    for m in re.finditer(r"\(", code):
        before = re.search(rf"({NAME})\s*\Z", code[max(0, m.start() - 80):m.start()])
        if before is not None and before.group(1).upper() not in _PATTERN_AFTER:
            continue  # a function's arguments
        opened = _NODE_OPEN_RE.match(code, m.end())
        if opened is None:
            continue  # an expression in brackets: (a + b), (x.name)
        if opened.group("next") == ":":
            labels = _NODE_LABELS_RE.match(code, m.end())
            if labels is None or any(label.strip() not in _WORLD_LABELS
                                     for label in labels.group("labels").split(":")[1:]):
                return False
            continue
        if not _joined_to_relationship(code, m.start()):
            return False
    return True


_NEAR = 200  # how far around a node pattern world_only looks for its relationship (beyond: not joined)
_MAP_MAX = 10_000  # how far it looks for the end of a node pattern's property map (beyond: not joined)


def _joined_to_relationship(code: str, open_at: int) -> bool:
    """Whether the node pattern opening at ``open_at`` is an end of a relationship pattern: ``-``
    right before it (``]->(x)``, ``]-(x)``) or right after its closing parenthesis. (Each look
    is bounded, so a long query of many parentheses costs linear time, not quadratic.)"""
    if code[max(0, open_at - _NEAR):open_at].rstrip().endswith(("-", "->")):
        return True
    depth = 0
    for i in range(open_at, min(len(code), open_at + _MAP_MAX)):
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        if depth == 0:
            return code[i + 1:i + 1 + _NEAR].lstrip().startswith(("-", "<-"))
    return False
