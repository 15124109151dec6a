"""One process of the lost-update race (tests/live/test_world_race.py): merge ``n`` deltas into one
environment, each moving the brass key to a room and adding one piece of evidence to it, and print
the graph_version of every acknowledged merge as JSON."""

from __future__ import annotations

import json
import sys

from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder


def main() -> None:
    data, graph, tenant, env, worker, n = sys.argv[1:7]
    versions = []
    with WorldModel.open(data, graph=graph, embedder=HashingEmbedder(64)) as wm:
        for i in range(int(n)):
            room = f"room {(int(worker) + i) % 5}"
            delta = {"entities": [{"ref": "k", "name": "brass key", "type": "item", "evidence": f"w{worker} #{i}"},
                                  {"ref": "r", "name": room, "type": "room"}],
                     "states": [], "edges": [{"relation": "containment", "src_ref": "r", "dst_ref": "k"}],
                     "rules": []}
            report = wm.apply_delta(tenant, env, delta, scene=f"worker {worker} round {i}")
            if report.ok and not report.skipped:
                versions.append(report.graph_version)
    print(json.dumps(versions))


if __name__ == "__main__":
    main()
