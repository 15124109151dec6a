"""Merge steps for edges: check and resolve, containment on the timeline, cycles, retraction.

Containment is single-parent at every moment. The containment records into one child are the
runs of its parents on the timeline (``merge.timeline``): a new fact "P contains C" at the update
time is one more event, and the child's runs are recomputed from all of them. So a late fact that
a newer update already contradicted enters as closed history (P held C from its time until the
next parent's), a fact that fills a gap extends a run, and re-asserting an older fact later gives
a new record (occurrence + 1): every interval of "key on table" stays in the history. A retracted
node holds nothing and is held by nothing from its retraction on.

No containment cycles: when current containment edges close a cycle (the box holds the bag, the
bag now holds the box), the newest edge on the cycle wins: the one asserted last (its latest
assertion, not its start: a fact asserted again later is news). The cycle's edge out of that
edge's child ends at that time (the box left the bag), and a note says so. Cycles are looked for
after all the delta's edges are placed, from every current containment edge the merge touched
(a late fact, a relayout or a broken cycle can make an edge current, not only a new assertion),
until none is left; each break closes one current edge, so this ends.

Retraction: an edge item with ``retract: true`` ends the edge of that relation between those ends
(and action) that holds at the update time; when none does, the item is dropped with the reason.
Transition and episodic edges do not contradict each other: an assertion adds evidence to the
record of that fact (its valid_from is the earliest time it was seen).
"""

from __future__ import annotations

from typing import Any

from worldgraph.kg.ids import edge_id
from worldgraph.kg.records import EdgeRecord
from worldgraph.world.delta.parse import Entry
from worldgraph.world.merge.refs import norm_ref, resolve_ref, unresolved_reason
from worldgraph.world.merge.state import (
    SCENE_REF,
    MergeState,
    add_evidence,
    close,
    covers,
    drop,
    find_edge,
    find_node,
    lay,
    new_record,
    note,
    touch_edge,
)
from worldgraph.world.merge.timeline import Event, record_events, segments, within

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
    for e, item, src, dst in accepted:
        if item.relation == "containment" and not item.retract:
            last_parent[dst] = (e.index, src)
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
    want = {"containment": "entity", "transition": "state"}.get(rel)
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
            shape = "entity -> entity (parent -> child)" if rel == "containment" else "state -> state"
            drop(state, "edge", i, f"{rel} links {shape}; {end} {ref!r} is a {kind}", raw)
            return None
    if src == dst:
        drop(state, "edge", i, f"{rel} from a node to itself", raw)
        return None
    return item, src, dst


# ------------------------------------------------------------ records
def _new_edge(state: MergeState, item: Any, src: str, dst: str, valid_to: str | None = None) -> EdgeRecord:
    action = item.action if item.relation == "transition" else None
    occurrence = 0
    while find_edge(state, edge_id(state.t, state.env, item.relation, src, dst, action, occurrence)) is not None:
        occurrence += 1
    eid = edge_id(state.t, state.env, item.relation, src, dst, action, occurrence)
    rec: EdgeRecord = new_record(  # type: ignore[assignment]
        state, eid, item.confidence, timeline=item.relation == "containment", relation=item.relation, src_id=src,
        dst_id=dst, action=action, occurrence=occurrence)
    rec["valid_to"] = valid_to
    add_evidence(state, rec, item.evidence, item.confidence, new=True)
    state.edges[eid] = rec
    state.report.created["edges"].append(eid)
    if state.containment_into is not None and item.relation == "containment":
        state.containment_into.setdefault(dst, set()).add(eid)
    return rec


def _confirm(state: MergeState, eid: str, item: Any) -> EdgeRecord:
    rec = touch_edge(state, eid)
    add_evidence(state, rec, item.evidence, item.confidence)
    if eid not in state.report.created["edges"] and eid not in state.report.merged["edges"]:
        state.report.merged["edges"].append(eid)
    return rec


def _upsert_edge(state: MergeState, item: Any, src: str, dst: str) -> None:
    """Transition and episodic edges: the record of this fact holding at the update time, or
    the current one, gets the evidence; else a new record."""
    action = item.action if item.relation == "transition" else None
    same = [e for e in _records_between(state, item.relation, src, dst, action)]
    holding = [e for e in same if covers(e, state.at)] or [e for e in same if e.get("valid_to") is None]
    if holding:
        rec = _confirm(state, holding[0]["id"], item)
        rec["valid_from"] = min(rec.get("valid_from") or state.at, state.at)  # seen earlier than known
    else:
        _new_edge(state, item, src, dst)
    if item.relation == "transition":
        state.transitions.append((src, dst))


def _records_between(state: MergeState, relation: str, src: str, dst: str, action: str | None) -> list[EdgeRecord]:
    out = []
    occurrence = 0
    while (rec := find_edge(state, edge_id(state.t, state.env, relation, src, dst, action, occurrence))) is not None:
        out.append(rec)
        occurrence += 1
    return out


# ------------------------------------------------------------ containment
def _contain(state: MergeState, index: int, item: Any, parent: str, child: str) -> None:
    rec = _relayout_child(state, child, [(state.at, 0, parent)], item)
    if rec is not None:
        state.asserted[rec["id"]] = index


