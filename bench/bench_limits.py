"""Recall time when a tenant holds one huge legacy episode, for queries of growing length.

    python bench/bench_limits.py --episode-mb 10 --queries 100,4096,102400 --repeats 5

A tenant gets ``--episodes`` ordinary episodes and one legacy episode of ``--episode-mb`` MB,
written straight into the graph store (as a record stored before the input limits existed, or
imported, would be) and indexed by the next open (``retry_indexing``). Then hybrid recalls
(vector + BM25) run with queries of each length, drawn from the same vocabulary; the table gives
the median time, or the error a refused query gets. Run it against two checkouts (PYTHONPATH)
to compare.
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import sys
import tempfile
import time
from pathlib import Path

from worldgraph import WorldModel
from worldgraph.kg.embedded.store import EmbeddedGraphStore
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.memory.record import build_episode, parse_experience

TENANT = "big"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episode-mb", type=float, default=10.0)
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--queries", default="100,4096,102400", help="query lengths in bytes")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--data", default=None, help="data folder (default: a temporary one)")
    args = ap.parse_args(argv)
    data = Path(args.data or tempfile.mkdtemp(prefix="bench-limits-")) / "data"
    rng = random.Random(1)
    vocab = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 9))) for _ in range(20_000)]

    with WorldModel.open(data, embedder=HashingEmbedder(384)) as wm:
        wm.record_experiences(TENANT, [{"agent_id": "a", "task_type": "t", "outcome": "success",
                                        "task_description": " ".join(rng.choices(vocab, k=12))}
                                       for _ in range(args.episodes)])
    ep, _, _ = build_episode(TENANT, parse_experience({"agent_id": "a", "task_type": "t", "task_description": "x",
                                                       "outcome": "success"}), None)
    words = int(args.episode_mb * 1_000_000 / 7)
    ep["task_description"] = " ".join(rng.choices(vocab, k=words))
    store = EmbeddedGraphStore(data / "worldgraph.db")
    store.add_episodes(TENANT, [ep], [], [])  # "pending": the next open indexes it
    store.close()
    t0 = time.perf_counter()
    with WorldModel.open(data, embedder=HashingEmbedder(384)) as wm:
        opened = time.perf_counter() - t0
        print(f"legacy episode: {len(ep['task_description']) / 1e6:.1f} MB; open (indexes it): {opened:.2f} s")
        print(f"| query bytes | median recall (s), {args.repeats} runs | result |")
        print("|---:|---:|---|")
        for n in (int(x) for x in args.queries.split(",")):
            query = " ".join(rng.choices(vocab, k=n // 5 + 1))[:n]
            times, outcome = [], ""
            for _ in range(args.repeats):
                start = time.perf_counter()
                try:
                    outcome = f"{len(wm.recall_experiences(TENANT, None, query, options={'min_similarity': 0.0}))} results"
                except Exception as exc:  # noqa: BLE001 - a refusal is a result here
                    outcome = f"{type(exc).__name__}: {str(exc)[:70]}"
                times.append(time.perf_counter() - start)
            print(f"| {n} | {statistics.median(times):.3f} | {outcome} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
