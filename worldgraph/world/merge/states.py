"""Merge step for states: which state of an entity holds when.

The states of one entity and state type (a group: "front door" x door_state) take turns: at any
moment at most one holds. A state asserted at the update time (in the states array, or as a
transition's dst) holds from then until another state of its group is asserted (or it is
retracted); within one delta the last one asserted for a group wins (transition dsts after the
states array), and the others named with it do not hold. The runs are recomputed from the states'
events (``merge.timeline``), so a late update lands where its time says: a late state a newer one
already replaced enters as closed history. A state node keeps its latest run as valid_from /
valid_to. A transition's src outside the dst's group (or in none) ends at the update time.
"""

from __future__ import annotations

from worldgraph.world.merge.edges import EdgesMixin


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
        held = set(winners.values()) | set(alone)
        for nid in self.asserted_states:  # named with the winner but not holding: a new one never held
            if nid not in held and nid in self.report.created["nodes"]:
                self.nodes[nid]["valid_to"] = self.at
        groups = self._members(set(winners))
        for key, nid in winners.items():
            self._relayout_nodes([*groups.get(key, []), nid], [(self.at, 0, nid)])
        for nid in alone:
            self._relayout_nodes([nid], [(self.at, 0, nid)])
        for src, dst in self.transitions:
            if src in held or src == dst or self._node(src) is None:
                continue
            if self._group(src)[0] and self._group(src) == self._group(dst):
                continue  # the dst's run ends the src's
            self._relayout_nodes(self._group_members(src), [(self.at, 1, src)])

    def _group(self, nid: str) -> tuple[str, str]:
        rec = self._node(nid) or {}
        return (rec.get("entity_id") or "", rec.get("type", ""))

    def _group_members(self, nid: str) -> list[str]:
        key = self._group(nid)
        return [*self._members({key}).get(key, []), nid] if key[0] else [nid]

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
