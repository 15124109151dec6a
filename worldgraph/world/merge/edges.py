"""Merge steps for edges: check and resolve, containment and single-valued facts on the timeline,
cycles, retraction.

Containment is single-parent at every moment, and a subject has one object of a single-valued
predicate at every moment (``single_valued: true``: a person works at one company at a time):
both are slots laid on the timeline (``merge.slots``), so a new containment closes the child's
old one and a new single-valued fact closes the subject's previous fact of that predicate, at the
update time, and a late fact lands where its time says. A multi-valued fact is on the timeline
too, as a slot of its own (it holds from an assertion until a retraction, whatever order the
updates merge in). Within one delta the last parent given for a child (the last object for a
subject's single-valued predicate) wins; the others are dropped with the reason.

No containment cycles: when current containment edges close a cycle (the box holds the bag, the
bag now holds the box), the newest edge on the cycle wins: the one asserted last (its latest
assertion, not its start: a fact asserted again later is news). The cycle's edge out of that
edge's child ends at that time (the box left the bag), and a note says so. Cycles are looked for
after all the delta's edges are placed, from every current containment edge the merge touched
(a late fact, a relayout or a broken cycle can make an edge current, not only a new assertion),
until none is left; each break closes one current edge, so this ends.

Ends: containment and facts join two entities, transitions two states, an episodic edge a node
and the scene. A predicate or ``single_valued`` on another relation is ignored (a note says so).

Retraction: an edge item with ``retract: true`` ends the edge of that relation between those ends
(and action, or predicate) that holds at the update time; when none does, the item is dropped
with the reason. Transition and episodic edges do not contradict each other: an assertion adds
evidence to the record of that fact (its valid_from is the earliest time it was seen).
"""

from __future__ import annotations

from typing import Any

from worldgraph.kg.records import EdgeRecord
from worldgraph.world.delta.parse import Entry
from worldgraph.world.merge.refs import norm_ref, resolve_ref, unresolved_reason
from worldgraph.world.merge.slots import (
    Slot,
    confirm,
    end_edge,
    fact_slot,
    is_single_valued,
    new_edge,
    qualifier,
    records_between,
    relayout,
    slot_records,
)
from worldgraph.world.merge.state import SCENE_REF, MergeState, close, covers, drop, find_edge, find_node, note, touch_edge

MAX_DEPTH = 64  # containment chains are short; a longer walk is a corrupt graph, not a cycle


def merge_edges(state: MergeState, entries: list[Entry]) -> None:
    """Merge the delta's edges in order: check each (refs resolve, the ends are of the right kind),
    then retract, place containment on the timeline, or upsert; then break containment cycles."""
    accepted: list[tuple[Entry, Any, str, str]] = []
    for e in entries:
        checked = _check_edge(state, e)
        if checked is not None:
            accepted.append((e, *checked))
    last_parent: dict[str, tuple[int, str]] = {}
    last_object: dict[tuple[str, str], tuple[int, str]] = {}  # (subject, predicate) -> (index, object)
    facts = [(e, item, src, dst) for e, item, src, dst in accepted if item.relation == "fact" and not item.retract]
    # a subject's predicate said single-valued by one item of the delta (or before it) is so for all
    one = {(src, item.predicate) for _, item, src, _ in facts if is_single_valued(state, item, src)}
    single = {e.index for e, item, src, _ in facts if (src, item.predicate) in one}  # the single-valued items
    for e, item, src, dst in accepted:
        if item.relation == "containment" and not item.retract:
            last_parent[dst] = (e.index, src)
        elif e.index in single:
            last_object[(src, item.predicate)] = (e.index, dst)
    in_cycle = _delta_cycles(last_parent)
    for e, item, src, dst in accepted:
        if item.retract:
            _retract_edge(state, e, item, src, dst)
        elif item.relation == "containment" and last_parent[dst][1] != src:
            drop(state, "edge", e.index, f"superseded by edges[{last_parent[dst][0]}]: containment is "
                 "single-parent, the last parent given for a child wins", e.raw)
        elif item.relation == "containment" and e.index in in_cycle:
            drop(state, "edge", e.index, f"would close a containment cycle with edges[{in_cycle[e.index]}] of "
                 "this delta; the later edge wins", e.raw)
        elif item.relation == "containment":
            _contain(state, e.index, item, src, dst)
        elif e.index in single and last_object[(src, item.predicate)][1] != dst:
            drop(state, "edge", e.index, f"superseded by edges[{last_object[(src, item.predicate)][0]}]: "
                 f"{item.predicate!r} is single-valued, the last object given for a subject wins", e.raw)
        elif item.relation == "fact":
            relayout(state, fact_slot(src, item.predicate, dst, e.index in single), [(state.at, 0, dst)], item)
        else:
            _upsert_edge(state, item, src, dst)
    _break_cycles(state)


