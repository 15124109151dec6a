"""Every world record written as one sentence: what the world index embeds and searches, and what a
hit and a context line say.

- an entity: ``the brass key (item)``, with its attributes (``color: brass``);
- a state: ``the wooden door is locked`` (the state's name without its entity's name in front;
  the state's type when the name is not the entity's);
- containment: ``the brass key is located in the kitchen table``; and, when the scene that first
  asserted it names the agent's action, a second row of the same record saying what came after
  that action: ``after doing 'take brass key', the brass key was in the player`` (its key is the
  record's id and ``AFTER``: history, true of that moment whatever holds now);
- a transition: ``doing 'open chest' changes the chest from closed to open``;
- a fact of any other kind: ``alice works at acme`` (the predicate's words);
- a rule: ``if the door is locked, then going outside fails``.

Episodic edges (a node -> the scene it was seen in) say nothing about the world: no sentence.
Names are the store's, so a sentence changes only when a record it names does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

AFTER = "#after"  # the key of a containment's second row (the record's id, then this)
SEEN = "after doing '"  # how a second row that says no move starts
MAX_ATTRIBUTES = 6  # attributes named in an entity's sentence
MAX_TEXT = 600  # characters of one sentence (a long name or condition is cut at a word)


def the(name: str) -> str:
    """``the <name>``, unless the name is proper (starts with a capital) or has its article."""
    n = name.strip()
    if not n or n[0].isupper() or n.lower().startswith(("the ", "a ", "an ")):
        return n
    return "the " + n


def cut(text: str, limit: int = MAX_TEXT) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + "..."


def state_words(state: Mapping[str, Any], entity: Mapping[str, Any] | None) -> str:
    """What a state says of its entity: its name without the entity's name in front."""
    name = " ".join(str(state.get("name") or "").split())
    if entity is not None:
        owner = " ".join(str(entity.get("name") or "").split())
        if owner and name.lower().startswith(owner.lower() + " "):
            return name[len(owner) + 1:]
    return name


def node_text(node: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]]) -> str:
    """The sentence of an entity or a state (``nodes``: the environment's nodes by id, for a
    state's entity)."""
    if node.get("kind") == "state":
        entity = nodes.get(str(node.get("entity_id") or ""))
        words = state_words(node, entity)
        if entity is not None:
            if words != node.get("name"):
                return cut(f"{the(str(entity.get('name')))} is {words}")
            return cut(f"{the(str(entity.get('name')))} is {words} ({node.get('type')})")
        return cut(f"{words} ({node.get('type')})")
    attrs = node.get("attributes") or {}
    extra = ""
    if isinstance(attrs, dict) and attrs:
        extra = "; " + ", ".join(f"{k}: {v}" for k, v in list(attrs.items())[:MAX_ATTRIBUTES])
    return cut(f"{the(str(node.get('name')))} ({node.get('type')}){extra}")


