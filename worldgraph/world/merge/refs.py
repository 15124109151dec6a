"""Merge steps for nodes and refs: upsert entities and states, resolve refs.

Identity: ``ids.node_id(kind, type, name)``: the same kind, type and normalised name is the same
node, in this delta and across runs. An item repeating an earlier item's ref with the same node
is merged once (a note says so); a ref used for another node is dropped as a duplicate.
Attributes: the values of the latest update win; an older (late) update only fills gaps.

Refs (docs/architecture.md, "Graph delta"): a ref names an item of the same delta (its ``ref``),
an existing node (its id), a node by ``type:name``, or a node by name alone when exactly one node
(of the kind the place needs) has that name. Refs and names are compared after normalisation
(case, a leading article, whitespace, punctuation at the ends: ``ids.normalise_name``), so
``"The BRASS KEY"`` and ``brass key`` are one. Same-delta refs come first, then ids, then
``type:name``, then the name. A node keeps a display name: the spelling first seen, cleaned
(whitespace, a leading article, end punctuation), replaced only by one that is not all capitals
when it is.
"""

from __future__ import annotations

import re
from typing import Any

from worldgraph.kg.ids import is_uuid, node_id, normalise_name, normalise_type
from worldgraph.kg.records import NodeKind, NodeRecord
from worldgraph.world.delta.parse import ParsedDelta
from worldgraph.world.merge.state import (
    SCENE_REF,
    MergeState,
    add_evidence,
    drop,
    find_node,
    last_seen,
    new_record,
    note,
    touch_node,
)
from worldgraph.world.merge.timeline import relayout_nodes

NODE_KINDS: tuple[tuple[str, NodeKind], ...] = (("entities", "entity"), ("states", "state"))
_ARTICLE = re.compile(r"^(?:a|an|the)\s+(?=\S)", re.I)
_END_PUNCT = re.compile(r"[\s.,;:!?]+$")


def norm_ref(ref: str) -> str:
    """The key refs are compared by: the normalised name, or the trimmed lower-case ref."""
    return normalise_name(ref) or ref.strip().lower()


def display_name(name: str) -> str:
    """``"  The BRASS  key. "`` -> ``"BRASS key"``: whitespace collapsed, no leading article or end
    punctuation (the raw name when nothing would be left)."""
    text = _END_PUNCT.sub("", " ".join(name.split()))
    text = _ARTICLE.sub("", text)
    return text or name.strip()


def _shouting(name: str) -> bool:
    return any(c.isalpha() for c in name) and name == name.upper() and name != name.lower()


def ref_ids(tenant_id: str, env_name: str, ref: str, want_kind: str | None = None) -> list[str]:
    """Node ids a non-local ref may name: itself when it is an id, else ``type:name`` in both kinds."""
    if is_uuid(ref.strip().lower()):
        return [ref.strip().lower()]
    if ":" not in ref:
        return []
    typ, name = ref.split(":", 1)
    if not normalise_type(typ) or not normalise_name(name):
        return []
    kinds = ["entity", "state"] if want_kind != "state" else ["state", "entity"]
    return [node_id(tenant_id, env_name, kind, typ, name) for kind in kinds]


# ---------------------------------------------------------------- nodes
def merge_nodes(state: MergeState, delta: ParsedDelta) -> list[tuple[int, str, str | None]]:
    """Upsert the delta's entities, then its states (retractions are kept for later: they act
    after the edges). Returns the states' ``(index, node id, entity_ref)`` to resolve once every
    node of the delta is known."""
    state_refs: list[tuple[int, str, str | None]] = []
    for key, kind in NODE_KINDS:
        for e in delta.entries(key):
            raw_ref = e.raw.get("ref") if isinstance(e.raw, dict) else None
            if e.item is None:
                drop(state, kind, e.index, e.reason or "invalid", e.raw)
                if isinstance(raw_ref, (str, int)) and not isinstance(raw_ref, bool) and str(raw_ref).strip():
                    state.dropped_refs.setdefault(norm_ref(str(raw_ref)), f"{key}[{e.index}]")
                continue
            item = e.item
            ref = norm_ref(item.ref) if item.ref is not None else None
            if ref == SCENE_REF:
                drop(state, kind, e.index, "ref 'scene' is reserved for the update's scene", e.raw)
                continue
            if item.retract:
                state.node_retractions.append((kind, e))
                continue
            nid = node_id(state.t, state.env, kind, item.type, item.name)
            if ref is not None and ref in state.refs:
                if state.refs[ref] == nid:  # the same item again (a repeated fact): merged once
                    note(state, kind, e.index, f"repeats {state.ref_owner[ref]}; merged once")
                    if kind == "state" and item.entity_ref:  # a repaired entity_ref still counts
                        state_refs.append((e.index, nid, item.entity_ref))
                else:
                    drop(state, kind, e.index, f"duplicate ref {item.ref!r}: first used by {state.ref_owner[ref]}",
                         e.raw)
                continue
            for problem in item.attribute_problems:
                note(state, kind, e.index, problem)
            upsert_node(state, nid, kind, item)
            if ref is not None:
                state.refs[ref], state.ref_owner[ref] = nid, f"{key}[{e.index}]"
            names = state.local_names.setdefault(normalise_name(item.name), [])
            if nid not in names:
                names.append(nid)
            if kind == "state":
                state.asserted_states.append(nid)
                state_refs.append((e.index, nid, item.entity_ref))
            elif nid not in state.asserted_entities:
                state.asserted_entities.append(nid)
    return state_refs


