"""The pieces of bench/world_fidelity.py that need no TextWorld: what the agent can see, the
oracle delta built from it, the noise model, and the scores.

A fact is a tuple ``(predicate, (name, type), ...)`` in TextWorld's vocabulary: ``at(x, room)``,
``in(x, container | I)``, ``on(x, supporter)``, ``open / closed / locked(door | container)``,
``link(room, door, room)``; types r room, d door, c container, s supporter, o object, k key,
f food, P the player, I the inventory.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterable
from typing import Any

from worldgraph.kg.ids import normalise_name

Fact = tuple[Any, ...]
TYPES = {"r": "room", "d": "door", "c": "container", "s": "supporter", "o": "object", "k": "key", "f": "food",
         "P": "character"}
OPENNESS = ("open", "closed", "locked")
PLAYER = "player"


# ---------------------------------------------------------------------------------- seeing
def where_player(facts: Iterable[Fact]) -> str | None:
    return next((f[2][0] for f in facts if f[0] == "at" and f[1][1] == "P"), None)


def containment(facts: Iterable[Fact]) -> set[tuple[str, str]]:
    """Every true (parent, child) of the world: rooms hold things and the player, containers and
    supporters hold things, the player holds the inventory."""
    out = set()
    for f in facts:
        if f[0] in ("at", "in", "on") and len(f) == 3:
            parent = PLAYER if f[2][1] == "I" else (PLAYER if f[2][1] == "P" else f[2][0])
            child = PLAYER if f[1][1] == "P" else f[1][0]
            out.add((parent, child))
    return out


def states(facts: Iterable[Fact]) -> dict[str, str]:
    """Door and container -> open / closed / locked (locked wins over closed)."""
    out: dict[str, str] = {}
    for f in facts:
        if f[0] in OPENNESS and len(f) == 2 and f[1][1] in ("d", "c"):
            if out.get(f[1][0]) != "locked":
                out[f[1][0]] = f[0]
    return out


def kinds(facts: Iterable[Fact]) -> dict[str, str]:
    out = {PLAYER: "character"}
    for f in facts:
        for name, typ in f[1:]:
            if typ in TYPES and typ != "P":
                out[name] = TYPES[typ]
    return out


def visible(facts: list[Fact]) -> tuple[set[tuple[str, str]], set[str]]:
    """What the player sees: the containment edges and the things (including doors of the room).
    Contents of closed containers are hidden."""
    room = where_player(facts)
    if room is None:
        return set(), set()
    edges = containment(facts)
    opened = {n for n, s in states(facts).items() if s == "open"}
    kind = kinds(facts)
    seen_edges, seen = set(), {room, PLAYER}
    frontier = [room, PLAYER]
    while frontier:
        parent = frontier.pop()
        if kind.get(parent) == "container" and parent not in opened:
            continue
        for p, c in edges:
            if p == parent and c not in seen:
                seen.add(c)
                seen_edges.add((p, c))
                frontier.append(c)
    seen_edges.add((room, PLAYER))
    for f in facts:
        if f[0] == "link" and f[1][0] == room:
            seen.add(f[2][0])
    return seen_edges, seen


# ---------------------------------------------------------------------------------- the oracle
def oracle_delta(before: list[Fact], after: list[Fact], action: str) -> dict[str, Any]:
    """The exact delta of one round: what the agent sees after the action (restated every round,
    as a model would), the state changes it caused (transitions), what left the world (retract)."""
    edges, seen = visible(after)
    kind, now_states, old_states = kinds(after), states(after), states(before)
    refs = {name: f"e{i}" for i, name in enumerate(sorted(seen))}
    d: dict[str, list[Any]] = {"entities": [], "states": [], "edges": [], "rules": []}
    for name in sorted(seen):
        d["entities"].append({"ref": refs[name], "name": name, "type": kind.get(name, "object"),
                              "evidence": f"{name} is here", "confidence": 0.9})
    for p, c in sorted(edges):
        d["edges"].append({"relation": "containment", "src_ref": refs[p], "dst_ref": refs[c],
                           "evidence": f"{c} is in/on {p}", "confidence": 0.9})
    for n, name in enumerate(sorted(x for x in seen if x in now_states)):
        typ = f"{kind[name]}_state"
        new = {"ref": f"s{n}", "name": f"{name} {now_states[name]}", "type": typ, "entity_ref": refs[name],
               "evidence": f"the {name} is {now_states[name]}", "confidence": 0.9}
        old = old_states.get(name)
        if old is not None and old != now_states[name]:
            d["states"].append({"ref": f"s{n}old", "name": f"{name} {old}", "type": typ, "entity_ref": refs[name]})
            d["edges"].append({"relation": "transition", "src_ref": f"s{n}old", "dst_ref": f"s{n}", "action": action,
                               "evidence": action, "confidence": 0.9})
        d["states"].append(new)
    _, seen_before = visible(before)
    gone = {c for _, c in containment(before)} - {c for _, c in containment(after)}  # eaten: no place any more
    for name in sorted(gone & seen_before):
        d["entities"].append({"name": name, "type": kinds(before).get(name, "object"), "retract": True,
                              "evidence": f"the {name} is gone"})
    return d


def transitions(before: list[Fact], after: list[Fact], action: str) -> set[tuple[str, str, str]]:
    """The state changes of one round the agent could see: (from state, to state, action)."""
    _, seen = visible(after)
    old, new = states(before), states(after)
    return {(f"{n} {old[n]}", f"{n} {new[n]}", action) for n in new if n in seen and n in old and old[n] != new[n]}


# ---------------------------------------------------------------------------------- noise
CORRUPTIONS = ("stringified", "unknown_relation", "dangling_ref", "case_and_articles", "missing_field", "repeated")


def corrupt(delta: dict[str, Any], share: float, rng: random.Random) -> tuple[dict[str, Any], dict[tuple[str, int], Any]]:
    """Corrupt ``share`` of the items the way models fail. Returns the answer and, for every item
    of it, the clean item it came from (``(key, index) -> item``: what a repair round fixes)."""
    out: dict[str, list[Any]] = {k: [] for k in delta}
    source: dict[tuple[str, int], Any] = {}
    names = {e["ref"]: e["name"] for e in delta["entities"] if "ref" in e}
    for key in ("entities", "states", "edges", "rules"):
        for item in delta.get(key, []):
            new = copy.deepcopy(item)
            extra = None
            if rng.random() < share:
                how = rng.choice(CORRUPTIONS)
                if how == "stringified":
                    new = json.dumps(new)
                elif how == "unknown_relation" and key == "edges":
                    new["relation"] = rng.choice(["inside", "contains", "located_in", "on top of"])
                elif how == "dangling_ref" and key in ("edges", "states"):
                    field = "entity_ref" if key == "states" else rng.choice(["src_ref", "dst_ref"])
                    new[field] = rng.choice(["e999", "obj_17", "thing"])
                elif how == "case_and_articles":
                    if key in ("entities", "states") and "name" in new:
                        new["name"] = _shout(new["name"], rng)
                    elif key == "edges":
                        field = rng.choice(["src_ref", "dst_ref"])
                        if new[field] in names:
                            new[field] = _shout(names[new[field]], rng)
                elif how == "missing_field":
                    drop = {"entities": ["name", "type"], "states": ["name", "entity_ref"],
                            "edges": ["dst_ref", "relation"], "rules": ["outcome"]}[key]
                    new.pop(rng.choice(drop), None)
                elif how == "repeated":
                    extra = copy.deepcopy(item)
            source[(key, len(out[key]))] = item
            out[key].append(new)
            if extra is not None:
                source[(key, len(out[key]))] = item
                out[key].append(extra)
    return out, source


def _shout(name: str, rng: random.Random) -> str:
    return rng.choice(["The ", "the ", "A ", ""]) + rng.choice([name.upper(), name.title(), f"  {name} "])


# ---------------------------------------------------------------------------------- scores
def score(graph: dict[str, Any], truth_edges: set[tuple[str, str]], truth_states: dict[str, str],
          truth_transitions: set[tuple[str, str, str]], known: set[str]) -> dict[str, Any]:
    """Compare the final graph with the true final world, over what the agent ever saw (``known``)."""
    nodes = {n["id"]: n for n in graph["nodes"]}
    name = {i: normalise_name(n["name"]) for i, n in nodes.items()}
    current = [e for e in graph["edges"] if e["valid_to"] is None]
    pred = {(name[e["src_id"]], name[e["dst_id"]]) for e in current if e["relation"] == "containment"}
    truth = {(normalise_name(p), normalise_name(c)) for p, c in truth_edges if c in known}
    hit = len(pred & truth)
    state_now = {}
    for n in nodes.values():
        if n["kind"] == "state" and n["valid_to"] is None and n.get("entity_id") in nodes:
            state_now.setdefault(name[n["entity_id"]], []).append(name[n["id"]])
    right = sum(1 for obj, st in truth_states.items() if obj in known
                and state_now.get(normalise_name(obj)) == [normalise_name(f"{obj} {st}")])
    n_states = sum(1 for obj in truth_states if obj in known)
    pred_t = {(name[e["src_id"]], name[e["dst_id"]], normalise_name(e.get("action") or ""))
              for e in graph["edges"] if e["relation"] == "transition"}
    true_t = {(normalise_name(a), normalise_name(b), normalise_name(c)) for a, b, c in truth_transitions}
    entity_names = [name[i] for i, n in nodes.items() if n["kind"] == "entity" and n["valid_to"] is None]
    known_norm = {normalise_name(k) for k in known}
    return {
        "containment_precision": hit / len(pred) if pred else 1.0,
        "containment_recall": hit / len(truth) if truth else 1.0,
        "state_accuracy": right / n_states if n_states else 1.0,
        "transition_precision": len(pred_t & true_t) / len(pred_t) if pred_t else 1.0,
        "transition_recall": len(pred_t & true_t) / len(true_t) if true_t else 1.0,
        "duplicate_nodes": len(entity_names) - len(set(entity_names)),
        "unknown_nodes": len({n for n in entity_names if n not in known_norm}),
        "edges_true": len(truth), "edges_predicted": len(pred), "states_true": n_states,
        "transitions_true": len(true_t),
    }
