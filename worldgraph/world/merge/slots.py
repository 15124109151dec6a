"""Edge records, and the places that hold one thing at a time, laid on the timeline.

A slot is a place that at every moment holds at most one member:

- the parent of a child (containment is single-parent): the members are parents, the records
  the containment edges into the child;
- the object of a subject's single-valued predicate (a person ``works_at`` one company at a
  time): the members are objects, the records the subject's fact edges of that predicate;
- one fact of a multi-valued predicate (alice ``customer_of`` acme): the only member is its
  object, so the slot says when the fact holds (from an assertion until a retraction).

The records of a slot are the runs of its members on the timeline (``merge.timeline``): a new
assertion at the update time is one more event, and the slot's runs are recomputed from all of
them. So a late fact that a newer update already contradicted enters as closed history (the
member held the slot from its time until the next member's), a fact that fills a gap extends a
run, and re-asserting an older fact later gives a new record (occurrence + 1): every interval
stays in the history. A retracted node holds nothing and is held by nothing from its retraction
on: its end is an end event of the runs it takes part in.

A fact's predicate is single-valued when the delta says so (``single_valued: true``) or when
the subject already has a single-valued record of that predicate (once said, it stays so for
that subject: a model that forgets the flag does not give a person two employers). Every record
of a single-valued slot is marked ``single_valued``.

Edge identity (``ids.edge_id``): relation, the two ends, a transition's action or a fact's
predicate, and the occurrence (how many earlier, closed records of the same fact there are).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worldgraph.kg.ids import edge_id
from worldgraph.kg.records import EdgeRecord
from worldgraph.world.merge.state import (
    MergeState,
    add_evidence,
    close,
    find_edge,
    find_node,
    lay,
    new_record,
    touch_edge,
)
from worldgraph.world.merge.timeline import Event, record_events, segments, within


@dataclass(frozen=True)
class Slot:
    """The place ``owner`` has: its parent (containment), its object of ``predicate`` (fact), or
    (``only`` set) that one object of a multi-valued predicate."""

    relation: str  # containment | fact
    owner: str  # the child (containment), the subject (fact)
    predicate: str | None = None
    only: str | None = None  # a multi-valued fact's object: the slot of that one fact

    def member(self, rec: Any) -> str:
        """Who a record of this slot puts in it."""
        return str(rec["src_id"] if self.relation == "containment" else rec["dst_id"])

    def ends(self, member: str) -> tuple[str, str]:
        """(src, dst) of a record putting ``member`` in this slot."""
        return (member, self.owner) if self.relation == "containment" else (self.owner, member)


def qualifier(item: Any) -> str | None:
    """What besides its relation and ends a fact's identity holds: a transition's action, a
    fact's predicate."""
    if item.relation == "transition":
        return item.action  # type: ignore[no-any-return]
    return item.predicate if item.relation == "fact" else None


def slot_of(rec: Any) -> Slot | None:
    """The slot a record is a run of: every containment and fact edge (transitions and episodic
    edges are in none)."""
    if rec.get("relation") == "containment":
        return Slot("containment", rec["dst_id"])
    if rec.get("relation") == "fact":
        return fact_slot(rec["src_id"], rec.get("predicate"), rec["dst_id"], bool(rec.get("single_valued")))
    return None


def fact_slot(subject: str, predicate: str | None, obj: str, single: bool) -> Slot:
    """The slot of a fact: its subject's slot of the predicate when single-valued, else its own."""
    return Slot("fact", subject, predicate, None if single else obj)


# ------------------------------------------------------------ records
def new_edge(state: MergeState, item: Any, src: str, dst: str, valid_to: str | None = None) -> EdgeRecord:
    """A new record of ``item``'s fact between ``src`` and ``dst`` (the next free occurrence)."""
    qual = qualifier(item)
    occurrence = 0
    while find_edge(state, edge_id(state.t, state.env, item.relation, src, dst, qual, occurrence)) is not None:
        occurrence += 1
    eid = edge_id(state.t, state.env, item.relation, src, dst, qual, occurrence)
    fields: dict[str, Any] = {"relation": item.relation, "src_id": src, "dst_id": dst,
                              "action": qual if item.relation == "transition" else None, "occurrence": occurrence}
    if item.relation == "fact":
        fields.update(predicate=item.predicate, single_valued=bool(item.single_valued))
    on_timeline = item.relation in ("containment", "fact")
    rec: EdgeRecord = new_record(state, eid, item.confidence, timeline=on_timeline, **fields)  # type: ignore[assignment]
    rec["valid_to"] = valid_to
    add_evidence(state, rec, item.evidence, item.confidence, new=True)
    state.edges[eid] = rec
    state.report.created["edges"].append(eid)
    if state.slot_index is not None and (slot := _slot_key(rec)) is not None:
        state.slot_index.setdefault(slot, set()).add(eid)
    return rec


def confirm(state: MergeState, eid: str, item: Any) -> EdgeRecord:
    """The record gets the item's evidence (reported as merged unless created by this merge)."""
    rec = touch_edge(state, eid)
    add_evidence(state, rec, item.evidence, item.confidence)
    if eid not in state.report.created["edges"] and eid not in state.report.merged["edges"]:
        state.report.merged["edges"].append(eid)
    return rec


def records_between(state: MergeState, relation: str, src: str, dst: str, qual: str | None) -> list[EdgeRecord]:
    """Every record (occurrence 0, 1, ...) of one fact between two ends."""
    out = []
    occurrence = 0
    while (rec := find_edge(state, edge_id(state.t, state.env, relation, src, dst, qual, occurrence))) is not None:
        out.append(rec)
        occurrence += 1
    return out


