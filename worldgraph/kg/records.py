"""The world graph's records, the merge plan and the report: the shapes every store and the
snapshot files share.

Records are plain JSON-able dicts (TypedDicts below document their keys) so that the embedded
store, Neo4j and the snapshot files hold byte-for-byte the same thing. Timestamps are ISO-8601
strings in UTC (``2026-11-30T05:00:00.000000+00:00``), lists keep first-seen order.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

NodeKind = Literal["entity", "state"]
Relation = Literal["transition", "containment", "episodic", "fact"]
# The three seed relations of a text adventure, then "fact": any other kind of fact between two
# entities, named by its snake_case predicate (works_at, depends_on).
RELATIONS: tuple[str, ...] = ("transition", "containment", "episodic", "fact")
SCENE_STATUSES: tuple[str, ...] = ("pending", "running", "merged", "failed")

# Keys every snapshot record has (docs/architecture.md, "Canonical snapshot"); records carry more.
NODE_KEYS: tuple[str, ...] = ("id", "kind", "type", "name", "attributes", "confidence", "evidence", "source_scenes")
EDGE_KEYS: tuple[str, ...] = (
    "id", "relation", "src_id", "dst_id", "confidence", "evidence", "source_scenes", "valid_from", "valid_to",
)
RULE_KEYS: tuple[str, ...] = ("id", "condition", "outcome", "linked_node_ids", "confidence", "evidence", "source_scenes")
SCENE_PACKET_KEYS: tuple[str, ...] = (
    "env_name", "current_round", "trigger_reason", "action", "before_observation", "after_observation",
    "feedback", "admissible_commands", "latest_response", "recent_history_excerpt",
)
SCENE_KEYS: tuple[str, ...] = ("id", "status", *SCENE_PACKET_KEYS)
META_KEYS: tuple[str, ...] = ("env_name", "app_name", "graph_version", "updated_at", "last_trigger_reason", "counts")

# All ids are UUID5 under this namespace, so the same names give the same ids on every run.
WORLDGRAPH_NS = uuid.UUID("6b1b3f1e-4c1e-5a55-9d67-2f0c6c9e8a11")


class NodeRecord(TypedDict, total=False):
    id: str
    tenant_id: str
    env_name: str
    kind: NodeKind  # entity | state
    type: str
    name: str
    norm_name: str
    attributes: dict[str, Any]
    confidence: float
    evidence: list[str]
    evidence_count: int
    source_scenes: list[str]
    entity_id: str | None  # for a state: the entity it is a state of
    valid_from: str
    valid_to: str | None  # a state superseded by a newer state of the same entity and type
    last_seen: str  # the latest update time that asserted it (merges place facts by update time)
    created_at: str
    updated_at: str


class EdgeRecord(TypedDict, total=False):
    id: str
    tenant_id: str
    env_name: str
    relation: Relation
    src_id: str
    dst_id: str  # for episodic edges: a scene id
    action: str | None  # transition: the action that caused it
    predicate: str  # fact only: what kind of fact (snake_case, part of its id); absent on other edges
    single_valued: bool  # fact only: the subject has one current fact of this predicate at a time
    confidence: float
    evidence: list[str]
    evidence_count: int
    source_scenes: list[str]
    valid_from: str
    valid_to: str | None  # null while current
    last_seen: str  # the latest update time that asserted it
    created_at: str
    updated_at: str


class RuleRecord(TypedDict, total=False):
    id: str
    tenant_id: str
    env_name: str
    condition: str
    outcome: str
    linked_node_ids: list[str]
    confidence: float
    evidence: list[str]
    evidence_count: int
    source_scenes: list[str]
    valid_from: str
    valid_to: str | None  # closed by a newer rule with the same condition and another outcome
    created_at: str
    updated_at: str


class SceneRecord(TypedDict, total=False):
    """A scene packet as stored: the round that raised curiosity, with its update status
    (what ``observe_round`` returns and ``update_world`` takes)."""

    id: str
    tenant_id: str
    status: str  # pending | running | merged | failed
    error: str | None
    episode_id: str | None  # the episode recorded for the round that triggered it
    created_at: str
    updated_at: str
    # every field of a scene packet:
    env_name: str
    current_round: int
    trigger_reason: str
    action: str
    before_observation: str
    after_observation: str
    feedback: str
    admissible_commands: list[str]
    latest_response: str
    recent_history_excerpt: str
    # the episode of each line of recent_history_excerpt ("" when unknown): forgetting one of those
    # rounds takes its line out (kg.derived)
    history_episode_ids: list[str]


class MetaRecord(TypedDict, total=False):
    tenant_id: str
    env_name: str
    app_name: str
    graph_version: int
    updated_at: str
    last_trigger_reason: str | None
    counts: dict[str, int]  # nodes, edges, rules, scenes


@dataclass
class GraphView:
    """What the merge engine may look at: the part of one environment's graph a delta touches.

    Stores build it with ``GraphStore.load_view(tenant, env, node_ids)``: the nodes with those
    ids, every edge with either end among them (closed ones too), every rule of the
    environment, and the meta. The merge engine never needs more.

    To close the older state of an entity when a new state of the same type arrives, the merge
    looks for state nodes whose ``entity_id`` is among the loaded nodes: a store that also loads
    those states (``entity_id IN node_ids``) lets that work for states the delta does not name.
    The view also holds the current containment edges above the loaded nodes (their ancestors),
    so that the merge can refuse a containment cycle. Refs by name alone need the nodes of those
    names: ``load_view(..., names=[...])`` adds the nodes whose ``norm_name`` is among them (and their
    edges and states, as if their ids had been asked for).
    ``scenes`` is not used by the merge; ``merge.apply_plan_to_view`` keeps the plan's scenes there.
    """

    tenant_id: str
    env_name: str
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    edges: dict[str, EdgeRecord] = field(default_factory=dict)
    rules: dict[str, RuleRecord] = field(default_factory=dict)
    meta: MetaRecord | None = None
    scenes: dict[str, SceneRecord] = field(default_factory=dict)


@dataclass
class DroppedItem:
    kind: str  # entity | state | edge | rule
    index: int  # position in the delta's array
    reason: str
    item: Any = None

    def __post_init__(self) -> None:
        # A report is sent as JSON (REST, MCP, the scene's stored report): an item dropped for
        # holding a lone surrogate, or for being nested too deep, is kept as escaped JSON text.
        try:
            json.dumps(self.item, ensure_ascii=False).encode("utf-8")
        except (UnicodeEncodeError, RecursionError, TypeError, ValueError):
            try:
                self.item = json.dumps(self.item, ensure_ascii=True, default=repr)
            except (RecursionError, ValueError):
                self.item = "(not shown: nested too deeply)"


@dataclass
class MergeReport:
    """What one merge did, and why something is missing ("why is there no edge")."""

    tenant_id: str
    env_name: str
    scene_id: str | None
    ok: bool = True
    error: str | None = None
    graph_version: int | None = None
    created: dict[str, list[str]] = field(default_factory=lambda: {"nodes": [], "edges": [], "rules": []})
    merged: dict[str, list[str]] = field(default_factory=lambda: {"nodes": [], "edges": [], "rules": []})
    closed: dict[str, list[str]] = field(default_factory=lambda: {"nodes": [], "edges": [], "rules": []})
    dropped: list[DroppedItem] = field(default_factory=list)
    skipped: str | None = None  # why nothing was merged although nothing failed (scene already merged)
    # items kept with a part left out (an unresolved entity_ref / linked ref, a bad attribute)
    notes: list[DroppedItem] = field(default_factory=list)
    # closed records asserted again and made current (valid_to back to null); also in merged
    reopened: dict[str, list[str]] = field(default_factory=lambda: {"nodes": [], "edges": [], "rules": []})

    def to_dict(self) -> dict[str, Any]:
        return {
            "tenant_id": self.tenant_id,
            "env_name": self.env_name,
            "scene_id": self.scene_id,
            "ok": self.ok,
            "error": self.error,
            "graph_version": self.graph_version,
            "created": self.created,
            "merged": self.merged,
            "closed": self.closed,
            "dropped": [d.__dict__ for d in self.dropped],
            "skipped": self.skipped,
            "notes": [d.__dict__ for d in self.notes],
            "reopened": self.reopened,
        }


@dataclass
class MergePlan:
    """The full new state of every record a merge touches; stores upsert them by id in one
    transaction (closing is an upsert with valid_to set; nothing is ever deleted)."""

    tenant_id: str
    env_name: str
    nodes: list[NodeRecord] = field(default_factory=list)
    edges: list[EdgeRecord] = field(default_factory=list)
    rules: list[RuleRecord] = field(default_factory=list)
    scene: SceneRecord | None = None  # upserted with status "merged" (or "failed": every item dropped)
    meta: MetaRecord | None = None  # None: the graph did not change (no graph_version bump); else
    # counts are recomputed by the store when it applies the plan
    report: dict[str, Any] | None = None  # the scene's MergeReport, kept beside it (get_scene_report)

    def size(self) -> int:
        return len(self.nodes) + len(self.edges) + len(self.rules)
