"""Where each record call's time goes, batch by batch: the calling thread's user and system CPU
and wall in each part of ``Recorder.record``, and the SQLite WAL's state after the call.

Appends ``N`` episodes of the bench corpus (vectors precomputed, as record_speed.py) to a data
folder in batches of 1,000 (a copy of a kept bench store: it is changed) and writes one JSON line
a batch to OUT: ``s`` the call's wall, ``u`` / ``sys`` the calling thread's user and system CPU
(``RUSAGE_THREAD``), ``parts`` the same three for each wrapped step (the limits walk, the model
parse, the episode build, the existing-id check, the embedding, the store commit, the index rows),
``wal_frames`` / ``wal_backfilled`` the WAL's length in pages and how many of them are copied into
the database (read from the ``-shm`` file's header: SQLite's WalIndexHdr.mxFrame and
WalCkptInfo.nBackfill), and the load. Then it prints the median, the overall rate, the 90th
percentile and the slowest batch, the batches over 400 ms (below 2,500 episodes/s), the calling
thread's mean CPU and the store commit's largest system CPU (bench/README.md, "The WAL copied at
each big commit"):

    cp -a KEPT/wg-bench-1000000 COPY/ && PYTHONPATH=TREE python bench/record_phases.py 150000 COPY/wg-bench-1000000 OUT.jsonl
    python bench/record_phases.py --summary OUT.jsonl [OUT2.jsonl ...]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# after PYTHONPATH: an A/B names the checkout to measure there (PYTHONPATH=TREE), this file may be another's
sys.path.append(str(Path(__file__).resolve().parents[1]))

from bench.corpus import Corpus, PrecomputedEmbedder  # noqa: E402

TENANT, SEED, CORPUS_MAX = "bench", 20260101, 10_000_000  # bench_memory.py's, as record_speed.py


def _usage() -> tuple[float, float, float]:
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime, r.ru_stime, time.perf_counter()


def _wrap(obj: Any, name: str, label: str, acc: dict[str, list[float]]) -> None:
    """Replace ``obj.name`` by a wrapper adding its calls' user, system CPU and wall to acc[label]."""
    inner: Callable[..., Any] = getattr(obj, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        before = _usage()
        try:
            return inner(*args, **kwargs)
        finally:
            total = acc.setdefault(label, [0.0, 0.0, 0.0])
            for i, (a, b) in enumerate(zip(before, _usage())):
                total[i] += b - a

    setattr(obj, name, timed)


def _wal(folder: Path) -> tuple[int, int]:
    """(pages in the WAL, pages of it copied into the database), from the -shm file's header."""
    try:
        head = (folder / "worldgraph.db-shm").read_bytes()[:100]
    except OSError:
        return -1, -1
    return struct.unpack_from("<I", head, 16)[0], struct.unpack_from("<I", head, 96)[0]


def run(n: int, folder: Path, out: Path) -> None:
    import worldgraph.facade.recording as recording
    from worldgraph import WorldModel

    acc: dict[str, list[float]] = {}
    for fn, label in (("check_value", "check"), ("parse_experience", "parse"), ("build_episode", "build")):
        _wrap(recording, fn, label, acc)
    emb = PrecomputedEmbedder()
    wm = WorldModel.open(folder, embedder=emb)
    stored = wm.store.stats(TENANT)["episodes"]
    recorder = next(o for o in gc.get_objects() if isinstance(o, recording.Recorder))
    for obj, fn, label in ((recorder.store, "get_episodes", "existing"), (recorder.store, "add_appending", "store_commit"),
                           (recorder.indexer, "index_rows", "index_rows"), (recorder.indexer, "embed", "embed")):
        _wrap(obj, fn, label, acc)
    batches = Corpus(max(CORPUS_MAX, stored + n), seed=SEED).batches(1000, start=stored)
    try:
        with out.open("w") as fh:
            for i in range(n // 1000):
                exps, vectors = next(batches)
                texts = emb.register(exps, vectors)
                acc.clear()
                before = _usage()
                wm.record_experiences(TENANT, exps)
                u, s, w = (b - a for a, b in zip(before, _usage()))
                frames, backfilled = _wal(folder)
                fh.write(json.dumps({"i": i, "s": round(w, 4), "u": round(u, 4), "sys": round(s, 4),
                                     "wal_frames": frames, "wal_backfilled": backfilled,
                                     "parts": {k: [round(x, 4) for x in v] for k, v in acc.items()},
                                     "load": round(os.getloadavg()[0], 2)}) + "\n")
                emb.forget(texts)
        wm.index.wait_for_maintenance(600)
        runs = list(wm.index.maintenance_runs)
        out.with_suffix(".maint.json").write_text(json.dumps(runs))  # the background's runs and their timed steps
    finally:
        wm.close()


def summary(path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    walls = sorted(r["s"] for r in rows)
    commit_sys = max(r["parts"].get("store_commit", [0, 0, 0])[1] for r in rows)
    return (f"{path.name}: {len(rows)} batches, median {1000 / statistics.median(walls):,.0f} eps/s, overall "
            f"{1000 * len(rows) / sum(walls):,.0f}, p90 {walls[int(len(walls) * 0.9)] * 1000:.0f} ms, slowest "
            f"{walls[-1] * 1000:.0f} ms, over 400 ms {sum(w > 0.4 for w in walls)}, calling thread CPU mean "
            f"{statistics.mean(r['u'] + r['sys'] for r in rows) * 1000:.1f} ms, store commit system CPU max "
            f"{commit_sys * 1000:.0f} ms, load {rows[-1]['load']}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?")
    ap.add_argument("folder", type=Path, nargs="?", help="a copy of a kept bench store (it is changed)")
    ap.add_argument("out", type=Path, nargs="?", help="one JSON line a batch")
    ap.add_argument("--summary", type=Path, nargs="+", help="print the summary of these outputs instead")
    args = ap.parse_args()
    if args.summary:
        for p in args.summary:
            print(summary(p))
    elif args.n and args.folder and args.out:
        run(args.n, args.folder, args.out)
        print(summary(args.out))
    else:
        ap.error("give N FOLDER OUT, or --summary OUT...")
