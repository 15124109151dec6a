"""A short view of one environment's graph for the extraction prompt: what the model must know to write a delta.

The LLM must know what the graph already holds so it reuses node ids instead of inventing
duplicates, but the whole graph does not fit a prompt. We keep the counts and the
``max_items`` most useful entities, states, current facts (``relation: fact`` edges, so that the
model can update or retract them) and rules: the ones the scene talks about first, then the well
connected and well attested ones. A graph without facts is summarised exactly as before facts
existed (the facts' share of the items is given only when there are some).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any, cast

import numpy as np

from worldgraph.gcpause import gc_paused
from worldgraph.kg.records import SceneRecord

# Share of the item budget each kind gets first; what a kind leaves unused goes to the others.
_QUOTAS = (("entities", 0.4), ("states", 0.35), ("rules", 0.25))
_QUOTAS_WITH_FACTS = (("entities", 0.35), ("states", 0.3), ("facts", 0.15), ("rules", 0.2))
_STOPWORDS = frozenset(
    "a an the of to in on at by for with from and or is are was were be been it its this that "
    "there here you your i me my we our he she they them his her not no yes do does did can "
    "could would should will into onto up down out over under as if then than so".split()
)
_TOKEN_RE = re.compile(r"[a-z0-9]+|[\u3400-\u9fff]")
# (sort key within its kind, score comparable across kinds, the summary item)
_Ranked = tuple[tuple[bool, float, str], float, dict[str, Any]]


def summarize_graph(graph: dict[str, Any], scene: SceneRecord | None, max_items: int) -> dict[str, Any]:
    """Counts and the ``max_items`` most relevant entities, states and rules (in total).

    ``graph`` is ``GraphStore.world_graph()``'s dict: ``nodes``, ``edges``, ``rules`` (lists,
    or dicts by id) and ``meta``. Relevance to ``scene`` (shared words between a name and the
    scene's action, observations, feedback and commands) ranks first, then centrality in the
    graph of current edges, confidence and evidence count. States that are still current come
    before superseded ones.
    """
    # No cyclic GC while the per-node scores and items are built (nothing here makes cycles):
    # with a whole environment loaded, collections re-traverse it over and over.
    with gc_paused():
        return _summarize(graph, scene, max_items)


def _summarize(graph: dict[str, Any], scene: SceneRecord | None, max_items: int) -> dict[str, Any]:
    nodes = _records(graph.get("nodes"))
    edges = _records(graph.get("edges"))
    rules = _records(graph.get("rules"))
    by_id = {n["id"]: n for n in nodes if n.get("id")}
    current_edges = [e for e in edges if e.get("valid_to") is None]
    current_rules = [r for r in rules if r.get("valid_to") is None]

    scene_tokens = _tokens(_scene_text(scene)) if scene else set()
    centrality = _centrality(by_id, current_edges)
    max_evidence = max((_evidence_count(r) for r in (*nodes, *current_rules)), default=1) or 1
    parent_of = {
        e["dst_id"]: e["src_id"]
        for e in current_edges
        if e.get("relation") == "containment" and e.get("src_id") in by_id
    }

    def base(rec: dict[str, Any], relevance: float, node_id: str | None = None) -> float:
        return (
            3.0 * relevance
            + 1.0 * centrality.get(node_id or "", 0.0)
            + 0.5 * float(rec.get("confidence") or 0.0)
            + 0.5 * math.log1p(_evidence_count(rec)) / math.log1p(max_evidence)
        )

    entity_rel = {n["id"]: _overlap(_tokens(n.get("name", "")), scene_tokens) for n in by_id.values()}
    ranked: dict[str, list[_Ranked]] = {"entities": [], "states": [], "facts": [], "rules": []}
    for node in by_id.values():
        if node.get("kind") == "state":
            rel = max(entity_rel[node["id"]], 0.5 * entity_rel.get(node.get("entity_id") or "", 0.0))
            current = node.get("valid_to") is None
            score = base(node, rel, node["id"])
            # current states first, whatever their score: a superseded state is history
            ranked["states"].append(((not current, -score, node["id"]), score, _state_item(node, by_id, current)))
        else:
            score = base(node, entity_rel[node["id"]], node["id"])
            ranked["entities"].append(((False, -score, node["id"]), score, _entity_item(node, by_id, parent_of)))
    facts = [e for e in current_edges if e.get("relation") == "fact" and e.get("src_id") in by_id
             and e.get("dst_id") in by_id]
    for fact in facts:
        own = _overlap(_tokens(str(fact.get("predicate") or "").replace("_", " ")), scene_tokens)
        rel = max(entity_rel[fact["src_id"]], entity_rel[fact["dst_id"]], 0.5 * own)
        score = base(fact, rel, fact["src_id"])
        ranked["facts"].append(((False, -score, fact["id"]), score, _fact_item(fact, by_id)))
    for rule in current_rules:
        linked = [entity_rel.get(i, 0.0) for i in rule.get("linked_node_ids") or []]
        own = _overlap(_tokens(f"{rule.get('condition', '')} {rule.get('outcome', '')}"), scene_tokens)
        score = base(rule, max([own, *(0.5 * x for x in linked)]))
        ranked["rules"].append(((False, -score, rule["id"]), score, _rule_item(rule)))

    chosen = _allocate(ranked, max(max_items, 0), _QUOTAS_WITH_FACTS if facts else _QUOTAS)
    return {
        "env_name": (graph.get("meta") or {}).get("env_name") or (scene or {}).get("env_name"),
        "counts": {
            "nodes": len(nodes),
            "entities": sum(1 for n in nodes if n.get("kind") != "state"),
            "states": sum(1 for n in nodes if n.get("kind") == "state"),
            "edges": len(edges),
            "current_edges": len(current_edges),
            "current_facts": len(facts),
            "rules": len(rules),
        },
        "entities": chosen.get("entities", []),
        "states": chosen.get("states", []),
        "facts": chosen.get("facts", []),
        "rules": chosen.get("rules", []),
    }


def render_summary(summary: dict[str, Any]) -> str:
    """Compact text for the prompt: one line per item, with its id and its ``type:name`` ref."""
    c = summary.get("counts", {})
    facts = f", {c['current_facts']} of them facts" if c.get("current_facts") else ""
    head = (
        f"The graph holds {c.get('nodes', 0)} nodes ({c.get('entities', 0)} entities, "
        f"{c.get('states', 0)} states), {c.get('edges', 0)} edges ({c.get('current_edges', 0)} "
        f"current{facts}) and {c.get('rules', 0)} rules."
    )
    if not c.get("nodes") and not c.get("rules"):
        return head + " It is empty: everything in the scene is new."
    lines = [head]
    shown = sum(len(summary.get(k, [])) for k in ("entities", "states", "facts", "rules"))
    total = c.get("nodes", 0) + c.get("current_facts", 0) + c.get("rules", 0)
    if shown < total:
        lines.append(f"Showing the {shown} most relevant of them; the rest exist too.")
    if summary.get("entities"):
        lines.append("Entities (id | type:name | details):")
        for e in summary["entities"]:
            extra = f", in {e['parent']}" if e.get("parent") else ""
            attrs = f", {_attrs(e['attributes'])}" if e.get("attributes") else ""
            lines.append(f"- {e['id']} | {e['ref']} | conf {e['confidence']:.2f}, "
                         f"seen {e['evidence_count']}x{extra}{attrs}")
    if summary.get("states"):
        lines.append("States (id | type:name | details):")
        for s in summary["states"]:
            of = f"of {s['entity']}, " if s.get("entity") else ""
            now = "current" if s["current"] else "superseded"
            lines.append(f"- {s['id']} | {s['ref']} | {of}{now}, conf {s['confidence']:.2f}")
    if summary.get("facts"):
        lines.append("Facts (id | subject predicate object | details):")
        for f in summary["facts"]:
            one = "single-valued, " if f["single_valued"] else ""
            lines.append(f"- {f['id']} | {f['subject']} {f['predicate']} {f['object']} | {one}conf {f['confidence']:.2f}")
    if summary.get("rules"):
        lines.append("Rules (id | if -> then):")
        for r in summary["rules"]:
            lines.append(f"- {r['id']} | IF {r['condition']} THEN {r['outcome']} | conf {r['confidence']:.2f}")
    return "\n".join(lines)


# ---------------------------------------------------------------- ranking helpers


def _records(value: Any) -> list[dict[str, Any]]:
    if not value:
        return []
    if isinstance(value, dict):
        return [v for v in value.values() if isinstance(v, dict)]
    return [v for v in value if isinstance(v, dict)]


def _scene_text(scene: SceneRecord) -> str:
    parts: list[str] = [
        str(scene.get(k) or "")
        for k in ("action", "before_observation", "after_observation", "feedback", "trigger_reason")
    ]
    parts.extend(str(c) for c in scene.get("admissible_commands") or [])
    return " ".join(parts)


def _tokens(text: str) -> set[str]:
    return {t for t in _TOKEN_RE.findall(text.lower()) if t not in _STOPWORDS}


def _overlap(name_tokens: set[str], scene_tokens: set[str]) -> float:
    """Share of a name's words the scene mentions: "brass key" in "you see a brass key" is 1."""
    if not name_tokens or not scene_tokens:
        return 0.0
    return len(name_tokens & scene_tokens) / len(name_tokens)


def _evidence_count(rec: dict[str, Any]) -> int:
    count = rec.get("evidence_count")
    if isinstance(count, int):
        return count
    return len(rec.get("evidence") or [])


def _centrality(by_id: dict[str, Any], edges: Iterable[dict[str, Any]]) -> dict[str, float]:
    """PageRank over current edges between known nodes, scaled so the top node has 1.

    Episodic edges point at scenes, not nodes, and are left out (evidence counts cover them).
    The graph is undirected (an edge counts for both ends), alpha 0.85, at most 100 power
    iterations until the L1 change is below ``N * 1e-6``; the degree if it does not converge.
    This is networkx's pure-Python PageRank (``_pagerank_python``; ``nx.pagerank`` itself needs
    scipy, so worldgraph does not depend on networkx) step for step, with each step done by numpy on index arrays: the same
    additions in the same order, so the same floats, at O(edges) array work per step instead
    of seconds of graph-view overhead at 10k nodes.
    """
    adj: dict[str, dict[str, None]] = {}  # node -> neighbours, both in first-seen order
    for e in edges:
        src, dst = e.get("src_id"), e.get("dst_id")
        if src in by_id and dst in by_id and src != dst:
            adj.setdefault(src, {})[dst] = None
            adj.setdefault(dst, {})[src] = None
    if not adj:
        return {}
    scores = _pagerank(adj)
    top = max(scores) or 1.0
    return {n: s / top for n, s in zip(adj, scores)}


def _pagerank(adj: dict[str, dict[str, None]], alpha: float = 0.85, max_iter: int = 100,
              tol: float = 1.0e-6) -> list[float]:
    """PageRank of the undirected graph ``adj`` (no isolated nodes), scores in ``adj``'s order.

    Each step, node by node in order, adds ``alpha * x[n] / degree(n)`` to each neighbour of
    ``n`` and then the teleport share to ``n`` itself; ``np.bincount`` adds its weights in
    array order, so laying the additions out in that order reproduces the float sums exactly.
    """
    index = {n: i for i, n in enumerate(adj)}
    n_nodes = len(index)
    src: list[int] = []  # whose score an addition carries
    dst: list[int] = []  # where it goes
    teleport: list[int] = []  # positions of the teleport additions
    for i, nbrs in enumerate(adj.values()):
        for nbr in nbrs:
            src.append(i)
            dst.append(index[nbr])
        teleport.append(len(dst))
        src.append(i)
        dst.append(i)
    src_a, dst_a = np.array(src, dtype=np.intp), np.array(dst, dtype=np.intp)
    share = 1.0 / np.array([len(nbrs) for nbrs in adj.values()], dtype=np.float64)  # 1 / out-degree
    share_a = share[src_a]
    tele_a = np.array(teleport, dtype=np.intp)
    p = 1.0 / n_nodes
    danglesum = alpha * 0  # an undirected graph built from edges has no dangling node
    tele = danglesum * p + (1.0 - alpha) * p
    x = np.full(n_nodes, p, dtype=np.float64)
    for _ in range(max_iter):
        xlast = x
        add = alpha * xlast[src_a] * share_a
        add[tele_a] = tele
        x = cast("np.ndarray[tuple[int], np.dtype[np.float64]]",  # float weights: a float64 result
                 np.bincount(dst_a, weights=add, minlength=n_nodes))
        err = sum(np.abs(x - xlast).tolist())  # builtin sum: the same left-to-right additions
        if err < n_nodes * tol:
            return cast("list[float]", x.tolist())
    return [float(len(nbrs)) for nbrs in adj.values()]  # did not converge: the degree


def _allocate(ranked: dict[str, list[_Ranked]], budget: int,
              quotas: tuple[tuple[str, float], ...]) -> dict[str, list[dict[str, Any]]]:
    for items in ranked.values():
        items.sort(key=lambda r: r[0])  # the key ends with the id: stable prompts across runs
    take = {kind: min(len(ranked[kind]), int(budget * share)) for kind, share in quotas}
    # Spare slots go, one at a time, to the kind whose next item scores best.
    for _ in range(budget - sum(take.values())):
        heads = [(ranked[k][take[k]][1], k) for k, _ in quotas if take[k] < len(ranked[k])]
        if not heads:
            break
        take[max(heads)[1]] += 1
    return {kind: [item for _, _, item in ranked[kind][: take[kind]]] for kind, _ in quotas}


def _ref(node: dict[str, Any]) -> str:
    return f"{node.get('type') or node.get('kind', 'entity')}:{node.get('name', '')}"


def _entity_item(node: dict[str, Any], by_id: dict[str, Any], parent_of: dict[str, str]) -> dict[str, Any]:
    parent = by_id.get(parent_of.get(node["id"], ""))
    return {
        "id": node["id"],
        "ref": _ref(node),
        "name": node.get("name", ""),
        "type": node.get("type", ""),
        "confidence": float(node.get("confidence") or 0.0),
        "evidence_count": _evidence_count(node),
        "attributes": dict(node.get("attributes") or {}),
        "parent": _ref(parent) if parent else None,
    }


def _state_item(node: dict[str, Any], by_id: dict[str, Any], current: bool) -> dict[str, Any]:
    entity = by_id.get(node.get("entity_id") or "")
    return {
        "id": node["id"],
        "ref": _ref(node),
        "name": node.get("name", ""),
        "type": node.get("type", ""),
        "entity": _ref(entity) if entity else None,
        "current": current,
        "confidence": float(node.get("confidence") or 0.0),
        "evidence_count": _evidence_count(node),
    }


def _fact_item(edge: dict[str, Any], by_id: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": edge["id"],
        "subject": _ref(by_id[edge["src_id"]]),
        "predicate": str(edge.get("predicate") or ""),
        "object": _ref(by_id[edge["dst_id"]]),
        "single_valued": bool(edge.get("single_valued")),
        "confidence": float(edge.get("confidence") or 0.0),
        "evidence_count": _evidence_count(edge),
    }


def _rule_item(rule: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": rule["id"],
        "condition": rule.get("condition", ""),
        "outcome": rule.get("outcome", ""),
        "linked_node_ids": list(rule.get("linked_node_ids") or []),
        "confidence": float(rule.get("confidence") or 0.0),
        "evidence_count": _evidence_count(rule),
    }


def _attrs(attributes: dict[str, Any], limit: int = 4) -> str:
    pairs = [f"{k}={v}" for k, v in list(attributes.items())[:limit]]
    return " ".join(pairs)[:120]
