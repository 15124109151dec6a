"""Resident memory of each read and maintenance path, in a fresh process (run by bench_memory.py).

    python bench/recall_memory.py DATA_DIR QUERIES.npz

Opens the WorldModel at DATA_DIR (written by bench_memory.py), then runs each path on its own and
reports the process's RSS after it and its peak during it (Linux: the peak is reset before each
path): recall (hybrid), recall with filters, the vector and BM25 searches alone, then an ANN index
build at full size in this process (timed; the background normally builds in a child process).
A fresh process, so nothing the loading left behind is counted. One JSON object on stdout.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import measure  # noqa: E402
from corpus import DAY, DIM, PrecomputedEmbedder, _iso  # noqa: E402

from worldgraph import WorldModel  # noqa: E402

TENANT = "bench"


def main(argv: list[str]) -> int:
    data, qfile = Path(argv[0]), argv[1]
    q = np.load(qfile)
    texts, vecs, roles, anchor = list(q["texts"]), q["vectors"], list(q["roles"]), float(q["anchor"])
    out: dict[str, Any] = {"start": measure.rss_mb()}
    emb = PrecomputedEmbedder()
    emb.vectors.update(zip(texts, vecs))
    assert vecs.shape[1] == DIM
    wm = WorldModel.open(data, embedder=emb)
    out["open"] = measure.rss_mb()

    def step(name: str, fn: Callable[[], Any]) -> None:
        measure.reset_peak_rss()
        t0 = time.perf_counter()
        fn()
        out[name] = {**measure.rss_mb(), "seconds": round(time.perf_counter() - t0, 3)}

    window = {"start": _iso(anchor - 30 * DAY), "end": _iso(anchor)}
    step("recall", lambda: [wm.recall_experiences(TENANT, None, t, 5, {"hybrid": True}) for t in texts])
    step("recall_filtered", lambda: [wm.recall_experiences(TENANT, r, t, 5, {"hybrid": True, "date_range": window})
                                     for t, r in zip(texts, roles)])
    step("vector_search", lambda: [wm.index.vector_search(TENANT, v, k=100, columns=["episode_id"]) for v in vecs])
    step("vector_search_filtered", lambda: [wm.index.vector_search(TENANT, v, k=100, columns=["episode_id"],
                                                                   where={"agent_role": r}) for v, r in zip(vecs, roles)])
    step("text_search", lambda: [wm.index.text_search(TENANT, t, k=20, columns=["episode_id"]) for t in texts])
    step("ann_build", lambda: wm.index.rebuild_vector_index(TENANT))
    wm.close()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
