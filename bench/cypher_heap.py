"""What blanking the heap costs a Cypher projection's writes (``kg/embedded/cypher/heap.py``).

One tenant of ``--episodes`` episodes; then, ``--rounds`` times, alternating which goes first: a
new store builds the tenant's projection (first query, saved to a file) and, after 10 episodes are
recorded, refreshes it (the next query); once with the blanking as shipped, once switched off.
Prints the p50 of each.

    python bench/cypher_heap.py [--episodes 10000] [--rounds 6]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.unit.kg.test_store_contract import add, episode  # noqa: E402
from worldgraph.kg.embedded.cypher import heap, opener, projection  # noqa: E402
from worldgraph.kg.embedded.store import EmbeddedGraphStore  # noqa: E402

COUNT = "MATCH (e:Episode) RETURN count(e) AS n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    opener.SAVE_MIN_ROWS = 0  # saved to a file whatever its size, as a large tenant's is
    t = "bench"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "worldgraph.db"
        store = EmbeddedGraphStore(path)
        for start in range(0, args.episodes, 1000):
            add(store, t, *[episode(t, minutes=m, task=f"task number {m}")
                            for m in range(start, min(start + 1000, args.episodes))])
        store.close()
        build: dict[str, list[float]] = {"blanked (shipped)": [], "not blanked": []}
        refresh: dict[str, list[float]] = {k: [] for k in build}
        minute = args.episodes
        for r in range(args.rounds):
            for name in (list(build) if r % 2 == 0 else list(reversed(build))):
                projection.blank_allocations = heap.blank_allocations if name.startswith("blanked") else nullcontext
                shutil.rmtree(path.with_name(path.name + "-cypher"), ignore_errors=True)
                store = EmbeddedGraphStore(path)
                try:
                    t0 = time.perf_counter()
                    store.cypher(t, COUNT)
                    build[name].append(time.perf_counter() - t0)
                    add(store, t, *[episode(t, minutes=minute + i) for i in range(10)])
                    minute += 10
                    t0 = time.perf_counter()
                    store.cypher(t, COUNT)
                    refresh[name].append(time.perf_counter() - t0)
                finally:
                    store.close()
    print(f"{args.episodes:,} episodes, {args.rounds} rounds alternated")
    print(f"{'':20} {'build p50 s':>12} {'refresh p50 ms':>15}")
    for name in build:
        print(f"{name:20} {statistics.median(build[name]):12.3f} {1000 * statistics.median(refresh[name]):15.1f}")


if __name__ == "__main__":
    main()
