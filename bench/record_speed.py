"""Recording speed of this checkout, for before/after runs alternated between two checkouts.

Records ``N`` episodes of the bench corpus (``corpus.Corpus``, vectors precomputed: no embedding
cost) in batches into a fresh data folder, then prints one JSON line: batch wall-time medians and
overall (episodes/s), episodes per CPU-second of the recording process, the open's wall time, and
the CPU of this process and of its maintenance children (the index is closed before counting, so
the children were waited for). Run from the checkout to measure:

    cd <checkout A> && nice .venv/bin/python bench/record_speed.py 20000 1000
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.corpus import Corpus, PrecomputedEmbedder  # noqa: E402
from worldgraph import WorldModel  # noqa: E402


def main(n: int, batch: int) -> dict[str, object]:
    corpus = Corpus(n, seed=20260101)
    emb = PrecomputedEmbedder()
    tmp = Path(tempfile.mkdtemp(prefix="record-speed-"))
    try:
        t0 = time.perf_counter()
        wm = WorldModel.open(tmp / "data", embedder=emb)
        open_s = time.perf_counter() - t0
        walls, cpus = [], []
        for exps, vectors in corpus.batches(batch):
            texts = emb.register(exps, vectors)
            t1, c1 = time.perf_counter(), time.process_time()
            wm.record_experiences("bench", exps)
            walls.append(time.perf_counter() - t1)
            cpus.append(time.process_time() - c1)
            emb.forget(texts)
        wm.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"checkout": str(Path.cwd()), "n": n, "batch": batch,
            "eps_s_median": round(batch / statistics.median(walls)), "eps_s_overall": round(n / sum(walls)),
            "eps_per_cpu_s_median": round(batch / statistics.median(cpus)), "slowest_batch_s": round(max(walls), 3),
            "open_s": round(open_s, 2), "self_cpu_s": round(me.ru_utime + me.ru_stime, 1),
            "children_cpu_s": round(children.ru_utime + children.ru_stime, 1), "load": round(os.getloadavg()[0], 1)}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000,
                          int(sys.argv[2]) if len(sys.argv) > 2 else 1000)))
