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
from worldgraph.world.merge.refs import RefsMixin, norm_ref
from worldgraph.world.merge.state import SCENE_REF, covers
from worldgraph.world.merge.timeline import Event, record_events, segments, within

MAX_DEPTH = 64  # containment chains are short; a longer walk is a corrupt graph, not a cycle


class EdgesMixin(RefsMixin):
    transitions: list[tuple[str, str]]
    _containment_into: dict[Any, set[str]] | None
    _asserted: dict[str, int]  # containment edge id -> index of the delta edge that asserted it

    def _init_edges(self) -> None:
        self.transitions = []
        self._containment_into = None
        self._asserted = {}

    def _edges(self, entries: list[Entry]) -> None:
        accepted: list[tuple[Entry, Any, str, str]] = []
        for e in entries:
            checked = self._check_edge(e)
            if checked is not None:
                accepted.append((e, *checked))
        last_parent: dict[str, tuple[int, str]] = {}
        for e, item, src, dst in accepted:
            if item.relation == "containment" and not item.retract:
                last_parent[dst] = (e.index, src)
        in_cycle = _delta_cycles(last_parent)
        for e, item, src, dst in accepted:
            if item.retract:
                self._retract_edge(e, item, src, dst)
            elif item.relation == "containment" and last_parent[dst][1] != src:
                self._drop("edge", e.index, f"superseded by edges[{last_parent[dst][0]}]: containment is "
                           "single-parent, the last parent given for a child wins", e.raw)
            elif item.relation == "containment" and e.index in in_cycle:
                self._drop("edge", e.index, f"would close a containment cycle with edges[{in_cycle[e.index]}] of "
                           "this delta; the later edge wins", e.raw)
            elif item.relation == "containment":
                self._contain(e.index, item, src, dst)
            else:
                self._upsert_edge(item, src, dst)
        self._break_cycles()

    def _check_edge(self, e: Entry) -> tuple[Any, str, str] | None:
        item, raw, i = e.item, e.raw, e.index
        if item is None:
            self._drop("edge", i, e.reason or "invalid", raw)
            return None
        rel = item.relation
        if norm_ref(item.src_ref) == SCENE_REF:
            self._drop("edge", i, "src_ref 'scene': the scene can only be the dst of an episodic edge", raw)
            return None
        want = {"containment": "entity", "transition": "state"}.get(rel)
        src = self._resolve(item.src_ref, want)
        if src is None:
            self._drop("edge", i, f"src_ref {item.src_ref!r} {self._unresolved(item.src_ref, want)}", raw)
            return None
        if rel == "episodic":
            if norm_ref(item.dst_ref) != SCENE_REF and item.dst_ref != self.scene_id:
                self._drop("edge", i, f"episodic edges point to the scene: dst_ref must be 'scene', got {item.dst_ref!r}", raw)
                return None
            if self.scene_id is None:
                self._drop("edge", i, "episodic edge needs a scene, and this update has none", raw)
                return None
            return item, src, self.scene_id
        if norm_ref(item.dst_ref) == SCENE_REF:
            self._drop("edge", i, f"dst_ref 'scene' is only valid for episodic edges, not {rel}", raw)
            return None
        dst = self._resolve(item.dst_ref, want)
        if dst is None:
            self._drop("edge", i, f"dst_ref {item.dst_ref!r} {self._unresolved(item.dst_ref, want)}", raw)
            return None
        for end, ref, nid in (("src_ref", item.src_ref, src), ("dst_ref", item.dst_ref, dst)):
            kind = self._node(nid)["kind"]  # type: ignore[index]
            if kind != want:
                shape = "entity -> entity (parent -> child)" if rel == "containment" else "state -> state"
                self._drop("edge", i, f"{rel} links {shape}; {end} {ref!r} is a {kind}", raw)
                return None
        if src == dst:
            self._drop("edge", i, f"{rel} from a node to itself", raw)
            return None
        return item, src, dst

    # ------------------------------------------------------------ records
    def _new_edge(self, item: Any, src: str, dst: str, valid_to: str | None = None) -> EdgeRecord:
        action = item.action if item.relation == "transition" else None
        occurrence = 0
        while self._edge(edge_id(self.t, self.env, item.relation, src, dst, action, occurrence)) is not None:
            occurrence += 1
        eid = edge_id(self.t, self.env, item.relation, src, dst, action, occurrence)
        rec: EdgeRecord = self._new_record(  # type: ignore[assignment]
            eid, item.confidence, timeline=item.relation == "containment", relation=item.relation, src_id=src,
            dst_id=dst, action=action, occurrence=occurrence)
        rec["valid_to"] = valid_to
        self._add_evidence(rec, item.evidence, item.confidence, new=True)
        self.edges[eid] = rec
        self.report.created["edges"].append(eid)
        if self._containment_into is not None and item.relation == "containment":
            self._containment_into.setdefault(dst, set()).add(eid)
        return rec

    def _confirm(self, eid: str, item: Any) -> EdgeRecord:
        rec = self._touch_edge(eid)
        self._add_evidence(rec, item.evidence, item.confidence)
        if eid not in self.report.created["edges"] and eid not in self.report.merged["edges"]:
            self.report.merged["edges"].append(eid)
        return rec

    def _upsert_edge(self, item: Any, src: str, dst: str) -> None:
        """Transition and episodic edges: the record of this fact holding at the update time, or
        the current one, gets the evidence; else a new record."""
        action = item.action if item.relation == "transition" else None
        same = [e for e in self._records_between(item.relation, src, dst, action)]
        holding = [e for e in same if covers(e, self.at)] or [e for e in same if e.get("valid_to") is None]
        if holding:
            rec = self._confirm(holding[0]["id"], item)
            rec["valid_from"] = min(rec.get("valid_from") or self.at, self.at)  # seen earlier than known
        else:
            self._new_edge(item, src, dst)
        if item.relation == "transition":
            self.transitions.append((src, dst))

    def _records_between(self, relation: str, src: str, dst: str, action: str | None) -> list[EdgeRecord]:
        out = []
        occurrence = 0
        while (rec := self._edge(edge_id(self.t, self.env, relation, src, dst, action, occurrence))) is not None:
            out.append(rec)
            occurrence += 1
        return out

    # ------------------------------------------------------------ containment
    def _contain(self, index: int, item: Any, parent: str, child: str) -> None:
        rec = self._relayout_child(child, [(self.at, 0, parent)], item)
        if rec is not None:
            self._asserted[rec["id"]] = index

    def _relayout_child(self, child: str, extra: list[Event], item: Any = None) -> EdgeRecord | None:
        """Recompute the containment runs into ``child`` from its records' events and ``extra``
        (``merge.timeline``): each parent's runs go to its records in time order, a run without a
        record gets a new one. ``item`` (asserted now) gives its evidence to the record whose run
        holds the update time, which is returned."""
        recs = sorted((e for eid in self._containment_edges_into(child) if (e := self._edge(eid)) is not None),
                      key=lambda e: (e.get("valid_from") or "", e["id"]))
        events = [ev for r in recs for ev in record_events(r, r["src_id"])] + extra
        # a retracted node holds nothing and is held by nothing from then on (until asserted again)
        parents = {r["src_id"] for r in recs} | {m for _, _, m in extra}
        events += [(t, 1, p) for t in self._node_ends(child) for p in parents]
        events += [(t, 1, p) for p in parents for t in self._node_ends(p)]
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
                holds_now = item is not None and start <= self.at and (end is None or self.at < end)
                if k < len(have.get(parent, [])):
                    rec = self._lay(have[parent][k], "edges", start, end, seen, ends)
                    if holds_now:
                        rec = self._confirm(rec["id"], item)
                else:  # a run without a record: a new interval of this parent
                    source = item if holds_now else _Like(have[parent][-1] if have.get(parent) else None)
                    rec = self._new_edge(source, parent, child)
                    self._lay(rec, "edges", start, end, seen, ends)
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
                at = min(loose + loose_ends or [rec.get("valid_from") or self.at])
                self._lay(rec, "edges", at, at, loose if k == 0 else [], loose_ends if k == 0 else [])
        return target

    def _node_ends(self, nid: str) -> list[str]:
        rec: Any = self._node(nid) or {}
        return list(rec.get("ends") or [])

    def _containment_edges_into(self, dst: str) -> set[str]:
        """Ids of the containment edges (current or closed) into ``dst``, view and touched."""
        if self._containment_into is None:
            index: dict[Any, set[str]] = {}
            for records in (self.view.edges, self.edges):
                for eid, e in records.items():
                    if e.get("relation") == "containment":
                        index.setdefault(e.get("dst_id"), set()).add(eid)
            self._containment_into = index
        return self._containment_into.get(dst, set())

    def _current_parent_edge(self, child: str) -> EdgeRecord | None:
        for eid in sorted(self._containment_edges_into(child)):
            e = self._edge(eid)
            if e is not None and e.get("valid_to") is None:
                return e
        return None

    def _break_cycles(self) -> None:
        """Break every containment cycle through a current edge this merge touched (see the module
        doc). Untouched current edges formed a forest before the merge, so any cycle now holds a
        touched one."""
        for _ in range(len(self.edges) + 1):  # each break closes a current edge: at most one round each
            cycle = self._find_cycle()
            if cycle is None:
                return
            self._break_cycle(cycle)

    def _find_cycle(self) -> list[EdgeRecord] | None:
        """A cycle of current containment edges through a touched one (its edges child to
        parent, the touched edge first), or None."""
        for eid in sorted(self.edges):
            start = self.edges[eid]
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
                up = self._current_parent_edge(node)
                if up is None:
                    break
                cycle.append(up)
                node = up["src_id"]
        return None

    def _break_cycle(self, cycle: list[EdgeRecord]) -> None:
        """The edge asserted last wins; the cycle's edge out of its child ends at that time."""
        def asserted(e: Any) -> str:  # the timeline keys (seen, ends) are not in EdgeRecord
            return str(max([*(e.get("seen") or []), str(e.get("valid_from") or ""), str(e.get("last_seen") or "")]))

        newest = max(cycle, key=lambda e: (asserted(e), e["id"] in self._asserted, e["id"]))
        victim = next(e for e in cycle if e["src_id"] == newest["dst_id"])
        at = max(asserted(newest), str(victim.get("valid_from") or ""))
        self._relayout_child(victim["dst_id"], [(at, 1, victim["src_id"])])
        after = self._edge(victim["id"])
        if after is not None and after.get("valid_to") is None:
            # Not reached: the victim's run is its parent's last, asserted at or before ``at``, so
            # the end event closes it. Were it kept open, end it outright (with the event, for
            # later relayouts) rather than find the same cycle again.
            rec: Any = self._touch_edge(victim["id"])
            rec["ends"] = sorted({*(rec.get("ends") or []), at})
            self._close(rec, "edges", at)
        # the delta edge that asserted an edge of the cycle (-1: none did, a relayout made it)
        index = next((self._asserted[e["id"]] for e in cycle if e["id"] in self._asserted), -1)
        self._note("edge", index, f"containment cycle: {victim['src_id']} -> {victim['dst_id']} closed at {at}, "
                               f"the newer fact {newest['src_id']} -> {newest['dst_id']} wins")

    # ------------------------------------------------------------ retraction
    def _retract_edge(self, e: Entry, item: Any, src: str, dst: str) -> None:
        action = item.action if item.relation == "transition" else None
        holding = [x for x in self._records_between(item.relation, src, dst, action) if covers(x, self.at)]
        if not holding:
            self._drop("edge", e.index, f"retract: no {item.relation} edge {item.src_ref!r} -> {item.dst_ref!r} "
                                        f"holds at {self.at}", e.raw)
            return
        self._end_edge(holding[-1])

    def _end_edge(self, rec: EdgeRecord) -> None:
        """End the edge at the update time: a containment edge through its child's timeline (an
        assertion of the same parent after that time starts a new interval), others directly."""
        if rec.get("relation") == "containment":
            self._relayout_child(rec["dst_id"], [(self.at, 1, rec["src_id"])])
        else:
            self._close(self._touch_edge(rec["id"]), "edges")


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