def slot_records(state: MergeState, slot: Slot) -> list[EdgeRecord]:
    """The records of a slot (current or closed, view and touched), oldest first."""
    if state.slot_index is None:
        index: dict[Any, set[str]] = {}
        for records in (state.view.edges, state.edges):
            for eid, rec in records.items():
                if (key := _slot_key(rec)) is not None:
                    index.setdefault(key, set()).add(eid)
        state.slot_index = index
    ids = state.slot_index.get((slot.relation, slot.owner, slot.predicate), set())
    found = [e for eid in ids if (e := find_edge(state, eid)) is not None
             and (slot.only is None or e.get("dst_id") == slot.only)]
    return sorted(found, key=lambda e: (e.get("valid_from") or "", e["id"]))


def is_single_valued(state: MergeState, item: Any, subject: str) -> bool:
    """Whether a fact item is laid on its subject's slot: it says so, or the subject already
    has a single-valued record of its predicate (see the module doc)."""
    return bool(item.single_valued) or any(
        r.get("single_valued") for r in slot_records(state, Slot("fact", subject, item.predicate)))


def end_edge(state: MergeState, rec: EdgeRecord) -> None:
    """End the edge at the update time: a record of a slot through the slot's timeline (an
    assertion of the same member after that time starts a new interval), others directly."""
    slot = slot_of(rec)
    if slot is not None:
        relayout(state, slot, [(state.at, 1, slot.member(rec))])
    else:
        close(state, touch_edge(state, rec["id"]), "edges")


# ------------------------------------------------------------ the timeline
def relayout(state: MergeState, slot: Slot, extra: list[Event], item: Any = None) -> EdgeRecord | None:
    """Recompute the runs of ``slot`` from its records' events and ``extra`` (``merge.timeline``):
    each member's runs go to its records in time order, a run without a record gets a new one.
    ``item`` (asserted now) gives its evidence to the record whose run holds the update time,
    which is returned."""
    recs = slot_records(state, slot)
    events = [ev for r in recs for ev in record_events(r, slot.member(r))] + extra
    # a retracted node holds nothing and is held by nothing from then on (until asserted again)
    members = {slot.member(r) for r in recs} | {m for _, _, m in extra}
    events += [(t, 1, m) for t in _node_ends(state, slot.owner) for m in members]
    events += [(t, 1, m) for m in members for t in _node_ends(state, m)]
    times: dict[str, list[str]] = {}
    ended: dict[str, set[str]] = {}
    for t, kind, member in events:
        if kind == 0:
            times.setdefault(member, []).append(t)
        else:
            ended.setdefault(member, set()).add(t)
    have: dict[str, list[EdgeRecord]] = {}
    for r in recs:
        have.setdefault(slot.member(r), []).append(r)
    runs: dict[str, list[tuple[str, str | None]]] = {}
    for member, start, end in segments(events):
        runs.setdefault(member, []).append((start, end))
    target: EdgeRecord | None = None
    for member in sorted(runs):
        for k, (start, end) in enumerate(runs[member]):
            seen = within(times[member], start, end)
            ends = [end] if end is not None and end in ended.get(member, ()) else []
            holds_now = item is not None and start <= state.at and (end is None or state.at < end)
            if k < len(have.get(member, [])):
                rec = lay(state, have[member][k], "edges", start, end, seen, ends)
                if holds_now:
                    rec = confirm(state, rec["id"], item)
            else:  # a run without a record: a new interval of this member
                source = item if holds_now else _Like(slot, have[member][-1] if have.get(member) else None)
                rec = new_edge(state, source, *slot.ends(member))
                lay(state, rec, "edges", start, end, seen, ends)
            if holds_now:
                target = rec
    # A member's records beyond its runs hold no time any more (the run they stood for became
    # empty: asserted and ended at one time, or overtaken by another member at that time).
    # Each is closed as an empty interval keeping the member's events no run holds, so that
    # every later relayout sees them: a record left as it was would stay current beside the
    # slot's real member.
    for member in sorted(have):
        spare = have[member][len(runs.get(member, [])):]
        if not spare:
            continue
        held = runs.get(member, [])
        loose = sorted(t for t in times.get(member, []) if not any(within([t], s, e) for s, e in held))
        used = {e for _, e in held}
        loose_ends = sorted(t for t in ended.get(member, ()) if t not in used)
        for k, rec in enumerate(spare):
            at = min(loose + loose_ends or [rec.get("valid_from") or state.at])
            lay(state, rec, "edges", at, at, loose if k == 0 else [], loose_ends if k == 0 else [])
    if slot.relation == "fact" and slot.only is None:  # every record of a single-valued slot says so
        for r in slot_records(state, slot):
            if not r.get("single_valued"):
                touch_edge(state, r["id"])["single_valued"] = True
    return target


def _slot_key(rec: Any) -> tuple[str, str, str | None] | None:
    """The index key of the records a slot reads (a fact of any predicate is under its subject
    and predicate, single-valued or not: the predicate may become so)."""
    if rec.get("relation") == "containment":
        return ("containment", rec.get("dst_id"), None)
    if rec.get("relation") == "fact":
        return ("fact", rec.get("src_id"), rec.get("predicate"))
    return None


def _node_ends(state: MergeState, nid: str) -> list[str]:
    rec: Any = find_node(state, nid) or {}
    return list(rec.get("ends") or [])


class _Like:
    """A stand-in item for a new interval split off an existing record: its kind and confidence,
    no evidence."""

    action = None
    evidence: list[str] = []

    def __init__(self, slot: Slot, rec: Any) -> None:
        self.relation = slot.relation
        self.predicate = slot.predicate
        self.single_valued = slot.relation == "fact" and slot.only is None
        self.confidence = float((rec or {}).get("confidence", 0.5))
