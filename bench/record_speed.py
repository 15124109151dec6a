"""Recording speed of this checkout, for before/after runs alternated between two checkouts.

Records ``N`` episodes of the bench corpus (``corpus.Corpus``, vectors precomputed: no embedding
cost) in batches into a fresh data folder, or with ``--into FOLDER`` appends them to an existing
one (a copy of a kept bench store: the corpus continues from the tenant's stored count, as
bench_memory.py resumes), then prints one JSON line: batch wall-time median, slowest, 10th
percentile and overall (episodes/s), episodes per CPU-second of the recording process and of
its maintenance children, per CPU-second of a call (median: ``eps_per_cpu_s_median`` counts every
thread of the process during the call, ``eps_per_thread_cpu_s_median`` the calling thread's alone:
the WAL checkpoint and LanceDB's threads work beside it, on the other core), the CPU the bench's
own corpus took in this process (making each batch's experiences and registering their vectors:
``corpus_cpu_s``) and episodes per CPU-second of the process without it
(``eps_per_library_cpu_s``: the library's share), the open's wall time, and the CPU of this
process (from the first batch on: the open and the count of a kept store are left out) and of its
children (the index is closed before counting, so the children were waited for).
Run from the checkout to measure:

    cd <checkout A> && nice .venv/bin/python bench/record_speed.py 20000 1000
    cd <checkout A> && nice .venv/bin/python bench/record_speed.py 30000 1000 --into /tmp/copy/wg-bench-1000000

``--now-timestamps`` stamps each experience with the current time instead of the corpus's (drawn
over 90 days: each lands at a random place of SQLite's time and agent indexes, bench/README.md
"The recording process's own CPU per episode").

``--gc-freeze`` calls ``gc.freeze()`` once the store is open: the cyclic garbage collector's full
collections then skip the ~140k objects of the imports and the open (bench/README.md, "Recording at
scale").
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.corpus import Corpus, PrecomputedEmbedder  # noqa: E402
from worldgraph import WorldModel  # noqa: E402

TENANT = "bench"  # bench_memory.py's tenant: a kept store holds its episodes
SEED = 20260101  # bench_memory.py's default --seed
CORPUS_MAX = 10_000_000  # the corpus rows are the same for any n (chunks seeded apart): room to append


def main(n: int, batch: int, into: Path | None = None, gc_freeze: bool = False,
         now_timestamps: bool = False) -> dict[str, object]:
    emb = PrecomputedEmbedder()
    tmp = None if into is not None else Path(tempfile.mkdtemp(prefix="record-speed-"))
    data = into if into is not None else Path(str(tmp)) / "data"
    try:
        t0 = time.perf_counter()
        wm = WorldModel.open(data, embedder=emb)
        open_s = time.perf_counter() - t0
        stored = wm.store.stats(TENANT)["episodes"] if into is not None else 0
        if gc_freeze:  # what an application can do once it has opened: full collections skip what is frozen
            gc.collect()
            gc.freeze()
        corpus = Corpus(max(CORPUS_MAX, stored + n), seed=SEED)
        begun = resource.getrusage(resource.RUSAGE_SELF)  # the open and the count (a scan at 1M) left out
        walls, cpus, thread_cpus = [], [], []
        corpus_cpu = 0.0  # this thread's CPU making the corpus's batches (the bench's, not the library's)
        batches = corpus.batches(batch, start=stored)
        while len(walls) * batch < n:
            c0 = time.thread_time()
            got = next(batches, None)
            if got is None:
                break
            exps, vectors = got
            if now_timestamps:  # as an agent records as it goes: "now", rising (the corpus draws 90 days)
                start = time.time()
                for j, e in enumerate(exps):
                    e["timestamp"] = datetime.fromtimestamp(start + j * 1e-4, timezone.utc).isoformat()
            texts = emb.register(exps, vectors)
            corpus_cpu += time.thread_time() - c0
            t1, c1, h1 = time.perf_counter(), time.process_time(), time.thread_time()
            wm.record_experiences(TENANT, exps)
            walls.append(time.perf_counter() - t1)
            cpus.append(time.process_time() - c1)
            thread_cpus.append(time.thread_time() - h1)
            c0 = time.thread_time()
            emb.forget(texts)
            del exps, vectors, texts, got
            corpus_cpu += time.thread_time() - c0
        wm.close()
        runs = list(wm.index.maintenance_runs)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    self_cpu = me.ru_utime + me.ru_stime - begun.ru_utime - begun.ru_stime  # the batches, the corpus and the close
    child_cpu = children.ru_utime + children.ru_stime
    done = len(walls) * batch
    slow10 = sorted(walls)[-max(1, len(walls) // 10)]  # the 90th-percentile batch time
    return {"checkout": str(Path.cwd()), "n": done, "batch": batch, "stored_before": stored,
            "eps_s_median": round(batch / statistics.median(walls)), "eps_s_overall": round(done / sum(walls)),
            "eps_s_min": round(batch / max(walls)), "eps_s_p10": round(batch / slow10),
            "eps_per_cpu_s_median": round(batch / statistics.median(cpus)),
            "eps_per_thread_cpu_s_median": round(batch / statistics.median(thread_cpus)),
            "slowest_batch_s": round(max(walls), 3),
            "slowest_batches_s": [round(w, 2) for w in sorted(walls)[-5:]],
            "eps_per_process_cpu_s": round(done / self_cpu), "eps_per_children_cpu_s": round(done / max(child_cpu, 1e-9)),
            "corpus_cpu_s": round(corpus_cpu, 1), "eps_per_library_cpu_s": round(done / max(self_cpu - corpus_cpu, 1e-9)),
            "open_s": round(open_s, 2), "gc_freeze": gc_freeze, "now_timestamps": now_timestamps,
            "self_cpu_s": round(self_cpu, 1),
            "children_cpu_s": round(child_cpu, 1), "load": round(os.getloadavg()[0], 1),
            "maintenance_runs": len(runs), "maintenance_failed": sum(not r["ok"] for r in runs),
            "maintenance_steps": step_totals(runs)}


def step_totals(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The maintenance child's timed steps (``IndexMaintenance._timed``) summed by step, the
    most CPU first: times run, wall seconds, CPU seconds."""
    totals: dict[str, dict[str, float]] = {}
    for run in runs:
        for step in run.get("steps", []):
            t = totals.setdefault(step["step"], {"n": 0, "s": 0.0, "cpu_s": 0.0})
            t["n"] += 1
            t["s"] += step["s"]
            t["cpu_s"] += step["cpu_s"]
    return {k: {"n": v["n"], "s": round(v["s"], 1), "cpu_s": round(v["cpu_s"], 1)}
            for k, v in sorted(totals.items(), key=lambda kv: -kv[1]["cpu_s"])}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?", default=20000)
    ap.add_argument("batch", type=int, nargs="?", default=1000)
    ap.add_argument("--into", type=Path, help="append to this data folder (a copy: it is changed) instead of a fresh one")
    ap.add_argument("--gc-freeze", action="store_true",
                    help="gc.freeze() after the open (the process's objects so far left out of every later collection)")
    ap.add_argument("--now-timestamps", action="store_true",
                    help="each experience stamped with the current time (rising), as an agent records as it goes, "
                         "instead of the corpus's times drawn over 90 days (which land at random places of the "
                         "store's time indexes)")
    args = ap.parse_args()
    print(json.dumps(main(args.n, args.batch, args.into, args.gc_freeze, args.now_timestamps)))
