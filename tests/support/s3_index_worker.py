"""One process of the shared-index tests (tests/live/test_s3_index.py). The index URI, the graph store
and the AWS_* variables come from the environment (WORLDGRAPH_LANCEDB_PATH, NEO4J_URI, ...).

    record DATA GRAPH TENANT NAME N   record N experiences tagged NAME; print their ids as JSON
    recall DATA GRAPH TENANT QUERY K  print the episode ids of a recall (min similarity 0) as JSON
"""

from __future__ import annotations

import json
import sys

from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder


def main() -> None:
    action, data, graph, tenant, arg, n = sys.argv[1:7]
    with WorldModel.open(data, graph=graph, embedder=HashingEmbedder(64)) as wm:
        if action == "record":
            ids = wm.record_experiences(tenant, [{
                "agent_id": f"agent-{arg}", "agent_role": "explorer", "task_type": "survey",
                "task_description": f"{arg} surveyed crater {i} on the far side",
                "outcome": "success", "learnings": [f"crater {i} is safe ({arg})"]} for i in range(int(n))])
            print(json.dumps(ids))
        else:
            results = wm.recall_experiences(tenant, "explorer", arg, limit=int(n),
                                            options={"min_similarity": 0.0})
            print(json.dumps([r["episode_id"] for r in results]))


if __name__ == "__main__":
    main()
