"""An environment's world graph as a model can afford to read it (the MCP ``world_graph`` tool).

The full graph is every record with its evidence, timestamps and scene ids: tens of kilobytes of
JSON for a few rooms. ``world_text`` answers with counts, the current facts as one line each
(entities with where they are and their attributes, current states, facts of any kind with their
predicates, transitions with their actions, rules), optionally the history (closed facts),
narrowed by node type, name or the
neighbourhood of one node, and cut at ``max_chars`` with a last line saying what was left out
and how to get it. ``select`` is the same filter for the full JSON answer.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

from worldgraph.errors import InvalidInputError, NotFoundError
from worldgraph.world.pending import scene_reasons

DEFAULT_MAX_CHARS = 6000
MAX_DEPTH = 5
# episodic edges link nodes to scenes: not a fact of the world
_STRUCTURAL = ("containment", "transition", "fact")


@dataclass(frozen=True)
class WorldFilter:
    node_type: str | None = None  # a node's type (room, item, door_state, ...) or kind (entity, state)
    name: str | None = None  # part of a node's name, any case
    around: str | None = None  # a node (id, type:name or name) whose neighbourhood to show
    depth: int = 1  # how many containment / transition / fact / state-of steps from ``around``
    history: bool = False  # closed facts too

    @property
    def active(self) -> bool:
        return bool(self.node_type or self.name or self.around)

    def describe(self) -> str:
        parts = [f"node_type={self.node_type!r}" if self.node_type else "",
                 f"name~{self.name!r}" if self.name else "",
                 f"around {self.around!r} depth {self.depth}" if self.around else ""]
        return ", ".join(p for p in parts if p)


def _label(node: dict[str, Any] | None, fallback: str = "?") -> str:
    if node is None:
        return fallback
    return f"{node.get('type') or node.get('kind')}:{node.get('name')}"


def _current(rec: dict[str, Any]) -> bool:
    return rec.get("valid_to") is None


def _find(nodes: dict[str, dict[str, Any]], ref: str) -> list[str]:
    """Node ids that ``ref`` names: an id, a ``type:name`` or a name (any case)."""
    if ref in nodes:
        return [ref]
    low = ref.strip().lower()
    by_label = [i for i, n in nodes.items() if _label(n).lower() == low]
    return by_label or [i for i, n in nodes.items() if str(n.get("name", "")).lower() == low]


def select(graph: dict[str, Any], f: WorldFilter) -> set[str] | None:
    """The ids of the nodes ``f`` keeps (None: no node filter). NotFoundError when ``around``
    names no node; InvalidInputError for a depth out of range."""
    if isinstance(f.depth, bool) or not isinstance(f.depth, int) or not 0 <= f.depth <= MAX_DEPTH:
        raise InvalidInputError("depth", f"must be a whole number from 0 to {MAX_DEPTH}", f.depth)
    if not f.active:
        return None
    nodes = {n["id"]: n for n in graph.get("nodes") or [] if f.history or _current(n)}
    keep = set(nodes)
    if f.around:
        start = _find(nodes, f.around)
        if not start:
            names = ", ".join(sorted({_label(n) for n in nodes.values() if n.get("kind") != "state"})[:20])
            raise NotFoundError("node", f.around, f"no node of this environment is called that (give an id, "
                                f"type:name or name; entities: {names or 'none'})")
        links: dict[str, set[str]] = {i: set() for i in nodes}
        pairs = [(e["src_id"], e["dst_id"]) for e in graph.get("edges") or []
                 if e.get("relation") in _STRUCTURAL and (f.history or _current(e))]
        pairs += [(n["id"], n["entity_id"]) for n in nodes.values() if n.get("entity_id")]
        for a, b in pairs:
            if a in links and b in links:
                links[a].add(b)
                links[b].add(a)
        seen = {i: 0 for i in start}
        queue = deque(start)
        while queue:
            i = queue.popleft()
            if seen[i] < f.depth:
                for j in links[i] - seen.keys():
                    seen[j] = seen[i] + 1
                    queue.append(j)
        keep = set(seen)
    if f.node_type:
        t = f.node_type.strip().lower()
        keep = {i for i in keep if t in (str(nodes[i].get("type", "")).lower(), str(nodes[i].get("kind", "")).lower())}
    if f.name:
        part = f.name.strip().lower()
        keep = {i for i in keep if part in str(nodes[i].get("name", "")).lower()}
    return keep


def filtered_graph(graph: dict[str, Any], f: WorldFilter) -> dict[str, Any]:
    """The full records ``f`` keeps: its nodes, the edges between two of them, the rules linked to
    one of them (every rule when no node filter is set); closed facts only with ``history``."""
    keep = select(graph, f)

    def wanted(rec: dict[str, Any]) -> bool:
        return f.history or _current(rec)

    nodes = [n for n in graph.get("nodes") or [] if wanted(n) and (keep is None or n["id"] in keep)]
    edges = [e for e in graph.get("edges") or [] if wanted(e)
             and (keep is None or (e.get("src_id") in keep and e.get("dst_id") in keep))]
    rules = [r for r in graph.get("rules") or [] if wanted(r)
             and (keep is None or set(r.get("linked_node_ids") or []) & keep)]
    return {"nodes": nodes, "edges": edges, "rules": rules, "scenes": graph.get("scenes") or [],
            "meta": graph.get("meta")}


def _attrs(attributes: Any) -> str:
    if not isinstance(attributes, dict) or not attributes:
        return ""
    parts = []
    for k, v in sorted(attributes.items()):
        value = ", ".join(map(str, v)) if isinstance(v, list) else str(v)
        parts.append(f"{k}={value}")
    return "; ".join(parts)


def _counts(graph: dict[str, Any]) -> str:
    nodes, edges, rules = graph.get("nodes") or [], graph.get("edges") or [], graph.get("rules") or []
    entities = [n for n in nodes if n.get("kind") != "state"]
    states = [n for n in nodes if n.get("kind") == "state"]
    by_relation = Counter(e.get("relation") for e in edges if _current(e))
    scenes = Counter(s.get("status") for s in graph.get("scenes") or [])
    return (f"{len(nodes)} nodes ({len(entities)} entities, {len(states)} states, "
            f"{sum(1 for n in nodes if _current(n))} current); {len(edges)} edges "
            f"({sum(by_relation.values())} current: "
            + (", ".join(f"{n} {r}" for r, n in sorted(by_relation.items())) or "none") + "); "
            f"{len(rules)} rules ({sum(1 for r in rules if _current(r))} current); "
            f"{sum(scenes.values())} scenes (" + (", ".join(f"{n} {s}" for s, n in sorted(scenes.items())) or "none")
            + ")")


def _sections(graph: dict[str, Any], keep: set[str] | None, history: bool) -> list[tuple[str, list[str]]]:
    nodes = {n["id"]: n for n in graph.get("nodes") or []}

    def shown(node_id: str) -> bool:
        return node_id in (nodes if keep is None else keep)

    edges = graph.get("edges") or []
    parent: dict[str, str] = {}
    for e in edges:
        if e.get("relation") == "containment" and _current(e):
            parent[e["dst_id"]] = e["src_id"]

    entities: list[str] = []
    states: list[str] = []
    for n in sorted(nodes.values(), key=lambda n: (_label(n).lower(), n["id"])):
        if not _current(n) or not shown(n["id"]):
            continue
        facts = []
        if n.get("kind") == "state":
            if n.get("entity_id"):
                facts.append(f"of {_label(nodes.get(n['entity_id']), n['entity_id'])}")
        elif n["id"] in parent:
            facts.append(f"in {_label(nodes.get(parent[n['id']]), parent[n['id']])}")
        if attrs := _attrs(n.get("attributes")):
            facts.append(attrs)
        facts.append(f"conf {float(n.get('confidence') or 0):.2f}")
        line = f"- {_label(n)}: " + "; ".join(facts)
        (states if n.get("kind") == "state" else entities).append(line)

    facts = sorted(
        f"- {_label(nodes.get(e['src_id']), e['src_id'])} {e.get('predicate')} "
        f"{_label(nodes.get(e['dst_id']), e['dst_id'])} ("
        + ("single-valued; " if e.get("single_valued") else "") + f"conf {float(e.get('confidence') or 0):.2f})"
        for e in edges
        if e.get("relation") == "fact" and _current(e) and (shown(e["src_id"]) or shown(e["dst_id"])))

    transitions = [
        f"- {_label(nodes.get(e['src_id']), e['src_id'])} --[{e.get('action') or '?'}]--> "
        f"{_label(nodes.get(e['dst_id']), e['dst_id'])}"
        for e in sorted(edges, key=lambda e: e["id"])
        if e.get("relation") == "transition" and _current(e) and (shown(e["src_id"]) or shown(e["dst_id"]))]

    def rule_line(r: dict[str, Any], closed: bool = False) -> str:
        evidence = len(r.get("evidence") or [])
        tail = f"conf {float(r.get('confidence') or 0):.2f}" + (f", {evidence} evidence" if evidence else "")
        until = f" (closed {str(r['valid_to'])[:19]})" if closed else ""
        return f"- IF {r.get('condition')} THEN {r.get('outcome')} ({tail}){until}"

    def linked(r: dict[str, Any]) -> bool:
        return keep is None or bool(set(r.get("linked_node_ids") or []) & keep)

    rules = [rule_line(r) for r in sorted(graph.get("rules") or [], key=lambda r: (-float(r.get("confidence") or 0),
                                                                              r["id"]))
             if _current(r) and linked(r)]
    out = [("Rules (if -> then)", rules), ("Entities (type:name: where; attributes; confidence)", entities),
           ("States", states), ("Facts (subject predicate object)", facts),
           ("Transitions (from --[action]--> to)", transitions)]
    if history:
        past = []
        for n in sorted(nodes.values(), key=lambda n: str(n.get("valid_to"))):
            if not _current(n) and shown(n["id"]):
                of = f" of {_label(nodes.get(n['entity_id']), n['entity_id'])}" if n.get("entity_id") else ""
                past.append(f"- {_label(n)}{of}: until {str(n['valid_to'])[:19]}")
        for e in sorted(edges, key=lambda e: str(e.get("valid_to"))):
            if _current(e) or e.get("relation") not in _STRUCTURAL or not (shown(e["src_id"]) or shown(e["dst_id"])):
                continue
            src, dst = _label(nodes.get(e["src_id"]), e["src_id"]), _label(nodes.get(e["dst_id"]), e["dst_id"])
            what = (f"{dst} was in {src}" if e["relation"] == "containment" else
                    f"{src} {e.get('predicate')} {dst}" if e["relation"] == "fact" else
                    f"{src} --[{e.get('action') or '?'}]--> {dst}")
            past.append(f"- {what}: until {str(e['valid_to'])[:19]}")
        past += [rule_line(r, closed=True) for r in graph.get("rules") or [] if not _current(r) and linked(r)]
        out.append(("History (closed facts, oldest first)", past))
    return out


def world_text(graph: dict[str, Any], env_name: str, f: WorldFilter | None = None,
               max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The compact answer: a header with the counts, then rules, entities, states, facts,
    transitions (and history), each fact one line, cut to ``max_chars`` characters with a last line that says
    how many lines of each section were left out."""
    f = f or WorldFilter()
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 500:
        raise InvalidInputError("max_chars", "must be a whole number of at least 500", max_chars)
    keep = select(graph, f)
    meta = graph.get("meta") or {}
    if not meta and not graph.get("nodes") and not graph.get("scenes"):
        return f"{env_name}: no world graph yet (observe_round with FLAG_CURIOSITY, or apply_delta, grows one)."
    head = [f"{env_name}: graph version {meta.get('graph_version', 0)}, updated {str(meta.get('updated_at'))[:19]}",
            _counts(graph)]
    # why scene packets wait or failed: a pending count alone leaves the reader guessing
    head += [f"{n} scene(s) not merged: {reason}" for reason, n in scene_reasons(graph.get("scenes") or []).items()]
    if f.active:
        head.append(f"Filter: {f.describe()}: {len(keep or ())} nodes match.")
    lines = list(head)
    budget = max_chars - 400  # room for the last line
    used = sum(len(line) + 1 for line in lines)
    left: dict[str, int] = {}
    for title, items in _sections(graph, keep, f.history):
        if not items:
            continue
        header = f"{title}:"
        if used + len(header) + len(items[0]) + 2 > budget:  # not even its first line fits
            left[title.split(" (")[0]] = len(items)
            continue
        lines.append(header)
        used += len(header) + 1
        for n, item in enumerate(items):
            if used + len(item) + 1 > budget:
                left[title.split(" (")[0]] = len(items) - n
                break
            lines.append(item)
            used += len(item) + 1
    if left:
        lines.append("Left out (over max_chars=" + str(max_chars) + "): "
                     + ", ".join(f"{n} {t.lower()} lines" for t, n in left.items())
                     + ". Narrow with name, node_type or around (+ depth), raise max_chars, or ask format='json'.")
    elif not f.history:
        lines.append("(current facts only: history=true adds closed ones; format='json' gives every record)")
    return "\n".join(lines)


def check_format(value: str) -> str:
    if value not in ("text", "json"):
        raise InvalidInputError("format", "must be 'text' (compact lines) or 'json' (every record)", value)
    return value


__all__ = ["DEFAULT_MAX_CHARS", "MAX_DEPTH", "WorldFilter", "check_format", "filtered_graph",
                          "select", "world_text"]
