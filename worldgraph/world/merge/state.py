"""The merge state and the record steps every merge step shares.

``MergeState`` holds what one merge reads and writes: the loaded view (never modified: a record
is copied the first time the merge changes it), the touched records (the plan to be), the report
being built, the update time and scene, and the bookkeeping of the steps (same-delta refs, the
transitions seen, the slot and rule indexes). The functions here read and change it:
finding a record (touched first, then the view), touching one (copy on first write), a new
record, evidence, closing and reopening, laying a run on a record, drops and notes.

Time. Every merge has an update time ``at``: the scene's ``created_at`` (when the round was
observed), or the merge time when there is no scene. Facts are placed on the timeline at ``at``,
not at the moment the merge happens to run, so the graph does not depend on the order in which
extractions finish: a late fact that a newer update already contradicted enters as closed
history (``merge.edges``, ``merge.states``). Records carry ``last_seen``, the latest update time
that asserted them. ``now`` (the merge time) only stamps ``created_at`` / ``updated_at``.

Evidence. Confidence is the noisy-OR of the old and new confidence for evidence from a scene not
yet among the record's source scenes (independent), else their max; evidence is deduplicated,
the last ``EVIDENCE_KEEP`` pieces kept, all of them counted. ``evidence_scenes`` (aligned with
``evidence``) names the scenes each piece came from (``[]``: a delta merged without a scene;
``null``: merged before pieces named their scenes), so that forgetting a scene drops the evidence
that came only from it (``kg.derived.strip_scene``).

The report. A record created by this merge is only "created"; one closed and reopened within the
same merge (a relayout, then a broken cycle) is neither closed nor reopened.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from worldgraph.kg.records import (
    DroppedItem,
    EdgeRecord,
    GraphView,
    MergeReport,
    NodeKind,
    NodeRecord,
    RuleRecord,
    SceneRecord,
)
from worldgraph.world.delta.parse import Entry

EVIDENCE_KEEP = 20
SCENE_REF = "scene"


@dataclass
class MergeState:
    """One merge's inputs, the records it touched and the report it builds (see the module doc)."""

    view: GraphView
    scene: SceneRecord | None
    now: str
    app_name: str
    t: str = field(init=False)  # the view's tenant id
    env: str = field(init=False)  # the view's environment name
    scene_id: str | None = field(init=False)
    at: str = field(init=False)  # the update time (see the module doc)
    # touched records (copies), by id: what the plan writes
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    edges: dict[str, EdgeRecord] = field(default_factory=dict)
    rules: dict[str, RuleRecord] = field(default_factory=dict)
    report: MergeReport = field(init=False)
    # refs and nodes (merge.refs)
    refs: dict[str, str] = field(default_factory=dict)  # normalised same-delta ref -> node id
    ref_owner: dict[str, str] = field(default_factory=dict)  # normalised ref -> "entities[0]"
    dropped_refs: dict[str, str] = field(default_factory=dict)  # normalised ref of a dropped item -> "entities[2]"
    local_names: dict[str, list[str]] = field(default_factory=dict)  # normalised name -> this delta's node ids
    asserted_states: list[str] = field(default_factory=list)
    asserted_entities: list[str] = field(default_factory=list)
    node_retractions: list[tuple[NodeKind, Entry]] = field(default_factory=list)
    by_name: dict[str, list[str]] | None = None  # normalised name -> the view's node ids (built on first use)
    # edges (merge.edges)
    transitions: list[tuple[str, str]] = field(default_factory=list)  # (src, dst) of this delta's transitions
    # (relation, owner, predicate) of a slot (merge.slots) -> its edge ids (built on first use)
    slot_index: dict[Any, set[str]] | None = None
    asserted: dict[str, int] = field(default_factory=dict)  # containment edge id -> the delta edge index
    # rules (merge.rules)
    rule_tokens: dict[str, frozenset[str]] | None = None  # current rule id -> condition tokens (first use)
    rule_postings: dict[str, set[str]] = field(default_factory=dict)  # condition token -> current rule ids
    rules_without_tokens: set[str] = field(default_factory=set)  # current rules whose condition has no token

    def __post_init__(self) -> None:
        self.t, self.env = self.view.tenant_id, self.view.env_name
        self.scene_id = self.scene["id"] if self.scene else None
        self.at = (self.scene or {}).get("created_at") or self.now
        self.report = MergeReport(tenant_id=self.t, env_name=self.env, scene_id=self.scene_id)


