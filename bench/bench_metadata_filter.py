"""Where a metadata filter runs in recall, measured: pushed into the index search (the terms every
match carries, then checked on the records) against checked on the store's records only (the
candidates the unfiltered search returns, as every other filter is checked after the search).
Plain recall (no filter) runs in the same loop: the terms column must not slow it.

    python bench/bench_metadata_filter.py --episodes 20000 --queries 60 --out bench/results/metadata-filter.json

Episodes carry ``{"team": one of 2, "user": one of U}`` (``--users``, default 1000): a team filter
passes half of them, a user filter 1/U. For each filter kind, the two ways alternate query by
query; printed: p50 latency, and how many of the k results the way returns that the exact
filtered recall (the push-down, whose candidates all pass) returns too.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.memory.recall import prepare

WORDS = ("invoice ledger shipment warehouse refund customer pricing forecast audit payroll contract vendor "
         "inventory budget travel meeting deadline report migration backup outage deploy review hiring").split()
K = 10


class StoreOnly:
    """Recall with the metadata terms left out of the index search: the filter is checked on the
    records of the candidates only (what "in the store" means for recall)."""

    def __enter__(self) -> StoreOnly:
        self.where = prepare.Filters.where

        def without_terms(filters: prepare.Filters) -> dict[str, Any]:
            out = self.where(filters)
            out.pop("metadata_terms", None)
            out.pop("metadata_any", None)
            return out

        prepare.Filters.where = without_terms  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        prepare.Filters.where = self.where  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=20_000)
    ap.add_argument("--users", type=int, default=1_000)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rng = random.Random(3)
    out: dict[str, Any] = {"episodes": args.episodes, "users": args.users, "k": K, "kinds": {}}
    with tempfile.TemporaryDirectory() as folder, WorldModel.open(folder, embedder=HashingEmbedder(384)) as wm:
        for start in range(0, args.episodes, 1000):
            wm.record_experiences("acme", [{
                "agent_id": "notes", "task_type": "note", "outcome": "success",
                "task_description": " ".join(rng.choice(WORDS) for _ in range(8)) + f" #{i}",
                "metadata": {"team": f"team-{i % 2}", "user": f"u{rng.randrange(args.users)}"}}
                for i in range(start, min(start + 1000, args.episodes))])
        wm.index.optimize()  # scalar and label indexes, the ANN index past ann_index_min_rows
        queries = [" ".join(rng.sample(WORDS, 3)) for _ in range(args.queries)]
        kinds = {"none": None, "team (1/2)": {"team": "team-1"}, f"user (1/{args.users})": "user"}
        for name, flt in kinds.items():
            pushed_ms, store_ms, overlap, found = [], [], [], []
            for i, q in enumerate(queries):
                spec = {"user": f"u{i % args.users}"} if flt == "user" else flt
                opts = {"min_similarity": -1.0, **({"metadata": spec} if spec else {})}

                def pushed() -> list[str]:
                    return [r["episode_id"] for r in wm.recall_experiences("acme", None, q, K, options=opts)]

                def store_only() -> list[str]:
                    with StoreOnly():
                        return [r["episode_id"] for r in wm.recall_experiences("acme", None, q, K, options=opts)]

                runs = [(pushed, pushed_ms), (store_only, store_ms)]
                got: dict[Any, list[str]] = {}
                for fn, times in runs if i % 2 == 0 else runs[::-1]:
                    t = time.perf_counter()
                    got[fn] = fn()
                    times.append((time.perf_counter() - t) * 1000)
                truth = got[pushed]
                found.append(len(truth))
                overlap.append(len(set(got[store_only]) & set(truth)) / len(truth) if truth else 1.0)
            out["kinds"][name] = {"pushed_p50_ms": statistics.median(pushed_ms), "store_p50_ms": statistics.median(store_ms),
                                  "results_mean": statistics.mean(found), "store_only_recall": statistics.mean(overlap)}
    print(f"{'filter':16} {'pushed p50':>11} {'store-only p50':>15} {'results':>8} {'store-only finds':>17}")
    for name, r in out["kinds"].items():
        print(f"{name:16} {r['pushed_p50_ms']:9.1f}ms {r['store_p50_ms']:13.1f}ms {r['results_mean']:8.1f} "
              f"{r['store_only_recall']:16.0%}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