def edge_text(edge: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The sentence of an edge (None: an episodic edge, or an end the environment does not hold)."""
    relation = edge.get("relation")
    src, dst = nodes.get(str(edge.get("src_id"))), nodes.get(str(edge.get("dst_id")))
    if relation == "episodic" or src is None or dst is None:
        return None
    if relation == "containment":
        return cut(f"{the(str(dst.get('name')))} is located in {the(str(src.get('name')))}")
    if relation == "transition":
        owner = nodes.get(str(src.get("entity_id") or dst.get("entity_id") or ""))
        action = " ".join(str(edge.get("action") or "").split())
        thing = the(str(owner.get("name"))) if owner is not None else "it"
        before, after = state_words(src, owner), state_words(dst, owner)
        doing = f"doing '{action}'" if action else "something"
        return cut(f"{doing} changes {thing} from {before} to {after}")
    predicate = str(edge.get("predicate") or relation or "").replace("_", " ")
    return cut(f"{src.get('name')} {predicate} {dst.get('name')}")


def rule_text(rule: Mapping[str, Any]) -> str:
    return cut(f"if {rule.get('condition')}, then {rule.get('outcome')}")


# (kind, sentence, the node ids the record links, the action it names: a transition's, or the one a
# containment came after; "" for none)
Row = tuple[str, str, tuple[str, ...], str]


def node_row(node: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]]) -> Row:
    if node.get("kind") == "state":
        owner = str(node.get("entity_id") or "")
        return "state", node_text(node, nodes), (owner,) if owner else (), ""
    return "entity", node_text(node, nodes), (), ""


def record_id(key: str) -> str:
    """The record a row of the index is of (its key, without ``AFTER``)."""
    return key[:-len(AFTER)] if key.endswith(AFTER) else key


def is_sighting(text: str) -> bool:
    """Whether a history row says only where a thing was seen after an action (no move: where it
    was before is not known), as ``edge_rows`` writes it."""
    return text.startswith(SEEN)


def is_history(key: str) -> bool:
    """Whether a row says what held after an action (true of that moment, not of now)."""
    return key.endswith(AFTER)


Scenes = Mapping[str, tuple[str, str]]  # scene id -> (created_at, action)


def began_with(edge: Mapping[str, Any], scenes: Scenes) -> str:
    """The action of the scene that began an edge: among its source scenes, the one made at its
    valid_from (merges place a fact at its scene's time); "" when none was (a forgotten scene,
    an imported edge) or it has no action."""
    start = str(edge.get("valid_from") or "")
    at = [scenes[str(s)][1] for s in edge.get("source_scenes") or [] if scenes.get(str(s), ("",))[0] == start]
    return " ".join(at[0].split()) if at else ""


def edge_rows(edge: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]], scenes: Scenes,
              before: Mapping[str, Any] | None = None) -> dict[str, Row]:
    """The rows of an edge: its sentence, and for a containment begun by a scene with an action
    (``began_with``) what came after that action: a move when ``before`` (the containment of the
    same child that ended when this one began) names where it was, else where it was seen."""
    text = edge_text(edge, nodes)
    if text is None:
        return {}
    links = (str(edge["src_id"]), str(edge["dst_id"]))
    own = " ".join(str(edge.get("action") or "").split()) if edge.get("relation") == "transition" else ""
    out: dict[str, Row] = {str(edge["id"]): ("fact", text, links, own)}
    action = began_with(edge, scenes) if edge.get("relation") == "containment" else ""
    if action:
        parent, child = the(str(nodes[links[0]].get("name"))), the(str(nodes[links[1]].get("name")))
        old = nodes.get(str((before or {}).get("src_id")))
        said = f"doing '{action}' moved {child} from {the(str(old.get('name')))} to {parent}" if old is not None \
            else f"{SEEN}{action}', {child} was seen in {parent}"
        out[str(edge["id"]) + AFTER] = ("fact", cut(said), links, action)
    return out


def previous_containments(edges: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """containment edge id -> the containment of the same child that ended when it began (where
    the child was before), among ``edges``."""
    ended: dict[tuple[str, str], Mapping[str, Any]] = {}
    mine = [e for e in edges if e.get("relation") == "containment"]
    for e in mine:
        if e.get("valid_to") is not None:
            ended[(str(e.get("dst_id")), str(e["valid_to"]))] = e
    out = {}
    for e in mine:
        prev = ended.get((str(e.get("dst_id")), str(e.get("valid_from"))))
        if prev is not None and prev.get("id") != e.get("id"):
            out[str(e["id"])] = prev
    return out


def rule_row(rule: Mapping[str, Any]) -> Row:
    return "rule", rule_text(rule), tuple(str(x) for x in rule.get("linked_node_ids") or []), ""


def record_rows(graph: Mapping[str, Any]) -> dict[str, Row]:
    """row key -> (kind, sentence, links) of every record of a world graph (``world_graph``'s
    nodes, edges, rules and scenes) that has a sentence; kind: entity, state, fact (every edge)
    or rule."""
    nodes = {str(n["id"]): n for n in graph.get("nodes", [])}
    scenes = {str(s["id"]): (str(s.get("created_at") or ""), str(s.get("action") or ""))
              for s in graph.get("scenes", []) if s.get("action")}
    out: dict[str, Row] = {nid: node_row(n, nodes) for nid, n in nodes.items()}
    edges = graph.get("edges", [])
    before = previous_containments(edges)
    for e in edges:
        out.update(edge_rows(e, nodes, scenes, before.get(str(e["id"]))))
    for r in graph.get("rules", []):
        out[str(r["id"])] = rule_row(r)
    return out
