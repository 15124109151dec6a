"""How long record batches wait while a compaction of a big table runs (issue 35, the 10M run's
"what to do next" item 2): the old way (the whole compaction under the table's write lock), the
rewrite beside the writers with the commit under the lock (with lance's index remap in it, or
deferred), and the library's (``IndexTables._compact``: no lock).

    nice -n 5 .venv/bin/python bench/compaction_stall.py COPY/lancedb --mode new --target 1048576

``COPY`` is a copy of a kept bench store (it is changed: rows are appended and the table is
compacted; make a fresh copy for each run). The process appends batches of ``--batch`` rows (the
recording window of ``EpisodeIndex.adding``, the one ``record_experiences`` holds around its store
write; vectors random, 384-d; its background maintenance is off, so only the forced compaction
runs) from ``--before`` batches before a child process starts the compaction until ``--after``
batches after it ended, and prints one JSON line: each batch's wall time during the compaction
(max, median, how many over 1 s), the median before and after, and the child's times (the whole
compaction and, but for ``old``, its rewrite and its commit).
``--setup ROWS`` instead makes a fresh store of ROWS rows at the path (batches of 1,000, each
its own fragment, then compacted to the background's first tier and indexed like the
background does), for a run without a kept store.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from worldgraph.config import WorldGraphConfig  # noqa: E402
from worldgraph.memory.index.episode_index import EpisodeIndex  # noqa: E402

TENANT = "bench"
DIMS = 384
EMBEDDER = "bench-precomputed-384"


def open_index(path: str) -> EpisodeIndex:
    idx = EpisodeIndex(path, DIMS, EMBEDDER, WorldGraphConfig())
    idx._start_maintenance = lambda *a, **k: None  # type: ignore[method-assign]  # only the forced compaction runs
    return idx


def batch_rows(rng: np.random.Generator, start: int, n: int) -> list[dict[str, object]]:
    vecs = rng.normal(size=(n, DIMS)).astype(np.float32)
    return [{"episode_id": f"stall-{start + i}", "tenant_id": TENANT, "vector": vecs[i], "agent_id": "a",
             "text": f"stall batch row {start + i} word{i % 13}", "timestamp": 1.7e9 + start + i} for i in range(n)]


def compactor(path: str, mode: str, target: int) -> None:
    """The child: one forced compaction of the tenant's table, timed (see ``--mode``)."""
    idx = open_index(path)
    part = idx._part(TENANT)
    assert part is not None
    t0 = time.perf_counter()
    if mode == "old":  # what _optimize_part did before: compact_files under the write lock
        metrics = idx._retry(part, lambda: part.table.to_lance().optimize.compact_files(
            target_rows_per_fragment=target), "compact")
        out: dict[str, object] = {"fragments_removed": metrics.fragments_removed,
                                  "fragments_added": metrics.fragments_added}
    elif mode == "new":
        out = idx._compact(part, target)
    else:  # measured outside the library: the rewrite beside the writers, the commit under the lock
        # (with lance's index remap in it, or deferred to a fragment-reuse index)
        from lance.optimize import Compaction

        options = {"target_rows_per_fragment": target, "defer_index_remap": mode == "defer"}
        ds = part.latest_dataset()
        plan = Compaction.plan(ds, options)
        rewrites = [task.execute(ds) for task in plan.tasks]
        t1 = time.perf_counter()
        with idx._commit_lock(part):
            Compaction.commit(part.latest_dataset(), rewrites, options)
        out = {"tasks": len(rewrites), "rewrite_s": round(t1 - t0, 3), "commit_s": round(time.perf_counter() - t1, 3)}
    out["total_s"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(out, default=lambda v: round(v, 3) if isinstance(v, float) else str(v)), flush=True)
    idx.close()


