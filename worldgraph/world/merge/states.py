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

from worldgraph.world.merge.state import MergeState, find_node
from worldgraph.world.merge.timeline import relayout_nodes


def settle_states(state: MergeState) -> None:
    """Lay the runs of the states this delta asserted (and of the groups they take turns in), and
    end the transitions' srcs outside their dst's group (see the module doc)."""
    winners: dict[tuple[str, str], str] = {}
    alone: list[str] = []
    for nid in [*state.asserted_states, *(dst for _, dst in state.transitions)]:
        key = _group(state, nid)
        if key[0]:
            winners.pop(key, None)  # re-insert: the last one asserted wins its group
            winners[key] = nid
        elif nid not in alone:
            alone.append(nid)
    held = set(winners.values()) | set(alone)
    for nid in state.asserted_states:  # named with the winner but not holding: a new one never held
        if nid not in held and nid in state.report.created["nodes"]:
            state.nodes[nid]["valid_to"] = state.at
    groups = _members(state, set(winners))
    for key, nid in winners.items():
        relayout_nodes(state, [*groups.get(key, []), nid], [(state.at, 0, nid)])
    for nid in alone:
        relayout_nodes(state, [nid], [(state.at, 0, nid)])
    for src, dst in state.transitions:
        if src in held or src == dst or find_node(state, src) is None:
            continue
        if _group(state, src)[0] and _group(state, src) == _group(state, dst):
            continue  # the dst's run ends the src's
        relayout_nodes(state, group_members(state, src), [(state.at, 1, src)])


def _group(state: MergeState, nid: str) -> tuple[str, str]:
    """A state's group: (its entity id, its type); ("", type) for a state of no entity."""
    rec = find_node(state, nid) or {}
    return (rec.get("entity_id") or "", rec.get("type", ""))


def group_members(state: MergeState, nid: str) -> list[str]:
    """The states that take turns with ``nid`` (itself last; only itself without an entity)."""
    key = _group(state, nid)
    return [*_members(state, {key}).get(key, []), nid] if key[0] else [nid]


def _members(state: MergeState, needed: set[tuple[str, str]]) -> dict[tuple[str, str], list[str]]:
    """The state ids of each needed group, in one pass over the view and the touched records."""
    groups: dict[tuple[str, str], list[str]] = {}
    if not needed:
        return groups
    for records, skip in ((state.view.nodes, state.nodes), (state.nodes, None)):
        for nid, rec in records.items():
            if skip is not None and nid in skip:
                continue
            if rec.get("kind") == "state" and rec.get("entity_id"):
                key = (rec["entity_id"], rec.get("type", ""))
                if key in needed:
                    groups.setdefault(key, []).append(nid)
    return groups