# ---------------------------------------------------------------- records
def find_node(state: MergeState, nid: str) -> NodeRecord | None:
    """The node as this merge sees it: the touched copy, else the view's."""
    return state.nodes.get(nid) or state.view.nodes.get(nid)


def find_edge(state: MergeState, eid: str) -> EdgeRecord | None:
    return state.edges.get(eid) or state.view.edges.get(eid)


def find_rule(state: MergeState, rid: str) -> RuleRecord | None:
    return state.rules.get(rid) or state.view.rules.get(rid)


def touch_node(state: MergeState, nid: str) -> NodeRecord:
    return _touch(state, state.nodes, state.view.nodes, nid)  # type: ignore[return-value]


def touch_edge(state: MergeState, eid: str) -> EdgeRecord:
    return _touch(state, state.edges, state.view.edges, eid)  # type: ignore[return-value]


def touch_rule(state: MergeState, rid: str) -> RuleRecord:
    return _touch(state, state.rules, state.view.rules, rid)  # type: ignore[return-value]


def _touch(state: MergeState, touched: Any, view: Any, rid: str) -> dict[str, Any]:
    """The record this merge changes: a copy of the view's the first time (views are shared)."""
    if rid not in touched:
        touched[rid] = copy.deepcopy(view[rid])
    rec: dict[str, Any] = touched[rid]
    rec["updated_at"] = state.now
    return rec


def new_record(state: MergeState, rid: str, confidence: float, timeline: bool = True, **fields: Any) -> dict[str, Any]:
    """A new record holding from the update time. ``timeline``: it keeps the events its runs
    are computed from (``merge.timeline``)."""
    rec = {"id": rid, "tenant_id": state.t, "env_name": state.env, **fields,
           "confidence": round(confidence, 6), "evidence": [], "evidence_count": 0, "source_scenes": [],
           "valid_from": state.at, "valid_to": None, "last_seen": state.at,
           "created_at": state.now, "updated_at": state.now}
    if timeline:
        rec["seen"], rec["ends"] = [], []
    return rec


# ---------------------------------------------------------------- shared steps
def add_evidence(state: MergeState, rec: Any, evidence: list[str], confidence: float, new: bool = False) -> None:
    """Confidence: noisy-OR for evidence from a scene not yet among the record's source scenes
    (independent), else max; evidence deduplicated, the last 20 kept (with the scenes each came
    from), all counted."""
    scenes = rec.setdefault("source_scenes", [])
    if not new:
        a, b = float(rec.get("confidence", 0.0)), confidence
        independent = state.scene_id is not None and state.scene_id not in scenes
        rec["confidence"] = round(1 - (1 - a) * (1 - b) if independent else max(a, b), 6)
    kept = list(rec.get("evidence", []))
    sources = rec.get("evidence_scenes")
    if not isinstance(sources, list) or len(sources) != len(kept):
        sources = [None] * len(kept)  # merged before evidence named its scenes: unknown
    else:
        sources = [list(s) if isinstance(s, list) else None for s in sources]
    for text in dict.fromkeys(evidence):
        if text in kept:
            known = sources[kept.index(text)]
            if state.scene_id is not None and known is not None and state.scene_id not in known:
                known.append(state.scene_id)
        else:
            kept.append(text)
            sources.append([state.scene_id] if state.scene_id is not None else [])
    rec["evidence"] = kept[-EVIDENCE_KEEP:]
    rec["evidence_scenes"] = sources[-EVIDENCE_KEEP:]
    rec["evidence_count"] = int(rec.get("evidence_count", len(rec["evidence"]))) + len(evidence)
    if state.scene_id is not None and state.scene_id not in scenes:
        scenes.append(state.scene_id)
    if "seen" not in rec:  # records on the timeline get last_seen from their events
        rec["last_seen"] = max(last_seen(rec), state.at)


