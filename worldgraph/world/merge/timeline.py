"""Runs on the timeline: who holds a place (the parent of a child, the state of an entity, an entity
being there at all) at every moment, computed from the assertions and ends recorded on records.

Every record whose truth changes over time keeps the update times that asserted it (``seen``, the
latest ``SEEN_KEEP``) and the times something ended it (``ends``: a retraction, a containment cycle
broken). From those events the runs are recomputed on every merge that touches them, so the result
is the same whatever order the updates were merged in: an update that arrives late splits the run
it falls into (a late fact that a newer one already contradicted enters as closed history), and a
run's record keeps the evidence. A record's ``valid_from`` is an assertion too (it held then), so
runs longer than ``SEEN_KEEP`` assertions keep their start.

Nodes on the timeline (``relayout_nodes``): an entity holds from each assertion until its
retraction; the states of one group take turns (``merge.states``). A node keeps its latest run as
``valid_from`` / ``valid_to``. Containment runs are laid by ``merge.edges`` (one child's parents).
"""

from __future__ import annotations

from typing import Any

from worldgraph.world.merge.state import MergeState, find_node, lay

SEEN_KEEP = 32
Event = tuple[str, int, str]  # (time, 0 = asserted / 1 = ended, member)
Segment = tuple[str, str, "str | None"]  # (member, start, end; None: still holds)


def record_events(rec: Any, member: str) -> list[Event]:
    """The events a record carries, for the member (parent id, node id) it stands for."""
    start, end = rec.get("valid_from"), rec.get("valid_to")
    times = set(rec.get("seen") or [])
    if start and (end is None or end > start):
        times.add(start)
    if "seen" in rec:
        ends = list(rec.get("ends") or [])
    else:  # a record written before events were kept: its last assertion and its end are events
        if rec.get("last_seen") and (end is None or rec["last_seen"] < end):
            times.add(rec["last_seen"])
        ends = [end] if end is not None else []
    return [(t, 0, member) for t in times] + [(t, 1, member) for t in ends]


def segments(events: list[Event]) -> list[Segment]:
    """The runs the events give: a member holds from its assertion until another member is asserted
    or its own end comes. At one time, assertions come before ends and members in id order."""
    out: list[list[Any]] = []
    holder: str | None = None
    for t, kind, member in sorted(set(events)):
        if kind == 1:
            if holder == member:
                out[-1][2] = t
                holder = None
        elif holder != member:
            if holder is not None:
                out[-1][2] = t
            out.append([member, t, None])
            holder = member
    return [(m, s, e) for m, s, e in out if e is None or e > s]


def within(times: list[str], start: str, end: str | None) -> list[str]:
    """The times of a run [start, end), the latest ``SEEN_KEEP``."""
    return sorted(t for t in times if t >= start and (end is None or t < end))[-SEEN_KEEP:]


def relayout_nodes(state: MergeState, members: list[str], extra: list[Event]) -> None:
    """Recompute which of ``members`` holds when (a node's latest run becomes its valid_from /
    valid_to) from their events and ``extra``."""
    recs = {m: r for m in dict.fromkeys(members) if (r := find_node(state, m)) is not None}
    events = [ev for m, r in recs.items() for ev in record_events(r, m)] + extra
    latest = {member: (start, end) for member, start, end in segments(events)}
    for m, rec in recs.items():
        if m not in latest:
            continue  # no run: a state that lost its group at the only time it was named
        start, end = latest[m]
        seen = sorted({t for t, kind, who in events if who == m and kind == 0})[-SEEN_KEEP:]
        ends = sorted({t for t, kind, who in events if who == m and kind == 1})[-SEEN_KEEP:]
        lay(state, rec, "nodes", start, end, seen, ends)
