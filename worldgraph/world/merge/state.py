"""The merge engine's shared state and record steps (evidence, close, reopen, drops).

Time. Every merge has an update time ``at``: the scene's ``created_at`` (when the round was
observed), or the merge time when there is no scene. Facts are placed on the timeline at ``at``,
not at the moment the merge happens to run, so the graph does not depend on the order in which
extractions finish: a late fact that a newer update already contradicted enters as closed
history (``merge.edges``, ``merge.states``). Records carry ``last_seen``, the latest update time
that asserted them. ``now`` (the merge time) only stamps ``created_at`` / ``updated_at``.
"""

from __future__ import annotations

import copy
from typing import Any

from worldgraph.kg.records import (
    DroppedItem,
    EdgeRecord,
    GraphView,
    MergeReport,
    NodeRecord,
    RuleRecord,
    SceneRecord,
)

EVIDENCE_KEEP = 20
SCENE_REF = "scene"


class MergeBase:
    def __init__(self, view: GraphView, scene: SceneRecord | None, now: str, app_name: str) -> None:
        self.view = view
        self.t, self.env = view.tenant_id, view.env_name
        self.scene = scene
        self.scene_id: str | None = scene["id"] if scene else None
        self.now = now
        self.at: str = (scene or {}).get("created_at") or now  # the update time (see the module doc)
        self.app_name = app_name
        self.nodes: dict[str, NodeRecord] = {}  # touched records (copies), by id
        self.edges: dict[str, EdgeRecord] = {}
        self.rules: dict[str, RuleRecord] = {}
        self.report = MergeReport(tenant_id=self.t, env_name=self.env, scene_id=self.scene_id)

    # ------------------------------------------------------------ records
    def _node(self, nid: str) -> NodeRecord | None:
        return self.nodes.get(nid) or self.view.nodes.get(nid)

    def _edge(self, eid: str) -> EdgeRecord | None:
        return self.edges.get(eid) or self.view.edges.get(eid)

    def _rule(self, rid: str) -> RuleRecord | None:
        return self.rules.get(rid) or self.view.rules.get(rid)

    def _touch_node(self, nid: str) -> NodeRecord:
        return self._touch(self.nodes, self.view.nodes, nid)  # type: ignore[return-value]

    def _touch_edge(self, eid: str) -> EdgeRecord:
        return self._touch(self.edges, self.view.edges, eid)  # type: ignore[return-value]

    def _touch_rule(self, rid: str) -> RuleRecord:
        return self._touch(self.rules, self.view.rules, rid)  # type: ignore[return-value]

    def _touch(self, touched: Any, view: Any, rid: str) -> dict[str, Any]:
        """The record this merge changes: a copy of the view's the first time (views are shared)."""
        if rid not in touched:
            touched[rid] = copy.deepcopy(view[rid])
        rec: dict[str, Any] = touched[rid]
        rec["updated_at"] = self.now
        return rec

    def _new_record(self, rid: str, confidence: float, timeline: bool = True, **fields: Any) -> dict[str, Any]:
        """A new record holding from the update time. ``timeline``: it keeps the events its runs
        are computed from (``merge.timeline``)."""
        rec = {"id": rid, "tenant_id": self.t, "env_name": self.env, **fields,
               "confidence": round(confidence, 6), "evidence": [], "evidence_count": 0, "source_scenes": [],
               "valid_from": self.at, "valid_to": None, "last_seen": self.at,
               "created_at": self.now, "updated_at": self.now}
        if timeline:
            rec["seen"], rec["ends"] = [], []
        return rec

    # ------------------------------------------------------------ shared steps
    def _add_evidence(self, rec: Any, evidence: list[str], confidence: float, new: bool = False) -> None:
        """Confidence: noisy-OR for evidence from a scene not yet among the record's source scenes
        (independent), else max; evidence deduplicated, the last 20 kept, all counted."""
        scenes = rec.setdefault("source_scenes", [])
        if not new:
            a, b = float(rec.get("confidence", 0.0)), confidence
            independent = self.scene_id is not None and self.scene_id not in scenes
            rec["confidence"] = round(1 - (1 - a) * (1 - b) if independent else max(a, b), 6)
        kept = list(rec.get("evidence", []))
        kept += [e for e in dict.fromkeys(evidence) if e not in kept]
        rec["evidence"] = kept[-EVIDENCE_KEEP:]
        rec["evidence_count"] = int(rec.get("evidence_count", len(rec.get("evidence", [])))) + len(evidence)
        if self.scene_id is not None and self.scene_id not in scenes:
            scenes.append(self.scene_id)
        if "seen" not in rec:  # records on the timeline get last_seen from their events
            rec["last_seen"] = max(last_seen(rec), self.at)

    def _close(self, rec: Any, kind: str, at: str | None = None) -> None:
        rec["valid_to"] = at or self.at
        rec["updated_at"] = self.now
        if rec["id"] not in self.report.created[kind]:
            self._mark_closed(kind, rec["id"])

    def _mark_closed(self, kind: str, rid: str) -> None:
        """Report a record as closed; one reopened earlier in this very merge was closed before
        it and is again (a broken cycle ended what a relayout opened): it is neither."""
        if rid in self.report.reopened[kind]:
            self.report.reopened[kind].remove(rid)
        else:
            _mark(self.report.closed[kind], rid)

    def _reopen(self, rec: Any, kind: str, at: str | None = None) -> None:
        rec["valid_to"] = None
        rec["valid_from"] = at or self.at
        rec["updated_at"] = self.now
        if rec["id"] in self.report.closed[kind]:  # closed earlier in this very merge: undo that
            self.report.closed[kind].remove(rec["id"])
        elif rec["id"] not in self.report.created[kind]:
            _mark(self.report.reopened[kind], rec["id"])

    def _lay(self, rec: Any, kind: str, start: str, end: str | None, seen: list[str], ends: list[str]) -> Any:
        """Give a record the run [start, end) and its events (touched only when something moved);
        the report says what closed and reopened."""
        if (rec.get("valid_from"), rec.get("valid_to"), rec.get("seen"), rec.get("ends")) == (start, end, seen, ends):
            return rec
        was_current = rec.get("valid_to") is None
        rec = self._touch_node(rec["id"]) if kind == "nodes" else self._touch_edge(rec["id"])
        rec["valid_from"], rec["valid_to"], rec["seen"], rec["ends"] = start, end, seen, ends
        if seen:
            rec["last_seen"] = seen[-1]
        created = rec["id"] in self.report.created[kind]
        if was_current and end is not None and not created:
            self._mark_closed(kind, rec["id"])
        elif not was_current and end is None and not created:
            if rec["id"] in self.report.closed[kind]:
                self.report.closed[kind].remove(rec["id"])
            else:
                _mark(self.report.reopened[kind], rec["id"])
        return rec

    def _drop(self, kind: str, index: int, reason: str, item: Any) -> None:
        self.report.dropped.append(DroppedItem(kind=kind, index=index, reason=reason, item=item))

    def _note(self, kind: str, index: int, reason: str) -> None:
        self.report.notes.append(DroppedItem(kind=kind, index=index, reason=reason))


def covers(rec: Any, at: str) -> bool:
    """Whether the record's validity interval [valid_from, valid_to) holds the time ``at``."""
    return (rec.get("valid_from") or "") <= at and (rec.get("valid_to") is None or at < rec["valid_to"])


def last_seen(rec: Any) -> str:
    """The latest update time that asserted the record (older records: their valid_from)."""
    return str(rec.get("last_seen") or rec.get("valid_from") or "")


def _mark(bucket: list[str], rid: str) -> None:
    if rid not in bucket:
        bucket.append(rid)
