"""World search speed: ``search_world`` on a 10k-node world, ``context()`` with 10k episodes, and
what the world index costs a merge.

    python bench/bench_world_search.py build --data /tmp/wsb        # the world and the episodes, once
    python bench/bench_world_search.py search --data /tmp/wsb       # search_world p50 / p95, context() p50 / p95
    python bench/bench_world_search.py merge --main /tmp/wg-main --rounds 6 --merges 25
    # /tmp/wg-main: main's code (git archive main | tar -x -C /tmp/wg-main), run with this venv

``build`` grows one environment of 10,000 nodes (200 rooms, 1,800 containers each with an
open / closed state, 7,000 things in them; every thing and container in its place by
containment) with ``apply_delta`` in deltas of 500 items, 40 rules, waits for the world index,
and records 10,000 episodes: the default local embedder (what an agent gets), embedded store.
``search`` asks 60 questions (where is X, what is in C, is C open, what happens if ...) of
``search_world`` (``k=10``) and ``context()`` (1,500 tokens, the world's environment), and of
``recall_experiences`` (for scale, in the same run), after three warm-up questions; the query
embedding is in every call. Wall time p50 / p95 and the process's CPU time p50 (all its
threads: it moves less with the machine's load).

``merge`` measures ``apply_delta`` of a 20-item delta (10 new things and their containment in a
1,000-node world) in a fresh data folder per round, alternating this code and ``--main``'s in
child processes, ``--merges`` merges a round back to back (the world index is written in the
background while the next merges run): the p50 per round and the median of the rounds' p50s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TENANT = "bench"
ENV = "mansion"
ADJ = ["red", "blue", "green", "old", "new", "small", "large", "heavy", "shiny", "dusty", "wooden", "iron"]
NOUN = ["key", "lamp", "book", "coin", "box", "cup", "knife", "rope", "map", "bottle", "ring", "scroll"]


def world_deltas(rooms: int = 200, containers: int = 1800, things: int = 7000, seed: int = 7) -> list[dict[str, Any]]:
    """The deltas that grow the 10k-node world, 500 items each at most."""
    rnd = random.Random(seed)
    items: list[tuple[str, dict[str, Any]]] = []
    room_names = [f"room {i}" for i in range(rooms)]
    box_names = [f"{rnd.choice(ADJ)} chest {i}" for i in range(containers)]
    for name in room_names:
        items.append(("entities", {"name": name, "type": "room"}))
    for i, name in enumerate(box_names):
        items.append(("entities", {"name": name, "type": "container"}))
        items.append(("edges", {"relation": "containment", "src_ref": room_names[i % rooms], "dst_ref": name}))
        word = rnd.choice(["open", "closed"])
        items.append(("states", {"name": f"{name} {word}", "type": "container_state", "entity_ref": name}))
    for i in range(things):
        name = f"{rnd.choice(ADJ)} {rnd.choice(NOUN)} {i}"
        parent = rnd.choice(box_names) if rnd.random() < 0.7 else rnd.choice(room_names)
        items.append(("entities", {"name": name, "type": "item"}))
        items.append(("edges", {"relation": "containment", "src_ref": parent, "dst_ref": name}))
    for i in range(40):
        box = rnd.choice(box_names)
        items.append(("rules", {"condition": f"the {box} is locked", "outcome": f"opening the {box} fails (rule {i})",
                                "linked_refs": [box]}))
    deltas, cur = [], {"entities": [], "states": [], "edges": [], "rules": []}
    # entities before what refers to them: a delta holds each item whose refs are in it or earlier
    for kind, item in items:
        cur[kind].append(item)
        if sum(len(v) for v in cur.values()) >= 500:
            deltas.append(cur)
            cur = {"entities": [], "states": [], "edges": [], "rules": []}
    deltas.append(cur)
    return deltas


def questions(data: Path, n: int = 60, seed: int = 11) -> list[str]:
    from worldgraph import WorldModel

    with WorldModel.open(data, read_only=True) as wm:
        graph = wm.world_graph(TENANT, ENV)
    rnd = random.Random(seed)
    things = [x["name"] for x in graph["nodes"] if x["type"] == "item"]
    boxes = [x["name"] for x in graph["nodes"] if x["type"] == "container"]
    out = []
    for i in range(n):
        kind = i % 4
        out.append(f"Where is the {rnd.choice(things)} now?" if kind == 0 else
                   f"What is in the {rnd.choice(boxes)}?" if kind == 1 else
                   f"Is the {rnd.choice(boxes)} open or closed?" if kind == 2 else
                   f"What happens if I open the {rnd.choice(boxes)}?")
    return out


def build(data: Path, episodes: int) -> None:
    from worldgraph import WorldModel

    started = time.perf_counter()
    with WorldModel.open(data) as wm:
        for d in world_deltas():
            report = wm.apply_delta(TENANT, ENV, d)
            assert not report.dropped, report.dropped[:3]
        wm.wait_for_updates()
        print(f"world: {wm.list_environments(TENANT)} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
        rnd = random.Random(3)
        batch = []
        for i in range(episodes):
            box, thing = f"chest {rnd.randrange(1800)}", f"{rnd.choice(NOUN)} {rnd.randrange(7000)}"
            batch.append({"agent_id": f"agent-{i % 7}", "agent_role": "explorer", "task_type": "explore",
                          "task_description": f"looked for the {thing} near the {box}",
                          "outcome": rnd.choice(["success", "failure"]),
                          "learnings": [f"the {box} was {rnd.choice(['open', 'closed', 'locked'])}"]})
            if len(batch) == 1000:
                wm.record_experiences(TENANT, batch)
                batch = []
        if batch:
            wm.record_experiences(TENANT, batch)
        print(f"built in {time.perf_counter() - started:.0f} s: {wm.stats(TENANT)['episodes']} episodes, "
              f"{wm.world_search.index.count(TENANT)} world rows", file=sys.stderr)


def timed(fn: Any, qs: list[str]) -> dict[str, float]:
    for q in qs[:3]:
        fn(q)
    times, cpu = [], []
    for q in qs:
        t, c = time.perf_counter(), time.process_time()
        fn(q)
        times.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    times.sort()
    # CPU time (every thread of the process) moves less with the machine's load than wall time
    return {"p50_ms": round(statistics.median(times), 2), "p95_ms": round(times[int(len(times) * 0.95) - 1], 2),
            "cpu_p50_ms": round(statistics.median(cpu), 2), "n": len(times)}


def search(data: Path) -> dict[str, Any]:
    from worldgraph import WorldModel

    qs = questions(data)
    with WorldModel.open(data) as wm:
        out = {"search_world": timed(lambda q: wm.search_world(TENANT, q, env_name=ENV, k=10), qs),
               "context": timed(lambda q: wm.context(TENANT, q, env_name=ENV, max_tokens=1500), qs),
               "recall (for scale)": timed(lambda q: wm.recall_experiences(TENANT, None, q, limit=5), qs),
               "world_rows": wm.world_search.index.count(TENANT), "episodes": wm.stats(TENANT)["episodes"],
               "load": os.getloadavg()}
    return out


def merge_child(data: Path, merges: int) -> tuple[list[float], list[float]]:
    """In a child process (this code or main's): a 1,000-node world, then ``merges`` 20-item deltas."""
    from worldgraph import WorldModel

    with WorldModel.open(data) as wm:
        for d in world_deltas(rooms=20, containers=180, things=620, seed=5):
            wm.apply_delta(TENANT, ENV, d)
        wm.wait_for_updates()
        times, cpu = [], []
        for m in range(merges):
            delta = {"entities": [{"name": f"pebble {m} {j}", "type": "item"} for j in range(10)], "states": [],
                     "edges": [{"relation": "containment", "src_ref": f"room {(m + j) % 20}", "dst_ref": f"pebble {m} {j}"}
                               for j in range(10)], "rules": []}
            t, c = time.perf_counter(), time.process_time()
            wm.apply_delta(TENANT, ENV, delta)
            times.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
        wm.wait_for_updates()
    return times, cpu


def merge(main: Path, rounds: int, merges: int) -> dict[str, Any]:
    code = {"branch": ROOT, "main": main}
    p50s: dict[str, list[float]] = {"branch": [], "main": []}
    cpus: dict[str, list[float]] = {"branch": [], "main": []}
    for r in range(rounds):
        for name in (("branch", "main") if r % 2 == 0 else ("main", "branch")):
            tmp = Path(tempfile.mkdtemp(prefix=f"wsb-merge-{name}-"))
            try:
                env = {**os.environ, "PYTHONPATH": str(code[name])}
                res = subprocess.run([sys.executable, str(Path(__file__).resolve()), "merge-child", "--data", str(tmp / "d"),
                                      "--merges", str(merges)], env=env, cwd=str(code[name]), capture_output=True,
                                     text=True, check=True)
                times, cpu = json.loads(res.stdout.strip().splitlines()[-1])
                p50s[name].append(statistics.median(times))
                cpus[name].append(statistics.median(cpu))
                print(f"round {r} {name}: p50 {p50s[name][-1]:.1f} ms, cpu p50 {cpus[name][-1]:.1f} ms", file=sys.stderr)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    out: dict[str, Any] = {k: {"round_p50_ms": [round(x, 2) for x in v], "median_ms": round(statistics.median(v), 2),
                               "round_cpu_p50_ms": [round(x, 2) for x in cpus[k]],
                               "cpu_median_ms": round(statistics.median(cpus[k]), 2)} for k, v in p50s.items()}
    out["ratio"] = round(out["branch"]["median_ms"] / out["main"]["median_ms"], 3)
    out["cpu_ratio"] = round(out["branch"]["cpu_median_ms"] / out["main"]["cpu_median_ms"], 3)
    # rounds run in pairs next to each other: the ratio within each pair, then their geometric mean
    pairs = [b / m for b, m in zip(p50s["branch"], p50s["main"])]
    out["paired_ratio_geomean"] = round(statistics.geometric_mean(pairs), 3)
    out["load"] = os.getloadavg()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("build", "search", "merge", "merge-child"))
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "wsb")
    ap.add_argument("--episodes", type=int, default=10_000)
    ap.add_argument("--main", type=Path, default=None, help="a copy of main's code (merge)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--merges", type=int, default=25)
    args = ap.parse_args()
    if args.what == "build":
        build(args.data, args.episodes)
    elif args.what == "search":
        print(json.dumps(search(args.data), indent=1))
    elif args.what == "merge-child":
        print(json.dumps(merge_child(args.data, args.merges)))
    else:
        if args.main is None:
            ap.error("merge needs --main (a copy of main's code)")
        print(json.dumps(merge(args.main, args.rounds, args.merges), indent=1))


if __name__ == "__main__":
    if str(ROOT) not in sys.path and os.environ.get("PYTHONPATH") is None:
        sys.path.insert(0, str(ROOT))
    main()