def upsert_node(state: MergeState, nid: str, kind: NodeKind, item: Any) -> None:
    """A new node, or the existing one with the item's attributes, name and evidence."""
    old = find_node(state, nid)
    if old is None:
        rec: NodeRecord = new_record(  # type: ignore[assignment]
            state, nid, item.confidence, kind=kind, type=normalise_type(item.type), name=display_name(item.name),
            norm_name=normalise_name(item.name), attributes=dict(item.attributes), entity_id=None)
        add_evidence(state, rec, item.evidence, item.confidence, new=True)
        state.nodes[nid] = rec
        state.report.created["nodes"].append(nid)
        return
    newer = state.at >= last_seen(old)
    rec = touch_node(state, nid)
    # attributes: the values of the latest update win; an older update only fills gaps
    rec["attributes"] = ({**rec.get("attributes", {}), **item.attributes} if newer
                         else {**item.attributes, **rec.get("attributes", {})})
    name = display_name(item.name)
    if _shouting(rec.get("name", "")) and not _shouting(name):
        rec["name"] = name
    add_evidence(state, rec, item.evidence, item.confidence)
    if nid not in state.report.created["nodes"] and nid not in state.report.merged["nodes"]:
        state.report.merged["nodes"].append(nid)


def entity_runs(state: MergeState) -> None:
    """An entity is there from its first assertion until a retraction (and again after it)."""
    for nid in state.asserted_entities:
        relayout_nodes(state, [nid], [(state.at, 0, nid)])


def entity_refs(state: MergeState, state_refs: list[tuple[int, str, str | None]]) -> None:
    """Give each asserted state the entity its ``entity_ref`` names (a note when it names none)."""
    for i, nid, ref in state_refs:
        if ref is None:
            continue
        eid = resolve_ref(state, ref, "entity")
        if eid is None:
            if not state.nodes[nid].get("entity_id"):  # (an earlier item or merge may have given it)
                note(state, "state", i, f"entity_ref {ref!r} {unresolved_reason(state, ref, 'entity')}; "
                                        "state kept without that entity")
        elif find_node(state, eid)["kind"] != "entity":  # type: ignore[index]
            note(state, "state", i, f"entity_ref {ref!r} names a state, not an entity; state kept without it")
        else:
            state.nodes[nid]["entity_id"] = eid


# ---------------------------------------------------------------- refs
def resolve_ref(state: MergeState, ref: str, want_kind: str | None) -> str | None:
    """The node id ``ref`` names (see the module doc for the order), or None."""
    key = norm_ref(ref)
    if key in state.refs:
        return state.refs[key]
    for nid in ref_ids(state.t, state.env, ref, want_kind):
        if find_node(state, nid) is not None:
            return nid
    found = _by_name_alone(state, ref, want_kind)
    return found[0] if len(found) == 1 else None


def _by_name_alone(state: MergeState, ref: str, want_kind: str | None) -> list[str]:
    """Nodes whose normalised name is the ref's: this delta's first, else the graph's; only
    those of ``want_kind`` when some are."""
    name = normalise_name(ref)
    if not name:
        return []
    found = list(state.local_names.get(name, []))
    if not found:
        if state.by_name is None:
            state.by_name = {}
            for nid, rec in state.view.nodes.items():
                state.by_name.setdefault(str(rec.get("norm_name") or normalise_name(rec.get("name", ""))),
                                         []).append(nid)
        found = sorted(state.by_name.get(name, []))
    if want_kind is not None:
        of_kind = [n for n in found if (find_node(state, n) or {}).get("kind") == want_kind]
        found = of_kind or found
    return found


def unresolved_reason(state: MergeState, ref: str, want_kind: str | None = None) -> str:
    """Why ``ref`` names no node: its item was dropped, it names several, or nothing has it."""
    key = norm_ref(ref)
    if key in state.dropped_refs:
        return f"names {state.dropped_refs[key]}, which was dropped"
    several = _by_name_alone(state, ref, want_kind)
    if len(several) > 1:
        types = sorted({f"{(find_node(state, n) or {}).get('type')}:{(find_node(state, n) or {}).get('name')}"
                        for n in several})
        return f"names {len(several)} nodes ({', '.join(types)}); use type:name"
    return "does not resolve to a node in this delta or the graph"
