"""Merge steps for nodes and refs: upsert entities and states, resolve refs, retract nodes.

Refs (ARCHITECTURE "Graph delta"): a ref names an item of the same delta (its ``ref``), an
existing node (its id), a node by ``type:name``, or a node by name alone when exactly one node
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
from worldgraph.world.delta.parse import Entry, ParsedDelta
from worldgraph.world.merge.state import SCENE_REF, MergeBase, covers, last_seen
from worldgraph.world.merge.timeline import SEEN_KEEP, Event, record_events, segments

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


class RefsMixin(MergeBase):
    refs: dict[str, str]  # normalised same-delta ref -> node id
    ref_owner: dict[str, str]  # normalised ref -> "entities[0]"
    dropped_refs: dict[str, str]  # normalised ref of a dropped item -> "entities[2]"
    local_names: dict[str, list[str]]  # normalised name -> ids of this delta's nodes
    asserted_states: list[str]
    asserted_entities: list[str]
    node_retractions: list[tuple[NodeKind, Entry]]
    _by_name: dict[str, list[str]] | None

    def _init_refs(self) -> None:
        self.refs, self.ref_owner, self.dropped_refs, self.local_names = {}, {}, {}, {}
        self.asserted_states, self.asserted_entities, self.node_retractions = [], [], []
        self._by_name = None

    # ------------------------------------------------------------ nodes
    def _nodes(self, delta: ParsedDelta) -> list[tuple[int, str, str | None]]:
        state_refs: list[tuple[int, str, str | None]] = []
        for key, kind in NODE_KINDS:
            for e in delta.entries(key):
                raw_ref = e.raw.get("ref") if isinstance(e.raw, dict) else None
                if e.item is None:
                    self._drop(kind, e.index, e.reason or "invalid", e.raw)
                    if isinstance(raw_ref, (str, int)) and not isinstance(raw_ref, bool) and str(raw_ref).strip():
                        self.dropped_refs.setdefault(norm_ref(str(raw_ref)), f"{key}[{e.index}]")
                    continue
                item = e.item
                ref = norm_ref(item.ref) if item.ref is not None else None
                if ref == SCENE_REF:
                    self._drop(kind, e.index, "ref 'scene' is reserved for the update's scene", e.raw)
                    continue
                if item.retract:
                    self.node_retractions.append((kind, e))
                    continue
                nid = node_id(self.t, self.env, kind, item.type, item.name)
                if ref is not None and ref in self.refs:
                    if self.refs[ref] == nid:  # the same item again (a repeated fact): merged once
                        self._note(kind, e.index, f"repeats {self.ref_owner[ref]}; merged once")
                        if kind == "state" and item.entity_ref:  # a repaired entity_ref still counts
                            state_refs.append((e.index, nid, item.entity_ref))
                    else:
                        self._drop(kind, e.index, f"duplicate ref {item.ref!r}: first used by {self.ref_owner[ref]}",
                                   e.raw)
                    continue
                for problem in item.attribute_problems:
                    self._note(kind, e.index, problem)
                self._upsert_node(nid, kind, item)
                if ref is not None:
                    self.refs[ref], self.ref_owner[ref] = nid, f"{key}[{e.index}]"
                names = self.local_names.setdefault(normalise_name(item.name), [])
                if nid not in names:
                    names.append(nid)
                if kind == "state":
                    self.asserted_states.append(nid)
                    state_refs.append((e.index, nid, item.entity_ref))
                elif nid not in self.asserted_entities:
                    self.asserted_entities.append(nid)
        return state_refs

    def _upsert_node(self, nid: str, kind: NodeKind, item: Any) -> None:
        old = self._node(nid)
        if old is None:
            rec: NodeRecord = self._new_record(  # type: ignore[assignment]
                nid, item.confidence, kind=kind, type=normalise_type(item.type), name=display_name(item.name),
                norm_name=normalise_name(item.name), attributes=dict(item.attributes), entity_id=None)
            self._add_evidence(rec, item.evidence, item.confidence, new=True)
            self.nodes[nid] = rec
            self.report.created["nodes"].append(nid)
            return
        newer = self.at >= last_seen(old)
        rec = self._touch_node(nid)
        # attributes: the values of the latest update win; an older update only fills gaps
        rec["attributes"] = ({**rec.get("attributes", {}), **item.attributes} if newer
                             else {**item.attributes, **rec.get("attributes", {})})
        name = display_name(item.name)
        if _shouting(rec.get("name", "")) and not _shouting(name):
            rec["name"] = name
        self._add_evidence(rec, item.evidence, item.confidence)
        if nid not in self.report.created["nodes"] and nid not in self.report.merged["nodes"]:
            self.report.merged["nodes"].append(nid)

    def _entity_runs(self) -> None:
        """An entity is there from its first assertion until a retraction (and again after it)."""
        for nid in self.asserted_entities:
            self._relayout_nodes([nid], [(self.at, 0, nid)])

    def _relayout_nodes(self, members: list[str], extra: list[Event]) -> None:
        """Recompute which of ``members`` holds when (a node's latest run becomes its valid_from /
        valid_to) from their events and ``extra`` (``merge.timeline``)."""
        recs = {m: r for m in dict.fromkeys(members) if (r := self._node(m)) is not None}
        events = [ev for m, r in recs.items() for ev in record_events(r, m)] + extra
        latest = {member: (start, end) for member, start, end in segments(events)}
        for m, rec in recs.items():
            if m not in latest:
                continue  # no run: a state that lost its group at the only time it was named
            start, end = latest[m]
            seen = sorted({t for t, kind, who in events if who == m and kind == 0})[-SEEN_KEEP:]
            ends = sorted({t for t, kind, who in events if who == m and kind == 1})[-SEEN_KEEP:]
            self._lay(rec, "nodes", start, end, seen, ends)

    def _entity_refs(self, state_refs: list[tuple[int, str, str | None]]) -> None:
        for i, nid, ref in state_refs:
            if ref is None:
                continue
            eid = self._resolve(ref, "entity")
            if eid is None:
                if not self.nodes[nid].get("entity_id"):  # (an earlier item or merge may have given it)
                    self._note("state", i, f"entity_ref {ref!r} {self._unresolved(ref, 'entity')}; "
                                           "state kept without that entity")
            elif self._node(eid)["kind"] != "entity":  # type: ignore[index]
                self._note("state", i, f"entity_ref {ref!r} names a state, not an entity; state kept without it")
            else:
                self.nodes[nid]["entity_id"] = eid

    # ------------------------------------------------------------ retraction
    def _retract_nodes(self) -> None:
        """An entity or state item with ``retract: true`` closes the node and every edge touching
        it that holds at the update time. Nothing is deleted."""
        for kind, e in self.node_retractions:
            item = e.item
            nid = node_id(self.t, self.env, kind, item.type, item.name)
            if self._node(nid) is None:
                nid = self._resolve(item.name, kind) or nid
            rec = self._node(nid)
            if rec is None or rec.get("kind") != kind:
                # Not known yet (the rounds that saw it may merge later): recorded as ended now,
                # so that those facts, when they come, end here too.
                ended = self._new_record(nid, item.confidence, kind=kind, type=normalise_type(item.type),
                                         name=display_name(item.name), norm_name=normalise_name(item.name),
                                         attributes={}, entity_id=None)
                ended.update(valid_to=self.at, ends=[self.at])
                self._add_evidence(ended, item.evidence, item.confidence, new=True)
                self.nodes[nid] = ended  # type: ignore[assignment]
                self.report.created["nodes"].append(nid)
                self._note(kind, e.index, f"retract: {kind} {item.name!r} is not in the graph yet; recorded as "
                                          f"ended at {self.at}, so earlier facts about it that merge later end there")
                continue
            if not covers(rec, self.at):
                self._drop(kind, e.index, f"retract: {kind} {rec.get('name')!r} is not current "
                                          f"(valid {rec.get('valid_from')} to {rec.get('valid_to')})", e.raw)
                continue
            members = self._group_members(nid) if kind == "state" else [nid]
            self._relayout_nodes(members, [(self.at, 1, nid)])
            self._add_evidence(self._touch_node(nid), item.evidence, item.confidence)
            for edge in [x for x in {**self.view.edges, **self.edges}.values()
                         if nid in (x.get("src_id"), x.get("dst_id")) and covers(x, self.at)]:
                self._end_edge(edge)  # type: ignore[attr-defined]

    def _group_members(self, nid: str) -> list[str]:  # merge_states' (a state's group)
        return [nid]

    # ------------------------------------------------------------ refs
    def _resolve(self, ref: str, want_kind: str | None) -> str | None:
        key = norm_ref(ref)
        if key in self.refs:
            return self.refs[key]
        for nid in ref_ids(self.t, self.env, ref, want_kind):
            if self._node(nid) is not None:
                return nid
        found = self._by_name_alone(ref, want_kind)
        return found[0] if len(found) == 1 else None

    def _by_name_alone(self, ref: str, want_kind: str | None) -> list[str]:
        """Nodes whose normalised name is the ref's: this delta's first, else the graph's; only
        those of ``want_kind`` when some are."""
        name = normalise_name(ref)
        if not name:
            return []
        found = list(self.local_names.get(name, []))
        if not found:
            if self._by_name is None:
                self._by_name = {}
                for nid, rec in self.view.nodes.items():
                    self._by_name.setdefault(str(rec.get("norm_name") or normalise_name(rec.get("name", ""))),
                                             []).append(nid)
            found = sorted(self._by_name.get(name, []))
        if want_kind is not None:
            of_kind = [n for n in found if (self._node(n) or {}).get("kind") == want_kind]
            found = of_kind or found
        return found

    def _unresolved(self, ref: str, want_kind: str | None = None) -> str:
        key = norm_ref(ref)
        if key in self.dropped_refs:
            return f"names {self.dropped_refs[key]}, which was dropped"
        several = self._by_name_alone(ref, want_kind)
        if len(several) > 1:
            types = sorted({f"{(self._node(n) or {}).get('type')}:{(self._node(n) or {}).get('name')}" for n in several})
            return f"names {len(several)} nodes ({', '.join(types)}); use type:name"
        return "does not resolve to a node in this delta or the graph"