def _relayout_child(state: MergeState, child: str, extra: list[Event], item: Any = None) -> EdgeRecord | None:
    """Recompute the containment runs into ``child`` from its records' events and ``extra``
    (``merge.timeline``): each parent's runs go to its records in time order, a run without a
    record gets a new one. ``item`` (asserted now) gives its evidence to the record whose run
    holds the update time, which is returned."""
    recs = sorted((e for eid in _containment_edges_into(state, child) if (e := find_edge(state, eid)) is not None),
                  key=lambda e: (e.get("valid_from") or "", e["id"]))
    events = [ev for r in recs for ev in record_events(r, r["src_id"])] + extra
    # a retracted node holds nothing and is held by nothing from then on (until asserted again)
    parents = {r["src_id"] for r in recs} | {m for _, _, m in extra}
    events += [(t, 1, p) for t in _node_ends(state, child) for p in parents]
    events += [(t, 1, p) for p in parents for t in _node_ends(state, p)]
    times: dict[str, list[str]] = {}
    ended: dict[str, set[str]] = {}
    for t, kind, member in events:
        if kind == 0:
            times.setdefault(member, []).append(t)
        else:
            ended.setdefault(member, set()).add(t)
    have: dict[str, list[EdgeRecord]] = {}
    for r in recs:
        have.setdefault(r["src_id"], []).append(r)
    runs: dict[str, list[tuple[str, str | None]]] = {}
    for member, start, end in segments(events):
        runs.setdefault(member, []).append((start, end))
    target: EdgeRecord | None = None
    for parent in sorted(runs):
        for k, (start, end) in enumerate(runs[parent]):
            seen = within(times[parent], start, end)
            ends = [end] if end is not None and end in ended.get(parent, ()) else []
            holds_now = item is not None and start <= state.at and (end is None or state.at < end)
            if k < len(have.get(parent, [])):
                rec = lay(state, have[parent][k], "edges", start, end, seen, ends)
                if holds_now:
                    rec = _confirm(state, rec["id"], item)
            else:  # a run without a record: a new interval of this parent
                source = item if holds_now else _Like(have[parent][-1] if have.get(parent) else None)
                rec = _new_edge(state, source, parent, child)
                lay(state, rec, "edges", start, end, seen, ends)
            if holds_now:
                target = rec
    # A parent's records beyond its runs hold no time any more (the run they stood for became
    # empty: asserted and ended at one time, or overtaken by another parent at that time).
    # Each is closed as an empty interval keeping the parent's events no run holds, so that
    # every later relayout sees them: a record left as it was would stay current beside the
    # child's real parent.
    for parent in sorted(have):
        spare = have[parent][len(runs.get(parent, [])):]
        if not spare:
            continue
        held = runs.get(parent, [])
        loose = sorted(t for t in times.get(parent, []) if not any(within([t], s, e) for s, e in held))
        used = {e for _, e in held}
        loose_ends = sorted(t for t in ended.get(parent, ()) if t not in used)
        for k, rec in enumerate(spare):
            at = min(loose + loose_ends or [rec.get("valid_from") or state.at])
            lay(state, rec, "edges", at, at, loose if k == 0 else [], loose_ends if k == 0 else [])
    return target


def _node_ends(state: MergeState, nid: str) -> list[str]:
    rec: Any = find_node(state, nid) or {}
    return list(rec.get("ends") or [])


def _containment_edges_into(state: MergeState, dst: str) -> set[str]:
    """Ids of the containment edges (current or closed) into ``dst``, view and touched."""
    if state.containment_into is None:
        index: dict[Any, set[str]] = {}
        for records in (state.view.edges, state.edges):
            for eid, e in records.items():
                if e.get("relation") == "containment":
                    index.setdefault(e.get("dst_id"), set()).add(eid)
        state.containment_into = index
    return state.containment_into.get(dst, set())


def _current_parent_edge(state: MergeState, child: str) -> EdgeRecord | None:
    for eid in sorted(_containment_edges_into(state, child)):
        e = find_edge(state, eid)
        if e is not None and e.get("valid_to") is None:
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
    _relayout_child(state, victim["dst_id"], [(at, 1, victim["src_id"])])
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
    action = item.action if item.relation == "transition" else None
    holding = [x for x in _records_between(state, item.relation, src, dst, action) if covers(x, state.at)]
    if not holding:
        drop(state, "edge", e.index, f"retract: no {item.relation} edge {item.src_ref!r} -> {item.dst_ref!r} "
                                 f"holds at {state.at}", e.raw)
        return
    end_edge(state, holding[-1])


def end_edge(state: MergeState, rec: EdgeRecord) -> None:
    """End the edge at the update time: a containment edge through its child's timeline (an
    assertion of the same parent after that time starts a new interval), others directly."""
    if rec.get("relation") == "containment":
        _relayout_child(state, rec["dst_id"], [(state.at, 1, rec["src_id"])])
    else:
        close(state, touch_edge(state, rec["id"]), "edges")


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


class _Like:
    """A stand-in item for a new interval split off an existing record: its confidence, no evidence."""

    relation = "containment"
    action = None
    evidence: list[str] = []

    def __init__(self, rec: Any) -> None:
        self.confidence = float((rec or {}).get("confidence", 0.5))