def setup(path: str, rows: int) -> None:
    from worldgraph.memory.index.policy import COMPACT_TIER, fold_new_rows

    idx = open_index(path)
    rng = np.random.default_rng(7)
    for start in range(0, rows, 1000):
        with idx.adding(TENANT) as add:
            add([dict(r, episode_id=f"e{start + i}") for i, r in enumerate(batch_rows(rng, start, 1000))])
    part = idx._part(TENANT)
    assert part is not None
    cfg = idx.config
    part.table.to_lance().optimize.compact_files(target_rows_per_fragment=cfg.compact_target_rows)
    idx._ensure_part(part, vector=True, fold=False)  # the ANN index; the others fold in the new rows
    fold_new_rows(part.table.to_lance(), cfg, True)  # (ensure_indexes would compact them all again)
    print(json.dumps({"rows": idx.count(TENANT), "fragments": len(part.latest_dataset().get_fragments()),
                      "second_tier_target": cfg.compact_target_rows * COMPACT_TIER}))
    idx.close()


def main(path: str, mode: str, target: int, batch: int, before: int, after: int) -> dict[str, object]:
    idx = open_index(path)
    rng = np.random.default_rng(11)
    base = idx.count(TENANT)
    ds = idx._part(TENANT).latest_dataset()  # type: ignore[union-attr]
    frags = [f.metadata.physical_rows for f in ds.get_fragments()]
    log: list[tuple[str, float]] = []
    n = 0

    def one(phase: str) -> None:
        nonlocal n
        rows = batch_rows(rng, base + n, batch)
        t = time.perf_counter()
        with idx.adding(TENANT) as add:
            add(rows)
        log.append((phase, time.perf_counter() - t))
        n += batch

    for _ in range(before):
        one("before")
    env = dict(os.environ)
    child = subprocess.Popen([sys.executable, __file__, path, "--child", "--mode", mode, "--target", str(target)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        t0 = time.perf_counter()
        while child.poll() is None:
            one("during")
        wall = time.perf_counter() - t0
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode != 0:
        raise SystemExit(f"compaction child failed: {err[-3000:]}")
    for _ in range(after):
        one("after")
    during = [s for p, s in log if p == "during"]
    rest = [s for p, s in log if p != "during"]
    ids = idx._part(TENANT).latest_dataset().to_table(columns=["episode_id"]).column("episode_id")  # type: ignore[union-attr]
    result = {"mode": mode, "rows_before": base, "fragments_before": len(frags), "target": target,
              "compaction": json.loads(out.strip().splitlines()[-1]), "compaction_wall_s": round(wall, 2),
              "batches_during": len(during), "during_max_s": round(max(during), 3),
              "during_median_s": round(statistics.median(during), 3), "during_over_1s": sum(s > 1 for s in during),
              "other_median_s": round(statistics.median(rest), 3) if rest else None,
              "rows_after": len(ids), "unique_after": len(set(ids.to_pylist())), "written": n,
              "fragments_after": len(idx._part(TENANT).latest_dataset().get_fragments()),  # type: ignore[union-attr]
              "load": os.getloadavg()}
    idx.close()
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", help="the lancedb folder of a (copy of a) data folder")
    ap.add_argument("--mode", choices=("old", "commit-locked", "defer", "new"), default="new",
                    help="old: compact_files under the lock; commit-locked: the rewrite beside the writers, the commit "
                         "(with lance's index remap) under the lock; defer: the same with the remap deferred "
                         "(defer_index_remap); new: IndexTables._compact (no lock)")
    ap.add_argument("--target", type=int, default=1 << 20, help="rows per fragment of the forced compaction")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--before", type=int, default=5)
    ap.add_argument("--after", type=int, default=5)
    ap.add_argument("--setup", type=int, default=0, help="make a fresh store of this many rows at path instead")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        compactor(args.path, args.mode, args.target)
    elif args.setup:
        setup(args.path, args.setup)
    else:
        print(json.dumps(main(args.path, args.mode, args.target, args.batch, args.before, args.after)))
