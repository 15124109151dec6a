"""Cypher on the embedded store (LadybugDB projection), beside the same queries on Neo4j.

One tenant holding ``--episodes`` synthetic episodes (8 agents) and a world of ``--world``
elements (bench_neo4j.make_plan: half nodes, half edges, 1 % rules) is written through the store
API. Then, per store:

* **first query**: a new store object opens the data and runs one query, the rules by confidence
  (the embedded store builds the tenant's projection here: of the world part alone, which is all
  this query reaches, unless a full one is saved);
* **first query needing the episodes**: the first query below that reaches past the world part
  (the embedded store builds the full projection here, when it has not reopened a saved one);
* **exploration p50**: the queries below, ``--runs`` times each, after one warm-up run;
* **after a 20-item delta**: a 20-element plan (make_plan(..., 20, update=True), its nodes' confidence
  changed each time) is applied, then one query runs; ``--deltas`` times, p50;
* **after 10 episodes recorded**: ``add_episodes`` of 10 episodes, then the episodes-per-agent query;
  ``--deltas`` times, p50;
* the resident memory of the process before and after the first embedded query, and the SQLite
  file's size.

    python bench/bench_cypher_embedded.py --episodes 10000 --world 4000
    NEO4J_URI=bolt://127.0.0.1:7687 NEO4J_PASSWORD=... python bench/bench_cypher_embedded.py --neo4j

``--hostile`` measures instead, on the tenant's store opened with ``--timeout`` (default 2 s):

* **hostile queries end by the deadline**: each query of ``HOSTILE`` (a CPU loop in one expression,
  a 60-deep nested CASE, nested labels(), a 63 KB chain of WITH clauses, a huge padded string)
  is run ``--rounds`` times; printed: the seconds past ``--timeout`` the call took (negative: it
  ended before), its outcome, and whether the process's CPU went on afterwards;
* **another tenant while one floods**: a second tenant (``--others`` episodes, a small world)
  runs the exploration queries alone (warm p50), then again while 8 threads of the first tenant
  send hostile queries without pause for ``--flood`` seconds (those past the tenant's 2 in flight
  answered 429 at once); printed: both p50s, their ratio, and the flood's outcomes.

Only the store API both trees have is used, so a tree before the sandbox runs it too (its queries
run in its own threads; a query it abandons keeps a core).

``--data FILE`` keeps the written SQLite file at FILE (written there when missing) and measures a
copy of it, so two trees (before / after a change) can be measured on the same data, alternately:

    python bench/bench_cypher_embedded.py --episodes 100000 --world 20000 --data /tmp/b100k.db
    PYTHONPATH=/path/to/old/tree python /path/to/old/tree/bench/bench_cypher_embedded.py --data /tmp/b100k.db
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cypher import episodes  # noqa: E402
from bench_neo4j import ENV, make_plan  # noqa: E402

try:
    from worldgraph.kg.embedded.cypher.reach import world_only
except ImportError:  # a tree before the sandbox (--hostile runs there too)
    from worldgraph.kg.embedded.cypher.text import world_only  # type: ignore[attr-defined,no-redef]
from worldgraph.kg.embedded.cypher.saved import folder_for  # noqa: E402
from worldgraph.kg.embedded.store import EmbeddedGraphStore  # noqa: E402
from worldgraph.kg.store import GraphStore  # noqa: E402

QUERIES = {
    "rules by confidence": "MATCH (r:Rule {tenant_id: $tenant_id, env_name: $env}) WHERE r.valid_to IS NULL "
                           "RETURN r.condition, r.confidence AS c ORDER BY c DESC, r.condition LIMIT 10",
    "containment tree 1..3": "MATCH (a:Entity {tenant_id: $tenant_id, env_name: $env, name: 'thing 1'})"
                             "-[:CONTAINS*1..3]->(x) RETURN count(x) AS n",
    "transitions of a state": "MATCH (s:State {tenant_id: $tenant_id, env_name: $env, name: $state})"
                              "-[t:TRANSITION]->(n:State {tenant_id: $tenant_id}) RETURN s.name, t.action, n.name",
    "episodes per agent": "MATCH (e:Episode {tenant_id: $tenant_id})-[:PERFORMED_BY]->(a:Agent {tenant_id: $tenant_id}) "
                          "RETURN a.id AS agent, count(e) AS n ORDER BY agent",
    "one episode": "MATCH (e:Episode {tenant_id: $tenant_id, task_description: 'task 42'}) RETURN e.id, e.outcome",
}


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load(store: GraphStore, tenant: str, n_episodes: int, world: int) -> None:
    eps = episodes(tenant, n_episodes)
    for i in range(0, len(eps), 5000):
        store.add_episodes(tenant, eps[i:i + 5000], [], [])
    store.apply_plan(make_plan(tenant, world))


def ms(f: Any) -> float:
    t = time.perf_counter()
    f()
    return (time.perf_counter() - t) * 1e3


def measure(open_store: Any, tenant: str, params: dict[str, Any], runs: int, deltas: int,
            first: str = "first query ms") -> dict[str, Any]:
    store = open_store()
    out: dict[str, Any] = {}
    try:
        rss0 = rss_mb()
        out[first] = ms(lambda: store.cypher(tenant, QUERIES["rules by confidence"], params))
        out["rss after first query MB"] = rss_mb() - rss0
        for name, query in QUERIES.items():
            warm = ms(lambda q=query: store.cypher(tenant, q, params))
            if not world_only(query) and "first query needing the episodes ms" not in out:
                # the first query was answered by the world part alone: this one builds the rest
                out["first query needing the episodes ms"] = warm
            out[f"{name} p50 ms"] = statistics.median(ms(lambda q=query: store.cypher(tenant, q, params))
                                                      for _ in range(runs))
        out["exploration p50 ms"] = statistics.median(v for k, v in out.items() if k.endswith("p50 ms"))
        after = []
        for k in range(deltas):
            plan = make_plan(tenant, 20, update=True)
            for node in plan.nodes:  # each delta changes its rows (the same rows again would be no change)
                node["confidence"] = round(0.5 + k / 100 + (0.3 if first.startswith("reopen") else 0), 2)
            plan.meta["graph_version"] = 2 + k + (100 if first.startswith("reopen") else 0)
            store.apply_plan(plan)
            after.append(ms(lambda: store.cypher(tenant, QUERIES["rules by confidence"], params)))
        if after:
            # the first world write after the projection was opened from its file (or built in a child
            # process) first loads the world part's rows and index into memory
            out["first query after a 20-item delta ms"] = after.pop(0)
        out["query after a 20-item delta p50 ms"] = statistics.median(after) if after else float("nan")
        recorded = []
        for _ in range(deltas):  # an episode write: 10 episodes recorded, then one query
            store.add_episodes(tenant, episodes(tenant, 10), [], [])
            recorded.append(ms(lambda: store.cypher(tenant, QUERIES["episodes per agent"], params)))
        out["query after 10 episodes recorded p50 ms"] = statistics.median(recorded) if recorded else float("nan")
    finally:
        store.close()
    return out


HOSTILE = {
    "CPU loop in one expression": "RETURN size(list_transform(range(1, 1000000), x -> size(lpad(to_string(x), 2000, "
                                  "'b')))) AS n",
    "nested CASE, 60 deep": "RETURN " + "CASE WHEN true THEN " * 60 + "1" + " ELSE 0 END" * 60 + " AS c",
    "nested labels(), 13 deep": "MATCH (n:Entity {tenant_id: $tenant_id}) RETURN " + "labels(" * 13 + "n" + ")" * 13
                                + " AS l LIMIT 1",
    "63 KB chain of WITH": "MATCH (e:Episode {tenant_id: $tenant_id}) " + " ".join(
        f"WITH e, {i} AS x{i}" for i in range(2950)) + " RETURN count(e) AS n",
    "cross product of episodes": "MATCH (a:Episode {tenant_id: $tenant_id}), (b:Episode {tenant_id: $tenant_id}) "
                                 "RETURN count(*) AS n",
}


def hostile(path: Path, tenant: str, others: int, timeout: float, rounds: int, flood: float, runs: int) -> None:
    """``--hostile`` (module docstring)."""
    import threading

    store = EmbeddedGraphStore(path, cypher_timeout=timeout)
    other = f"other-{uuid.uuid4().hex[:6]}"
    load(store, other, others, 400)
    params = {"env": ENV, "state": "thing 199"}
    try:
        for _ in range(3):  # the attacker's projection, built (its first query may run long on a loaded machine)
            try:
                store.cypher(tenant, QUERIES["episodes per agent"], params)
                break
            except Exception as exc:  # noqa: BLE001 - printed
                print(f"  (warm-up: {type(exc).__name__}: {str(exc)[:80]})")
        print(f"hostile queries, cypher_timeout {timeout} s: seconds past it (negative: ended before); outcome")
        for name, query in HOSTILE.items():
            for _ in range(rounds):
                try:  # a warm projection and child (a tree before the sandbox may refuse: abandoned runs)
                    store.cypher(tenant, "MATCH (r:Rule {tenant_id: $tenant_id}) RETURN count(r) AS n", {})
                except Exception as exc:  # noqa: BLE001 - printed
                    print(f"  (warm-up: {type(exc).__name__}: {str(exc)[:100]})")
                cpu0 = time.process_time()
                started = time.monotonic()
                try:
                    store.cypher(tenant, query, params)
                    outcome = "rows"
                except Exception as exc:  # noqa: BLE001 - printed
                    outcome = f"{type(exc).__name__}: {str(exc)[:60]}"
                past = time.monotonic() - started - timeout
                time.sleep(1.0)
                busy = time.process_time() - cpu0
                print(f"  {name:30s} {past:+7.2f} s   {outcome}   (this process's CPU during the call and the "
                      f"second after: {busy:.1f} s)")

        def warm_p50() -> float:
            return statistics.median(ms(lambda q=q: store.cypher(other, q, params))
                                     for q in QUERIES.values() for _ in range(runs))
        for q in QUERIES.values():
            store.cypher(other, q, params)
        alone = warm_p50()
        stop = threading.Event()
        outcomes: dict[str, int] = {}
        lock = threading.Lock()

        def attacker() -> None:
            names = list(HOSTILE.values())
            i = 0
            while not stop.is_set():
                try:
                    store.cypher(tenant, names[i % len(names)], params)
                    key = "rows"
                except Exception as exc:  # noqa: BLE001 - counted
                    key = type(exc).__name__ + (" (429)" if "too many" in str(exc) else "")
                    if "too many" in str(exc):
                        time.sleep(0.05)
                with lock:
                    outcomes[key] = outcomes.get(key, 0) + 1
                i += 1
        threads = [threading.Thread(target=attacker, daemon=True) for _ in range(8)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        end = time.monotonic() + flood
        during = []
        while time.monotonic() < end:
            during.append(warm_p50())
        stop.set()
        for t in threads:
            t.join(timeout=timeout + 30)
        flooded = statistics.median(during)
        print(f"another tenant's warm p50 (the {len(QUERIES)} exploration queries): alone {alone:.1f} ms, while 8 "
              f"threads of one tenant send hostile queries {flooded:.1f} ms ({flooded / alone:.2f}x); the flood's "
              f"outcomes: {outcomes}")
    finally:
        store.close()


def phase(path: Path, tenant: str, which: str, runs: int, deltas: int) -> dict[str, Any]:
    """One phase in a process of its own (so its memory is its own): ``build`` opens the store with
    no projection saved and builds one; ``reopen`` opens the store again and uses the saved one."""
    params = {"env": ENV, "state": "thing 1999"}
    first = "first query ms (projection built)" if which == "build" else "reopen: first query ms (saved projection)"
    return measure(lambda: EmbeddedGraphStore(path), tenant, params, runs, deltas, first)


def run_phase(path: Path, tenant: str, which: str, runs: int, deltas: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--phase", which, "--path", str(path), "--tenant", tenant,
                          "--runs", str(runs), "--deltas", str(deltas)], check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=10_000)
    ap.add_argument("--world", type=int, default=4_000, help="world elements (half nodes)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--deltas", type=int, default=5)
    ap.add_argument("--data", type=Path, help="an SQLite file to keep the written data in and measure a copy of")
    ap.add_argument("--neo4j", action="store_true", help="also on Neo4j at $NEO4J_URI (a fresh tenant)")
    ap.add_argument("--hostile", action="store_true", help="hostile queries and another tenant meanwhile (above)")
    ap.add_argument("--timeout", type=float, default=2.0, help="--hostile: cypher_timeout_seconds")
    ap.add_argument("--rounds", type=int, default=1, help="--hostile: runs of each hostile query")
    ap.add_argument("--flood", type=float, default=15.0, help="--hostile: seconds of the 8-thread flood")
    ap.add_argument("--others", type=int, default=300, help="--hostile: the other tenant's episodes")
    ap.add_argument("--phase", choices=("build", "reopen"), help=argparse.SUPPRESS)  # one phase (run_phase)
    ap.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--tenant", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(phase(args.path, args.tenant, args.phase, args.runs, args.deltas)))
        return
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    params = {"env": ENV, "state": "thing 1999"}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "worldgraph.db"
        if args.data is not None and args.data.exists():
            shutil.copy(args.data, path)
            store = EmbeddedGraphStore(path)
            tenant = store.tenants()[0]
            store.close()
            print(f"embedded: a copy of {args.data} (tenant {tenant}); SQLite file {path.stat().st_size / 2**20:.1f} MiB")
        else:
            store = EmbeddedGraphStore(path)
            t = time.perf_counter()
            load(store, tenant, args.episodes, args.world)
            store.close()
            print(f"embedded: wrote {args.episodes} episodes + {args.world} world elements in "
                  f"{time.perf_counter() - t:.1f} s; SQLite file {path.stat().st_size / 2**20:.1f} MiB")
            if args.data is not None:
                shutil.copy(path, args.data)
        if args.hostile:
            hostile(path, tenant, args.others, args.timeout, args.rounds, args.flood, max(1, args.runs // 4))
            return
        for which in ("build", "reopen"):
            for k, v in run_phase(path, tenant, which, args.runs, args.deltas).items():
                print(f"  embedded  {which:6s} {k:45s} {v:9.1f}")
        saved = sum(f.stat().st_size for f in folder_for(path).rglob("*") if f.is_file())
        print(f"  embedded  saved projection on disk MiB {saved / 2**20:.1f}")
    if args.neo4j:
        from worldgraph.kg.neo4j.store import Neo4jGraphStore

        def neo() -> Neo4jGraphStore:
            return Neo4jGraphStore(os.environ.get("NEO4J_URI", "bolt://127.0.0.1:7687"),
                                   os.environ.get("NEO4J_USER", "neo4j"), os.environ.get("NEO4J_PASSWORD", ""))
        s = neo()
        load(s, tenant, args.episodes, args.world)
        s.close()
        for k, v in measure(neo, tenant, params, args.runs, args.deltas).items():
            print(f"  neo4j     {k:40s} {v:9.1f}")


if __name__ == "__main__":
    main()