def _check_edge(state: MergeState, e: Entry) -> tuple[Any, str, str] | None:
    item, raw, i = e.item, e.raw, e.index
    if item is None:
        drop(state, "edge", i, e.reason or "invalid", raw)
        return None
    rel = item.relation
    if norm_ref(item.src_ref) == SCENE_REF:
        drop(state, "edge", i, "src_ref 'scene': the scene can only be the dst of an episodic edge", raw)
        return None
    if rel != "fact" and (item.predicate is not None or item.single_valued):
        note(state, "edge", i, f"predicate and single_valued are for relation fact; ignored on {rel}")
    want = {"containment": "entity", "transition": "state", "fact": "entity"}.get(rel)
    src = resolve_ref(state, item.src_ref, want)
    if src is None:
        drop(state, "edge", i, f"src_ref {item.src_ref!r} {unresolved_reason(state, item.src_ref, want)}", raw)
        return None
    if rel == "episodic":
        if norm_ref(item.dst_ref) != SCENE_REF and item.dst_ref != state.scene_id:
            drop(state, "edge", i, f"episodic edges point to the scene: dst_ref must be 'scene', got {item.dst_ref!r}", raw)
            return None
        if state.scene_id is None:
            drop(state, "edge", i, "episodic edge needs a scene, and this update has none", raw)
            return None
        return item, src, state.scene_id
    if norm_ref(item.dst_ref) == SCENE_REF:
        drop(state, "edge", i, f"dst_ref 'scene' is only valid for episodic edges, not {rel}", raw)
        return None
    dst = resolve_ref(state, item.dst_ref, want)
    if dst is None:
        drop(state, "edge", i, f"dst_ref {item.dst_ref!r} {unresolved_reason(state, item.dst_ref, want)}", raw)
        return None
    for end, ref, nid in (("src_ref", item.src_ref, src), ("dst_ref", item.dst_ref, dst)):
        kind = find_node(state, nid)["kind"]  # type: ignore[index]
        if kind != want:
            shape = {"containment": "entity -> entity (parent -> child)",
                     "fact": "entity -> entity (subject -> object)"}.get(rel, "state -> state")
            drop(state, "edge", i, f"{rel} links {shape}; {end} {ref!r} is a {kind}", raw)
            return None
    if src == dst:
        drop(state, "edge", i, f"{rel} from a node to itself", raw)
        return None
    return item, src, dst


def _upsert_edge(state: MergeState, item: Any, src: str, dst: str) -> None:
    """Transition and episodic edges: the record of this fact holding at the update time, or the
    current one, gets the evidence; else a new record."""
    same = records_between(state, item.relation, src, dst, qualifier(item))
    holding = [e for e in same if covers(e, state.at)] or [e for e in same if e.get("valid_to") is None]
    if holding:
        rec = confirm(state, holding[0]["id"], item)
        rec["valid_from"] = min(rec.get("valid_from") or state.at, state.at)  # seen earlier than known
    else:
        new_edge(state, item, src, dst)
    if item.relation == "transition":
        state.transitions.append((src, dst))


# ------------------------------------------------------------ containment
def _contain(state: MergeState, index: int, item: Any, parent: str, child: str) -> None:
    rec = relayout(state, Slot("containment", child), [(state.at, 0, parent)], item)
    if rec is not None:
        state.asserted[rec["id"]] = index


def _current_parent_edge(state: MergeState, child: str) -> EdgeRecord | None:
    for e in sorted(slot_records(state, Slot("containment", child)), key=lambda e: e["id"]):
        if e.get("valid_to") is None:
            return e
    return None


