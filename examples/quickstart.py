"""worldgraph quickstart: episodic memory and a world graph, in one temporary folder.

    python examples/quickstart.py

Runs offline: the embedded graph store needs no server, and embeddings come from the local
MiniLM model (or the hashing fallback). With no LLM configured, the flagged round's scene
packet stays pending, and the script merges a delta it already has instead (``apply_delta``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from worldgraph import AgentExperience, CanvasContext, RecallOptions, WorldModel

TENANT = "acme"
ENV = "CottageEscape"


def record_and_recall(wm: WorldModel) -> None:
    ids = wm.record_experiences(TENANT, [
        AgentExperience(
            agent_id="fin-agent-1", agent_role="Finance", task_type="inventory_reconciliation",
            task_description="Reconcile SKU-123 inventory discrepancy between the physical count and the ERP",
            input_summary="Cycle count 1,184 units vs ERP 1,203 (variance -1.6%)",
            approach_taken="Weighted average costing on the variance",
            actions_taken=["Query ERP on-hand", "Compare counts", "Post adjustment IA-77812"],
            outcome="success", confidence_score=0.9, maturity_level="supervised",
            learnings=["Use weighted average costing when the physical count differs by < 2%"],
        ),
        AgentExperience(
            agent_id="fin-agent-2", agent_role="Finance", task_type="inventory_reconciliation",
            task_description="Reconcile consignment stock at the Rotterdam 3PL against the ERP",
            input_summary="3PL report has 412 of 2,310 lines without lot numbers",
            approach_taken="Join on SKU + lot, fall back to SKU totals",
            outcome="failure", confidence_score=0.4, human_intervention_required=True,
            error_message="Cannot reconcile lot-controlled SKUs without lot numbers",
            learnings=["Ask the 3PL for a lot-level report before starting"],
        ),
    ])

    # An experience on a canvas: the canvas snapshot and its actions are stored with the episode.
    canvas = CanvasContext(
        id="canvas-456", name="Inventory variance tracker",
        components=[{"id": "cmp-var-bar", "type": "bar_chart", "title": "Variance by SKU (%)"}],
        state={"week": "2025-W36"},
        actions=[{"id": "act-1", "type": "create_chart", "component_id": "cmp-var-bar",
                  "timestamp": "2025-09-05T09:12:00Z", "details": {"x": "sku", "y": "variance_pct"}}],
    )
    ids.append(wm.record_experience(TENANT, AgentExperience(
        agent_id="fin-agent-3", agent_role="Finance", task_type="inventory_reconciliation",
        task_description="Chart weekly inventory variances and reconcile the ten largest",
        approach_taken="Variance-by-SKU chart, then bin-level counts for each SKU over tolerance",
        outcome="success", confidence_score=0.8, canvas_id="canvas-456",
        learnings=["Sort variances by percentage, not by value, to catch cheap SKUs"],
    ), canvas=canvas))

    # Human feedback in [-1, 1]; recall reads it normalised to [0, 1].
    wm.submit_feedback(TENANT, ids[0], 0.9, notes="Matched the auditor's numbers.", category="accuracy",
                       created_by="controller@acme.example")
    wm.submit_feedback(TENANT, ids[1], -0.3, notes="Should have checked the file first.", category="helpfulness")

    results = wm.recall_experiences(TENANT, "Finance", "Reconcile inventory discrepancies", limit=3,
                                    options=RecallOptions(min_similarity=0.2))
    print("Recall: 'Reconcile inventory discrepancies'")
    for r in results:
        fb = "-" if r["feedback_score"] is None else f"{r['feedback_score']:.2f}"
        print(f"  relevance={r['relevance_score']:.3f} semantic={r['semantic_score']:.3f} feedback={fb}"
              f"  [{r['outcome']}] {r['task_description']}")
        if r["canvas_id"]:
            print(f"      canvas {r['canvas_id']} ({r['canvas_name']})")


def grow_world(wm: WorldModel, out: Path) -> None:
    # What the agent learned in its first rounds: a delta we already have (what the LLM would
    # return), merged without an LLM. Local refs (e1, e2, ...) name items of this delta.
    wm.apply_delta(TENANT, ENV, {
        "entities": [
            {"ref": "e1", "name": "kitchen table", "type": "furniture", "evidence": "On the wooden table"},
            {"ref": "e2", "name": "brass key", "type": "item", "attributes": {"material": "brass"}},
            {"ref": "e3", "name": "player", "type": "player"},
            {"ref": "e4", "name": "front door", "type": "door"},
        ],
        "states": [{"ref": "s1", "name": "front door locked", "type": "door_state", "entity_ref": "e4"}],
        "edges": [{"relation": "containment", "src_ref": "e1", "dst_ref": "e2", "confidence": 0.9}],
        "rules": [{"condition": "the front door is locked", "outcome": "going outside fails",
                   "linked_refs": ["e4"], "confidence": 0.8}],
    })

    # Round 3: an agent round that ends with FLAG_CURIOSITY: yes becomes a scene packet.
    packet = wm.observe_round(TENANT, ENV, {
        "round": 3,
        "action": "take brass key",
        "before_observation": "Kitchen. On the wooden table lies a small brass key.",
        "after_observation": "You pick up the brass key and put it in your pocket.",
        "feedback": "Taken.",
        "admissible_commands": ["look", "inventory", "go west"],
        "response": "Thought: a door key will be needed later.\nAction: take brass key\n"
                    "FLAG_CURIOSITY: yes\nCURIOSITY_REASON: the key moved from the table to my inventory",
    })
    print(f"\nScene packet: {packet['id'] if packet else None} (status {packet['status'] if packet else '-'})")
    # With an LLM configured (OPENAI_API_KEY / OPENAI_BASE_URL) the background worker extracts and
    # merges it; wait for that. Without one it stays pending until `worldgraph world retry`.
    wm.wait_for_updates(timeout=120)

    # The delta of round 3's packet (what the LLM returns for it). A merge places its facts at its
    # scene's time (the round's), not at the moment it runs, so that packets extracted out of order
    # still end as if merged in round order. The table fact above was merged before round 3 was
    # observed, so it is older: the key's new container closes the old containment (valid_to is
    # set, nothing is deleted). Had the table fact been merged after this packet was stored, it
    # would be the newer fact, and it would stay current.
    report = wm.apply_delta(TENANT, ENV, {
        "entities": [], "states": [],
        "edges": [
            {"relation": "containment", "src_ref": "player:player", "dst_ref": "item:brass key",
             "evidence": "You pick up the brass key and put it in your pocket."},
            {"relation": "episodic", "src_ref": "item:brass key", "dst_ref": "scene"},
            {"relation": "containment", "src_ref": "player:player", "dst_ref": "item:silver key"},  # dangling: dropped
        ],
        "rules": [],
    }, scene=packet)
    created = {k: len(v) for k, v in report.created.items()}
    closed = {k: len(v) for k, v in report.closed.items()}
    print(f"Merge (graph version {report.graph_version}): created {created}, closed {closed}")
    for d in report.dropped:
        print(f"  dropped {d.kind}[{d.index}]: {d.reason}")

    graph = wm.world_graph(TENANT, ENV)
    names = {n["id"]: n["name"] for n in graph["nodes"]}
    print(f"\nWorld graph {ENV}: {len(graph['nodes'])} nodes, {len(graph['edges'])} edges, {len(graph['rules'])} rules")
    for e in graph["edges"]:
        if e["relation"] == "containment":
            when = "current" if e["valid_to"] is None else f"closed {e['valid_to']}"
            print(f"  {names[e['src_id']]} contains {names[e['dst_id']]} ({when})")
    for r in graph["rules"]:
        print(f"  rule: if {r['condition']} then {r['outcome']} (confidence {r['confidence']:.2f})")

    folder = wm.export(TENANT, ENV, out)
    print(f"\nExported to {folder}: {', '.join(sorted(p.name for p in folder.iterdir()))}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, WorldModel.open(Path(tmp) / "data") as wm:
        record_and_recall(wm)
        grow_world(wm, Path(tmp) / "export")


if __name__ == "__main__":
    main()
