"""Recall's feedback means while episodes are being recorded (embedded store).

A recall with a feedback filter reads every rated episode's mean score (``feedback_means``). It is
kept between recalls and read again when the rows it depends on change. This prints, for a tenant
with RATINGS ratings, the time of ``feedback_means`` right after each recorded batch, p50/p99 over
ROUNDS rounds, two ways in one run, alternated: keyed on the episode part's generation (read
again after every recorded batch: the code before) and on the feedback rows' generation (now).

    python bench/feedback_means.py [--ratings 10000] [--rounds 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.unit.kg.test_store_contract import add, episode, feedback  # noqa: E402
from worldgraph.kg.embedded.store import EmbeddedGraphStore  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ratings", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()
    t = "bench"
    with tempfile.TemporaryDirectory() as tmp:
        store = EmbeddedGraphStore(Path(tmp) / "worldgraph.db")
        ids: list[str] = []
        for start in range(0, args.ratings, 1000):
            ids += add(store, t, *[episode(t, minutes=m) for m in range(start, min(start + 1000, args.ratings))])
        for n, eid in enumerate(ids):
            store.add_feedback(t, feedback(t, eid, (n % 7) / 3.5 - 1.0, n=n % 10))
        eps = store.episodes  # type: ignore[attr-defined]
        now = eps._feedback_gen
        before = lambda: eps.db.version()[0]  # noqa: E731 - the key before: the episode part's generation
        times: dict[str, list[float]] = {"before (episode generation)": [], "now (feedback generation)": []}
        minute = args.ratings
        for r in range(args.rounds):
            for name, key in (list(times.items()) if r % 2 == 0 else list(reversed(times.items()))):
                eps._feedback_gen = before if name.startswith("before") else now
                eps.feedback_means(t)  # current
                add(store, t, *[episode(t, minutes=minute + i) for i in range(10)])  # a recorded batch
                minute += 10
                t0 = time.perf_counter()
                means = eps.feedback_means(t)
                key.append((time.perf_counter() - t0) * 1000)
                assert len(means) == args.ratings
        store.close()
    print(f"feedback_means after each recorded batch of 10, {args.ratings:,} ratings, {args.rounds} rounds")
    print(f"{'key':32} {'p50 ms':>8} {'p99 ms':>8}")
    for name, xs in times.items():
        xs.sort()
        print(f"{name:32} {statistics.median(xs):8.3f} {xs[int(0.99 * (len(xs) - 1))]:8.3f}")


if __name__ == "__main__":
    main()