def close(state: MergeState, rec: Any, kind: str, at: str | None = None) -> None:
    """End the record at ``at`` (default: the update time)."""
    rec["valid_to"] = at or state.at
    rec["updated_at"] = state.now
    if rec["id"] not in state.report.created[kind]:
        mark_closed(state, kind, rec["id"])


def mark_closed(state: MergeState, kind: str, rid: str) -> None:
    """Report a record as closed; one reopened earlier in this very merge was closed before
    it and is again (a broken cycle ended what a relayout opened): it is neither."""
    if rid in state.report.reopened[kind]:
        state.report.reopened[kind].remove(rid)
    else:
        _mark(state.report.closed[kind], rid)


def reopen(state: MergeState, rec: Any, kind: str, at: str | None = None) -> None:
    """Make a closed record current again from ``at`` (default: the update time)."""
    rec["valid_to"] = None
    rec["valid_from"] = at or state.at
    rec["updated_at"] = state.now
    if rec["id"] in state.report.closed[kind]:  # closed earlier in this very merge: undo that
        state.report.closed[kind].remove(rec["id"])
    elif rec["id"] not in state.report.created[kind]:
        _mark(state.report.reopened[kind], rec["id"])


def lay(state: MergeState, rec: Any, kind: str, start: str, end: str | None, seen: list[str], ends: list[str]) -> Any:
    """Give a record the run [start, end) and its events (touched only when something moved);
    the report says what closed and reopened."""
    if (rec.get("valid_from"), rec.get("valid_to"), rec.get("seen"), rec.get("ends")) == (start, end, seen, ends):
        return rec
    was_current = rec.get("valid_to") is None
    rec = touch_node(state, rec["id"]) if kind == "nodes" else touch_edge(state, rec["id"])
    rec["valid_from"], rec["valid_to"], rec["seen"], rec["ends"] = start, end, seen, ends
    if seen:
        rec["last_seen"] = seen[-1]
    created = rec["id"] in state.report.created[kind]
    if was_current and end is not None and not created:
        mark_closed(state, kind, rec["id"])
    elif not was_current and end is None and not created:
        if rec["id"] in state.report.closed[kind]:
            state.report.closed[kind].remove(rec["id"])
        else:
            _mark(state.report.reopened[kind], rec["id"])
    return rec


def drop(state: MergeState, kind: str, index: int, reason: str, item: Any) -> None:
    """The delta item ``kind``[``index``] is not merged, for ``reason`` (listed in the report)."""
    state.report.dropped.append(DroppedItem(kind=kind, index=index, reason=reason, item=item))


def note(state: MergeState, kind: str, index: int, reason: str) -> None:
    """The item is merged with a part left out, for ``reason`` (listed in the report)."""
    state.report.notes.append(DroppedItem(kind=kind, index=index, reason=reason))


def covers(rec: Any, at: str) -> bool:
    """Whether the record's validity interval [valid_from, valid_to) holds the time ``at``."""
    return (rec.get("valid_from") or "") <= at and (rec.get("valid_to") is None or at < rec["valid_to"])


def last_seen(rec: Any) -> str:
    """The latest update time that asserted the record (older records: their valid_from)."""
    return str(rec.get("last_seen") or rec.get("valid_from") or "")


def _mark(bucket: list[str], rid: str) -> None:
    if rid not in bucket:
        bucket.append(rid)