def _break_cycles(state: MergeState) -> None:
    """Break every containment cycle through a current edge this merge touched (see the module
    doc). Untouched current edges formed a forest before the merge, so any cycle now holds a
    touched one."""
    for _ in range(len(state.edges) + 1):  # each break closes a current edge: at most one round each
        cycle = _find_cycle(state)
        if cycle is None:
            return
        _break_cycle(state, cycle)


def _find_cycle(state: MergeState) -> list[EdgeRecord] | None:
    """A cycle of current containment edges through a touched one (its edges child to
    parent, the touched edge first), or None."""
    for eid in sorted(state.edges):
        start = state.edges[eid]
        if start.get("relation") != "containment" or start.get("valid_to") is not None:
            continue
        cycle: list[EdgeRecord] = [start]
        node, seen = start["src_id"], {start["dst_id"]}
        for _ in range(MAX_DEPTH):
            if node == start["dst_id"]:
                return cycle
            if node in seen:
                break  # a cycle above this edge, not through it: found from one of its own edges
            seen.add(node)
            up = _current_parent_edge(state, node)
            if up is None:
                break
            cycle.append(up)
            node = up["src_id"]
    return None


def _break_cycle(state: MergeState, cycle: list[EdgeRecord]) -> None:
    """The edge asserted last wins; the cycle's edge out of its child ends at that time."""
    def asserted(e: Any) -> str:  # the timeline keys (seen, ends) are not in EdgeRecord
        return str(max([*(e.get("seen") or []), str(e.get("valid_from") or ""), str(e.get("last_seen") or "")]))

    newest = max(cycle, key=lambda e: (asserted(e), e["id"] in state.asserted, e["id"]))
    victim = next(e for e in cycle if e["src_id"] == newest["dst_id"])
    at = max(asserted(newest), str(victim.get("valid_from") or ""))
    relayout(state, Slot("containment", victim["dst_id"]), [(at, 1, victim["src_id"])])
    after = find_edge(state, victim["id"])
    if after is not None and after.get("valid_to") is None:
        # Not reached: the victim's run is its parent's last, asserted at or before ``at``, so
        # the end event closes it. Were it kept open, end it outright (with the event, for
        # later relayouts) rather than find the same cycle again.
        rec: Any = touch_edge(state, victim["id"])
        rec["ends"] = sorted({*(rec.get("ends") or []), at})
        close(state, rec, "edges", at)
    # the delta edge that asserted an edge of the cycle (-1: none did, a relayout made it)
    index = next((state.asserted[e["id"]] for e in cycle if e["id"] in state.asserted), -1)
    note(state, "edge", index, f"containment cycle: {victim['src_id']} -> {victim['dst_id']} closed at {at}, "
                               f"the newer fact {newest['src_id']} -> {newest['dst_id']} wins")


# ------------------------------------------------------------ retraction
def _retract_edge(state: MergeState, e: Entry, item: Any, src: str, dst: str) -> None:
    holding = [x for x in records_between(state, item.relation, src, dst, qualifier(item)) if covers(x, state.at)]
    if not holding:
        what = f"{item.relation} edge" if item.relation != "fact" else f"fact {item.predicate!r}"
        drop(state, "edge", e.index, f"retract: no {what} {item.src_ref!r} -> {item.dst_ref!r} "
                                 f"holds at {state.at}", e.raw)
        return
    end_edge(state, holding[-1])


def _delta_cycles(last_parent: dict[str, tuple[int, str]]) -> dict[int, int]:
    """Containment cycles among one delta's own edges (child -> (index, parent)): the earliest edge
    of each cycle is dropped, until none is left. Returns dropped index -> the cycle's latest index."""
    parent = dict(last_parent)
    dropped: dict[int, int] = {}
    while True:
        for child in sorted(parent):
            path: list[tuple[int, str]] = []
            node = child
            while node in parent and len(path) <= len(parent):
                index, up = parent[node]
                path.append((index, node))
                if up == child:
                    break
                node = up
            else:
                continue
            if path and parent[path[-1][1]][1] == child:
                first = min(path)
                dropped[first[0]] = max(path)[0]
                del parent[first[1]]
                break
        else:
            return dropped
