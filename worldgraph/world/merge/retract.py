"""Merge step for node retraction: an entity or state item with ``retract: true``.

Retraction ends the node at the update time (an end event on its timeline; a state's group is
laid again with it, ``merge.states``) and every edge touching it that holds then (containment
through its child's timeline, ``merge.edges``); nothing is deleted. The node is found by its id
(kind, type, name), else by its name as a ref of its kind. A node that is not current at the
update time is not retracted: the item is dropped with the reason. A node not in the graph yet
(the rounds that saw it may merge later) is recorded as ended at the update time, so that those
facts, when they come, end there too. Retractions act after the delta's nodes, edges and states
are placed.
"""

from __future__ import annotations

from worldgraph.kg.ids import node_id, normalise_name, normalise_type
from worldgraph.world.merge.refs import display_name, resolve_ref
from worldgraph.world.merge.slots import end_edge
from worldgraph.world.merge.state import (
    MergeState,
    add_evidence,
    covers,
    drop,
    find_node,
    new_record,
    note,
    touch_node,
)
from worldgraph.world.merge.states import group_members
from worldgraph.world.merge.timeline import relayout_nodes


def retract_nodes(state: MergeState) -> None:
    """Apply the delta's node retractions, in the delta's order (see the module doc)."""
    for kind, e in state.node_retractions:
        item = e.item
        nid = node_id(state.t, state.env, kind, item.type, item.name)
        if find_node(state, nid) is None:
            nid = resolve_ref(state, item.name, kind) or nid
        rec = find_node(state, nid)
        if rec is None or rec.get("kind") != kind:
            # Not known yet (the rounds that saw it may merge later): recorded as ended now,
            # so that those facts, when they come, end here too.
            ended = new_record(state, nid, item.confidence, kind=kind, type=normalise_type(item.type),
                               name=display_name(item.name), norm_name=normalise_name(item.name),
                               attributes={}, entity_id=None)
            ended.update(valid_to=state.at, ends=[state.at])
            add_evidence(state, ended, item.evidence, item.confidence, new=True)
            state.nodes[nid] = ended  # type: ignore[assignment]
            state.report.created["nodes"].append(nid)
            note(state, kind, e.index, f"retract: {kind} {item.name!r} is not in the graph yet; recorded as "
                                       f"ended at {state.at}, so earlier facts about it that merge later end there")
            continue
        if not covers(rec, state.at):
            drop(state, kind, e.index, f"retract: {kind} {rec.get('name')!r} is not current "
                                       f"(valid {rec.get('valid_from')} to {rec.get('valid_to')})", e.raw)
            continue
        members = group_members(state, nid) if kind == "state" else [nid]
        relayout_nodes(state, members, [(state.at, 1, nid)])
        add_evidence(state, touch_node(state, nid), item.evidence, item.confidence)
        for edge in [x for x in {**state.view.edges, **state.edges}.values()
                     if nid in (x.get("src_id"), x.get("dst_id")) and covers(x, state.at)]:
            end_edge(state, edge)
