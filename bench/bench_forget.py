"""Forgetting and browsing at scale (issue 19), on the embedded store with a local index:

- ``forget_episode`` p50 / p99 at N episodes (1 % of them forgotten one by one, random ids);
- ``purge()`` after forgetting that 1 % (compaction, full-text and scalar index rebuild, old
  versions deleted, WAL truncated);
- ``list_episodes`` page of 100, p50 / p99, with a cursor deep in the table (90 % of the way down).

    python bench/bench_forget.py --sizes 100000 --out bench/results/forget.json
    # listing only, at a million: the episodes are written straight into the graph store (marked
    # indexed, no index rows), since a page reads only the store
    python bench/bench_forget.py --sizes 0 --list-sizes 1000000 --out bench/results/forget-list-1m.json

Episodes are small generated experiences with random 64-d vectors (the embedder is not what is
timed); the ANN index is not built (``ann_index_min_rows`` above N) so the background does not
train one meanwhile. Writes a JSON file with every number and prints a table.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from worldgraph import WorldModel
from worldgraph.kg.lifecycle import EpisodeFilter
from worldgraph.memory.lifecycle import encode_cursor


class RandomEmbedder:
    """Unit vectors from a seeded generator: embedding costs ~nothing and is not what is timed."""

    dimensions = 64

    def __init__(self) -> None:
        self.rng = np.random.default_rng(7)

    def embed(self, texts: list[str]) -> np.ndarray:
        v = self.rng.standard_normal((len(texts), self.dimensions)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def load(wm: WorldModel, n: int, batch: int, rnd: random.Random) -> float:
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    t0 = time.perf_counter()
    for b in range(0, n, batch):
        wm.record_experiences("bench", [{
            "agent_id": f"agent-{rnd.randrange(64)}", "agent_role": "Worker", "task_type": "chore",
            "task_description": f"chore {i} with tools {rnd.randrange(10_000)} and parts {rnd.randrange(10_000)}",
            "outcome": "success", "timestamp": (start + timedelta(seconds=i * 30)).isoformat()}
            for i in range(b, min(n, b + batch))])
    return time.perf_counter() - t0


def run(n: int, batch: int, pages: int, tmp: str | None) -> dict[str, Any]:
    rnd = random.Random(n)
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        wm = WorldModel.open(Path(d) / "data", embedder=RandomEmbedder(), ann_index_min_rows=max(n * 2, 10_000),
                             purge_after_seconds=86_400)
        try:
            load_s = load(wm, n, batch, rnd)
            wm.index.ensure_indexes(vector=False)
            wm.index.wait_for_maintenance()
            # the deep cursor: the episode 90 % of the way down the listing order
            ids = [e["id"] for page in wm.store.iter_episodes("bench") for e in page]
            all_ts = sorted(((e["ts"], e["id"]) for p in wm.store.iter_episodes("bench") for e in p), reverse=True)
            deep = all_ts[int(len(all_ts) * 0.9)]
            cursor = encode_cursor(deep[0], deep[1], EpisodeFilter())
            for _ in range(10):
                wm.list_episodes("bench", limit=100, cursor=cursor)
            # alternated, so that a busy moment of the machine does not land on one variant only
            list_ms, first_ms = [], []
            for _ in range(pages):
                t = time.perf_counter()
                page = wm.list_episodes("bench", limit=100, cursor=cursor)
                list_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                wm.list_episodes("bench", limit=100)
                first_ms.append((time.perf_counter() - t) * 1000)
            assert len(page.items) == 100
            victims = rnd.sample(ids, max(1, n // 100))
            forget_ms = []
            for eid in victims:
                t = time.perf_counter()
                wm.forget_episode("bench", eid)
                forget_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            stats = wm.purge()
            purge_s = time.perf_counter() - t
        finally:
            wm.close()
    return {"episodes": n, "load_s": round(load_s, 1), "forgotten": len(victims),
            "forget_ms": {"p50": round(statistics.median(forget_ms), 2), "p99": round(pct(forget_ms, 99), 2)},
            "purge_s": round(purge_s, 2), "purge": stats,
            "list_deep_ms": {"p50": round(statistics.median(list_ms), 2), "p99": round(pct(list_ms, 99), 2)},
            "list_first_ms": {"p50": round(statistics.median(first_ms), 2), "p99": round(pct(first_ms, 99), 2)}}


def run_list(n: int, pages: int, tmp: str | None) -> dict[str, Any]:
    """list_episodes only, on N episodes written straight into the store (no embedding, no index)."""
    rnd = random.Random(n)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        wm = WorldModel.open(Path(d) / "data", embedder=RandomEmbedder(), purge_after_seconds=86_400)
        try:
            t0 = time.perf_counter()
            for b in range(0, n, 10_000):
                eps = []
                for i in range(b, min(n, b + 10_000)):
                    ts = start + timedelta(seconds=i * 3)
                    eps.append({"id": f"{i:08d}-{rnd.getrandbits(64):016x}", "tenant_id": "bench",
                                "agent_id": f"agent-{rnd.randrange(64)}", "agent_role": "Worker",
                                "task_type": "chore", "task_description": f"chore {i}", "outcome": "success",
                                "timestamp": ts.isoformat(), "ts": ts.timestamp(), "index_status": "indexed"})
                wm.store.add_episodes("bench", eps, [], [])
            load_s = time.perf_counter() - t0
            deep_at = int(n * 0.9)  # newest first: the episode 90 % of the way down is number n - deep_at - 1
            i = n - deep_at - 1
            deep_id = next(e["id"] for e in wm.store.list_episodes(
                "bench", EpisodeFilter(), 1, ((start + timedelta(seconds=i * 3)).timestamp() + 1, "")))
            cursor = encode_cursor((start + timedelta(seconds=i * 3)).timestamp(), deep_id, EpisodeFilter())
            for _ in range(10):
                wm.list_episodes("bench", limit=100, cursor=cursor)
            list_ms, first_ms = [], []
            for _ in range(pages):
                t = time.perf_counter()
                page = wm.list_episodes("bench", limit=100, cursor=cursor)
                list_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                wm.list_episodes("bench", limit=100)
                first_ms.append((time.perf_counter() - t) * 1000)
            assert len(page.items) == 100
        finally:
            wm.close()
    return {"episodes": n, "mode": "list only (store)", "load_s": round(load_s, 1),
            "list_deep_ms": {"p50": round(statistics.median(list_ms), 2), "p99": round(pct(list_ms, 99), 2)},
            "list_first_ms": {"p50": round(statistics.median(first_ms), 2), "p99": round(pct(first_ms, 99), 2)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000", help="episode counts, comma-separated (one fresh store each)")
    ap.add_argument("--list-sizes", default="", help="sizes for the listing alone (episodes written straight "
                    "into the store), comma-separated")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--pages", type=int, default=200, help="list_episodes calls timed per variant")
    ap.add_argument("--tmp", default=None, help="where the temporary stores go")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    results = [run(int(s), args.batch, args.pages, args.tmp) for s in args.sizes.split(",") if int(s)]
    listed = [run_list(int(s), args.pages, args.tmp) for s in args.list_sizes.split(",") if s.strip()]
    print(f"{'episodes':>9} {'forget p50/p99 ms':>18} {'purge s (1%)':>13} {'list deep p50/p99 ms':>21} "
          f"{'list first p50 ms':>18}")
    for r in results:
        print(f"{r['episodes']:>9} {r['forget_ms']['p50']:>8}/{r['forget_ms']['p99']:<9} {r['purge_s']:>13} "
              f"{r['list_deep_ms']['p50']:>10}/{r['list_deep_ms']['p99']:<10} {r['list_first_ms']['p50']:>18}")
    for r in listed:
        print(f"{r['episodes']:>9} list only: deep p50/p99 {r['list_deep_ms']['p50']}/{r['list_deep_ms']['p99']} ms, "
              f"first page p50 {r['list_first_ms']['p50']} ms")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"results": results, "list_only": listed, "argv": vars(args)},
                                             indent=2) + "\n")


if __name__ == "__main__":
    main()
