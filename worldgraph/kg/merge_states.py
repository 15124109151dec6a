"""Merge step for states: which state of an entity holds when.

The states of one entity and state type (a group: "front door" x door_state) take turns: at any
moment at most one holds. Each state node keeps its latest run [valid_from, valid_to). A state
asserted at the update time ``at`` (in the states array, or as a transition's dst) wins its
group at ``at``; within one delta the last one asserted for a group wins (transition dsts after
the states array). The winner W:
- if W's run holds at ``at``: nothing moves (more evidence);
- if W's run starts later and no other run starts in between: it starts at ``at`` instead;
- else W runs from ``at`` until the next run of the group starts (current when none does): a
  late fact that a newer update already contradicted enters as closed history.
The run of another state that holds at ``at`` ends there. A transition's src that is in another
group (or none) is closed at ``at`` when it holds then. Node runs are single intervals, so a
state that held, stopped and held again keeps only its latest run; edges keep the full history.
"""

from __future__ import annotations

from worldgraph.kg.merge_base import covers, last_seen
from worldgraph.kg.merge_edges import EdgesMixin


class StatesMixin(EdgesMixin):
    def _settle_states(self) -> None:
        winners: dict[tuple[str, str], str] = {}
        alone: list[str] = []
        for nid in [*self.asserted_states, *(dst for _, dst in self.transitions)]:
            key = self._group(nid)
            if key[0]:
                winners.pop(key, None)  # re-insert: the last one asserted wins its group
                winners[key] = nid
            elif nid not in alone:
                alone.append(nid)
        groups = self._members(set(winners))
        for key, nid in winners.items():
            self._win(nid, [m for m in groups.get(key, []) if m != nid])
        for nid in alone:
            self._win(nid, [])
        done = set(winners.values()) | set(alone)
        for src, dst in self.transitions:
            rec = self._node(src)
            if src in done or rec is None or self._group(src) == self._group(dst) and self._group(src)[0]:
                continue
            if covers(rec, self.at) and last_seen(rec) <= self.at:
                self._close(self._touch_node(src), "nodes")

    def _group(self, nid: str) -> tuple[str, str]:
        rec = self._node(nid) or {}
        return (rec.get("entity_id") or "", rec.get("type", ""))

    def _members(self, needed: set[tuple[str, str]]) -> dict[tuple[str, str], list[str]]:
        """The state ids of each needed group, in one pass over the view and the touched records."""
        groups: dict[tuple[str, str], list[str]] = {}
        if not needed:
            return groups
        for records, skip in ((self.view.nodes, self.nodes), (self.nodes, None)):
            for nid, rec in records.items():
                if skip is not None and nid in skip:
                    continue
                if rec.get("kind") == "state" and rec.get("entity_id"):
                    key = (rec["entity_id"], rec.get("type", ""))
                    if key in needed:
                        groups.setdefault(key, []).append(nid)
        return groups

    def _win(self, nid: str, others: list[str]) -> None:
        at = self.at
        starts: list[str] = []
        for other in sorted(others):
            rec = self._node(other)
            if rec is None:
                continue
            if covers(rec, at):
                if last_seen(rec) > at:  # asserted again after ``at``: its run resumes then
                    self._touch_node(other)["valid_from"] = last_seen(rec)
                    starts.append(last_seen(rec))
                else:
                    self._close(self._touch_node(other), "nodes")
            elif (rec.get("valid_from") or "") > at:
                starts.append(rec["valid_from"])
        nxt = min(starts) if starts else None
        rec = self._node(nid)
        if rec is None:
            return
        if covers(rec, at):
            if rec.get("valid_to") is None and nxt is not None:
                self._close(self._touch_node(nid), "nodes", at=nxt)
        elif (rec.get("valid_from") or "") > at:
            if nxt is None or rec["valid_from"] <= nxt:
                self._touch_node(nid)["valid_from"] = at
        else:
            w = self._touch_node(nid)
            self._reopen(w, "nodes")
            if nxt is not None:
                w["valid_to"] = nxt
