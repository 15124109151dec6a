"""Where a record's time goes under concurrency, in process (no HTTP): ``--threads`` threads each
record one experience per call for ``--seconds``, with coalescing and group commit off, then on
(alternated ``--rounds`` times, a fresh folder each), timing the embed call, the whole commit and
the store write + index append inside the index's write window.

    python bench/bench_record_window.py --embedder local --threads 16 --seconds 12 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import threading
import time
from typing import Any

from worldgraph import WorldModel

WORDS = ["deploy", "service", "canary", "rollback", "shard", "build", "cache", "latency"]


def run(mode: str, embedder: str, threads: int, seconds: float) -> str:
    on = mode == "on"
    folder = tempfile.mkdtemp(prefix="wg-bench-window-")
    wm = WorldModel.open(folder, embedding_provider=embedder, embedding_coalesce=on, record_group_commit=on)
    acc = {"embed_s": 0.0, "embeds": 0, "commit_s": 0.0, "commits": 0, "episodes": 0, "inside_s": 0.0}
    lock = threading.Lock()

    def timed(fn: Any, key: str, count: str | None = None) -> Any:
        def wrapper(*a: Any) -> Any:
            t = time.perf_counter()
            out = fn(*a)
            with lock:
                acc[key] += time.perf_counter() - t
                if count:
                    acc[count] += 1
                if key == "commit_s":
                    acc["episodes"] += len(a[1])
            return out
        return wrapper

    wm.indexer.embed = timed(wm.indexer.embed, "embed_s", "embeds")  # type: ignore[method-assign]
    wm.store.add_episodes = timed(wm.store.add_episodes, "inside_s")  # type: ignore[method-assign]
    wm.indexer.index_rows = timed(wm.indexer.index_rows, "inside_s")  # type: ignore[method-assign]
    commit = timed(wm.recorder.commit, "commit_s", "commits")
    if wm.recorder.group_commit is not None:
        wm.recorder.group_commit._write = commit
    else:
        wm.recorder.commit = commit  # type: ignore[method-assign]
    wm.record_experience("t", {"agent_id": "a", "task_type": "t", "task_description": "warm up", "outcome": "success"})
    for k in acc:
        acc[k] = 0
    done = [0]
    stop = time.monotonic() + seconds

    def worker(k: int) -> None:
        rng = random.Random(k)
        while time.monotonic() < stop:
            wm.record_experience("t", {"agent_id": f"a{k}", "task_type": "deploy", "outcome": "success",
                                       "task_description": " ".join(rng.choice(WORDS) for _ in range(12))})
            with lock:
                done[0] += 1

    cpu0, t0 = time.process_time(), time.monotonic()
    pool = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    wm.close()
    shutil.rmtree(folder, ignore_errors=True)
    n, c = max(done[0], 1), max(int(acc["commits"]), 1)
    return (f"{mode:4}| {done[0] / wall:9.1f} | {1000 * cpu / n:10.1f} | {1000 * acc['embed_s'] / max(acc['embeds'], 1):8.1f} | "
            f"{acc['episodes'] / c:9.1f} | {1000 * acc['inside_s'] / c:12.1f} | {1000 * acc['commit_s'] / c:10.1f} | "
            f"{os.getloadavg()[0]:.1f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--embedder", choices=["hashing", "local"], default="local")
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--seconds", type=float, default=12.0)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    print("mode| records/s | CPU ms/rec | embed ms | eps/commit | window ms/commit | commit ms* | load 1 min")
    for _ in range(args.rounds):
        for mode in ("off", "on"):
            print(run(mode, args.embedder, args.threads, args.seconds), flush=True)
    print("* with commits one at a time, the whole commit includes waiting for the write lock")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
