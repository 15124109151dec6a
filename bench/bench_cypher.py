"""What sealing cypher() costs: the per-label tenant_id indexes on writes, the plan check on reads.

Writes: the same work with the indexes schema 4 added for cypher() (a tenant_id index per label of
``neo4j.queries.TENANT_LABELS``, WorldNode (tenant_id, env_name, name)) present and dropped,
alternating (on, off, on, off, ...) so drift on a busy machine hits both alike:
``apply_plan`` of a fresh ~10k-element plan (bench_neo4j.make_plan) and ``add_episodes`` of
1,000-episode batches. Median per variant.

Reads: ``store.cypher()`` (EXPLAIN + plan check + run, one READ transaction) against the same
query run bare in a READ transaction, for the README's exploration queries on a replayed
examples/text_adventure.jsonl world; beside them the same queries through ``cypher()`` on the
embedded store (SQLite + its LadybugDB projection) holding the same replayed world, which must
return the same rows. p50 over ``--queries`` repetitions after 5 warm-up runs; the embedded
store's first query (which builds the tenant's projection) is shown apart.

    python bench/bench_cypher.py                       # starts a local Neo4j (tools/neo4j-local), stops it after
    python bench/bench_cypher.py --uri bolt://127.0.0.1:7797 --own-server
    python bench/bench_cypher.py --uri bolt://127.0.0.1:7687 --reads-only   # reads only: a shared server is fine

It drops and re-creates indexes, so ``--uri`` needs ``--own-server``: never point it at a shared one.

``--hostile`` measures something else: that cypher() ends on time whatever the query. It runs
hostile queries (deep nesting at several depths, a long reduce, a huge range, many rows, cartesian
products) with a short ``cypher_timeout`` (``--timeout``, 2 s), one at a time and then ``--together``
at once, while another tenant runs a normal query in a loop; it prints how far past the timeout
each call ended (target: at most 2 s) and the other tenant's latency. It drops nothing, so it may
use a shared server (``--uri`` alone), but it does load it (each long expression keeps a Neo4j core
busy until it finishes, after the call has ended):

    python bench/bench_cypher.py --hostile --uri bolt://127.0.0.1:7687

``--hostile --embedded`` does the same on the embedded store (its own hostile queries: long loops
in one expression, which LadybugDB runs to their end whatever its timeout, so the deadline abandons
them, ``embedded.cypher`` "Deadline"; strings and lists built whole by one expression, refused
before they run). Each abandoned query holds a core until the engine ends it, after the call has
returned:

    python bench/bench_cypher.py --hostile --embedded --timeout 2 --rounds 1 --together 4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_neo4j import _free_port, make_plan  # noqa: E402

from worldgraph import WorldModel  # noqa: E402
from worldgraph.cli.replay import replay_log  # noqa: E402
from worldgraph.errors import WorldGraphError  # noqa: E402
from worldgraph.kg.neo4j import queries as q  # noqa: E402
from worldgraph.kg.neo4j.store import Neo4jGraphStore  # noqa: E402
from worldgraph.kg.store import GraphStore  # noqa: E402
from worldgraph.memory.embeddings import HashingEmbedder  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ENV = "CottageEscape"
READS = {
    "rules by evidence": ("MATCH (r:Rule {tenant_id: $tenant_id, env_name: $env}) WHERE r.valid_to IS NULL "
                          "RETURN r.condition, r.outcome, r.evidence_count AS evidence, r.confidence AS confidence "
                          "ORDER BY evidence DESC, confidence DESC LIMIT 10", {}),
    "transitions of a state": ("MATCH (s:State {tenant_id: $tenant_id, env_name: $env, name: $state})"
                               "-[t:TRANSITION]->(n:State) RETURN s.name, t.action, n.name",
                               {"state": "front door locked"}),
    "episodes behind a node": ("MATCH (n:WorldNode {tenant_id: $tenant_id, env_name: $env, name: $name})"
                               "-[:EPISODIC]->(s:Scene)-[:FROM_EPISODE]->(e:Episode) "
                               "RETURN s.current_round AS round, e.task_description ORDER BY round",
                               {"name": "brass key"}),
    "containment history": ("MATCH (p:WorldNode)-[c:CONTAINS]->(x:WorldNode {tenant_id: $tenant_id, env_name: $env, "
                            "name: $name}) RETURN p.name, c.valid_from AS since ORDER BY since", {"name": "brass key"}),
    "rooms and contents": ("MATCH (room:Entity {tenant_id: $tenant_id, env_name: $env, type: 'room'})-[c:CONTAINS]->(x)"
                           " WHERE c.valid_to IS NULL RETURN room.name AS room, collect(x.name) ORDER BY room", {}),
    "episodes, paths 1..3": ("MATCH (e:Episode {tenant_id: $tenant_id})-[*1..3]-(x) RETURN count(DISTINCT x) AS n", {}),
}


def episodes(tenant: str, n: int) -> list[dict[str, Any]]:
    return [{"id": f"ep-{uuid.uuid4().hex}", "tenant_id": tenant, "agent_id": f"agent-{i % 8}", "agent_role": "bench",
             "ts": 1.7e9 + i, "timestamp": "2026-01-05T12:00:00+00:00", "task_type": "t",
             "task_description": f"task {i}", "outcome": "success", "canvas_id": None} for i in range(n)]


# The indexes schema 4 added for cypher(): one tenant_id index per label, WorldNode (tenant, env, name).
NEW_INDEXES = {f"wg_{label.lower()}_tenant" for label in q.TENANT_LABELS} | {"wg_node_name"}


def set_tenant_indexes(store: Neo4jGraphStore, on: bool) -> None:
    with store.db.driver.session(database=store.database) as session:
        for stmt in q.INDEXES:
            name = stmt.split()[2]  # CREATE INDEX <name> IF NOT EXISTS ...
            if name in NEW_INDEXES:
                session.run(stmt if on else f"DROP INDEX {name} IF EXISTS").consume()
        session.run(q.AWAIT_INDEXES, seconds=300).consume()


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def measure_writes(store: Neo4jGraphStore, runs: int, elements: int, batch: int) -> dict[str, dict[str, float]]:
    samples: dict[bool, dict[str, list[float]]] = {True: {"plan": [], "episodes": []},
                                                    False: {"plan": [], "episodes": []}}
    for run in range(runs * 2 + 2):  # the first on/off pair warms up
        on = run % 2 == 0
        set_tenant_indexes(store, on)
        settle = f"settle-{uuid.uuid4().hex[:10]}"  # untimed: lets index population and replanning pass
        store.apply_plan(make_plan(settle, 1000))
        store.add_episodes(settle, episodes(settle, 200), [], [])
        tenant = f"bench-{uuid.uuid4().hex[:10]}"
        plan = make_plan(tenant, elements)
        eps = episodes(tenant, batch)
        plan_s = timed(lambda: store.apply_plan(plan))
        eps_s = timed(lambda: store.add_episodes(tenant, eps, [], []))
        if run >= 2:
            samples[on]["plan"].append(plan.size() / plan_s)
            samples[on]["episodes"].append(batch / eps_s)
    set_tenant_indexes(store, True)
    return {("with tenant indexes" if on else "without"): {k: statistics.median(v) for k, v in s.items()}
            for on, s in samples.items()}


def measure_reads(store: Neo4jGraphStore, tenant: str, queries: int,
                  embedded: GraphStore) -> list[tuple[str, float, float, float]]:
    """Per query: Neo4j bare, Neo4j cypher(), embedded cypher() (p50 ms; the embedded store holds
    the same world under the same tenant)."""
    rows = []
    for name, (query, params) in READS.items():
        p = {"env": ENV, **params}

        def bare() -> Any:
            with store.db.driver.session(database=store.database) as session:
                return session.execute_read(lambda tx: tx.run(query, {**p, "tenant_id": tenant}).data())

        def guarded() -> Any:
            return store.cypher(tenant, query, p)

        def local() -> Any:
            return embedded.cypher(tenant, query, p)
        assert len(guarded()) == len(bare()) > 0, name
        mine, theirs = local(), guarded()
        if not same_rows(mine, theirs):  # e.g. timestamps: each store replayed the log at its own time
            print(f"note: {name}: the two stores' rows differ, e.g. embedded {mine[:2]} / neo4j {theirs[:2]}",
                  file=sys.stderr)
        for _ in range(5):
            bare(), guarded(), local()
        runs = [(timed(bare), timed(guarded), timed(local)) for _ in range(queries)]  # interleaved: drift hits all
        rows.append((name, *(statistics.median(r[k] for r in runs) * 1000 for k in range(3))))
    return rows


def same_rows(a: list[Any], b: list[Any]) -> bool:
    """Order-insensitive row equality (collect() lists compared as sets too)."""
    def norm(v: Any) -> Any:
        if isinstance(v, dict):
            return sorted((k, norm(x)) for k, x in v.items())
        if isinstance(v, list):
            return sorted((norm(x) for x in v), key=repr)
        return v
    return sorted(map(repr, map(norm, a))) == sorted(map(repr, map(norm, b)))


# ----------------------------------------------------------------------------- --hostile
def nested(depth: int) -> str:
    return "RETURN " + "[" * depth + "1" + "]" * depth + " AS x"


SCOPED = "(a:Episode {tenant_id: $tenant_id}), (b:Episode {tenant_id: $tenant_id}), (c:Episode {tenant_id: $tenant_id})"
# name -> (query, through): "store" calls Neo4jGraphStore.cypher, below the text limits (the
# deadline alone must end it); "wm" calls WorldModel.cypher, where the limits refuse it first
HOSTILE: dict[str, tuple[str, str]] = {
    **{f"nested {d}": (nested(d), "store") for d in (100, 300, 900, 3000)},
    "nested 900 via WorldModel": (nested(900), "wm"),
    "nested 3000 via WorldModel": (nested(3000), "wm"),
    "reduce over 300M": ("RETURN reduce(s = 0, i IN range(1, 300000000) | s + i) AS x", "store"),
    "range(1, 3M), one row": ("RETURN range(1, 3000000) AS x", "store"),
    "100M rows filtered": ("UNWIND range(1, 100000000) AS i WITH i WHERE i < 0 RETURN count(*) AS n", "store"),
    "cartesian product": (f"MATCH {SCOPED}, (d:Episode {{tenant_id: $tenant_id}}) RETURN count(*) AS n", "store"),
    "cartesian, all rows": (f"MATCH {SCOPED} RETURN a.id, b.id, c.id", "store"),
}
NORMAL = ("MATCH (e:Episode {tenant_id: $tenant_id}) WHERE e.outcome = 'success' "
          "RETURN e.task_description AS task ORDER BY e.ts DESC LIMIT 5")


# The embedded store (LadybugDB) has its own hostile queries: one expression runs to its end
# whatever its timeout (the deadline abandons it; those building a huge string or list are refused
# first, embedded.cypher.text MAX_BUILT), and its parser slows down steeply with nesting the first
# time it sees a depth (64 levels ~1 s, 300 levels ~56 s here).
HOSTILE_EMBEDDED: dict[str, tuple[str, str]] = {
    **{f"nested {d}": (nested(d), "store") for d in (100, 300)},
    "nested 3000 via WorldModel": (nested(3000), "wm"),
    "1M-step list_transform": ("RETURN size(list_transform(range(1, 1000000), x -> size(lpad(to_string(x), 200, 'b'))))"
                               " AS n", "wm"),
    # refused before the engine runs them (embedded.cypher.text MAX_BUILT): each ran on, holding GBs
    "lpad to 300M chars": ("RETURN size(lpad('a', 300000000, 'xy')) AS n", "wm"),
    "repeat to 300M chars": ("RETURN size(repeat('ab', 150000000)) AS n", "wm"),
    "list doubled to 16M": ("WITH range(1, 1000000) AS l WITH l + l AS l WITH l + l AS l WITH l + l AS l "
                            "WITH l + l AS l RETURN size(l) AS n", "wm"),
    "range(1, 300M)": ("RETURN size(range(1, 300000000)) AS n", "wm"),
    "100M rows filtered": ("UNWIND range(1, 1000000) AS a UNWIND range(1, 100) AS b WITH a + b AS s "
                           "WHERE s < 0 RETURN count(*) AS n", "wm"),
    # (a bare count(*) of a cartesian product is answered from the counts: the WHERE makes it enumerate)
    "cartesian product": (f"MATCH {SCOPED}, (d:Episode {{tenant_id: $tenant_id}}) "
                          "WHERE a.task_description <> d.task_description RETURN count(*) AS n", "wm"),
    "cartesian, all rows": (f"MATCH {SCOPED} RETURN a.id, b.id, c.id", "wm"),
}


def hostile_call(wm: WorldModel, store: Any, tenant: str, name: str,
                 hostile: dict[str, tuple[str, str]] = HOSTILE) -> tuple[str, float]:
    query, through = hostile[name]
    started = time.monotonic()
    try:
        (wm.cypher if through == "wm" else store.cypher)(tenant, query)
        outcome = "rows"
    except WorldGraphError as exc:
        text = str(exc)
        outcome = ("runaway cap" if "has not ended them yet" in text
                   else "timeout" if "cypher_timeout_seconds" in text else "byte cap" if "cypher_max_result_bytes" in text
                   else "row cap" if "cypher_max_rows" in text
                   else "refused (text limit)" if "cypher_max_nesting_depth" in text
                   else "refused (range)" if "range()" in text
                   else "refused (builder)" if "adding a value to itself" in text or "characters" in text
                   or "integer literal of at most" in text
                   else "result too deep" if "nested too deep" in text else type(exc).__name__)
    return outcome, time.monotonic() - started


class OtherTenant(threading.Thread):
    """Another tenant's normal query in a loop; latency of each call."""

    def __init__(self, wm: WorldModel, tenant: str) -> None:
        super().__init__(daemon=True)
        self.wm, self.tenant, self.stop = wm, tenant, threading.Event()
        self.samples: list[float] = []

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append(timed(lambda: self.wm.cypher(self.tenant, NORMAL)))
            time.sleep(0.05)


def wait_for_abandoned_runs(limit: float = 600.0) -> float:
    """Embedded store: until the engine has ended every run abandoned past its deadline; seconds waited."""
    from worldgraph.kg.embedded import cypher as embedded_cypher

    started = time.monotonic()
    while embedded_cypher.abandoned_runs() and time.monotonic() - started < limit:
        time.sleep(0.2)
    return time.monotonic() - started


def run_hostile(uri: str | None, user: str, password: str, timeout: float, rounds: int, together: int) -> int:
    """On Neo4j at ``uri``, or on the embedded store when ``uri`` is None."""
    hostile = HOSTILE if uri else HOSTILE_EMBEDDED
    with tempfile.TemporaryDirectory() as tmp:
        if uri:
            wm = WorldModel.open(Path(tmp) / "data", embedder=HashingEmbedder(64), graph="neo4j", neo4j_uri=uri,
                                 neo4j_user=user, neo4j_password=password, cypher_timeout_seconds=timeout)
        else:
            wm = WorldModel.open(Path(tmp) / "data", embedder=HashingEmbedder(64), cypher_timeout_seconds=timeout)
        store = wm.store
        attacker, other = f"hostile-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
        for tenant in (attacker, other):  # 300 episodes: 300^4 rows for the cartesian product
            wm.record_experiences(tenant, [{"agent_id": "a", "task_type": "t", "task_description": f"task {i}",
                                            "outcome": "success"} for i in range(300)])
        baseline = [timed(lambda: wm.cypher(other, NORMAL)) for _ in range(30)]
        neighbour = OtherTenant(wm, other)
        neighbour.start()
        results: dict[str, list[tuple[str, float]]] = {name: [] for name in hostile}
        for _ in range(rounds):  # one at a time
            for name in hostile:
                if not uri:  # each on its own: not refused because an earlier one still runs in the engine
                    wait_for_abandoned_runs()
                results[name].append(hostile_call(wm, store, attacker, name, hostile))
        names = [n for n in hostile if not n.endswith("via WorldModel")]
        batch = [names[i % len(names)] for i in range(together)]
        out: list[tuple[str, str, float]] = []
        threads = [threading.Thread(target=lambda n=n: out.append((n, *hostile_call(wm, store, attacker, n, hostile))))
                   for n in batch]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        neighbour.stop.set()
        neighbour.join()
        if uri:
            assert isinstance(store, Neo4jGraphStore)
            with store.db.driver.session(database=store.database) as session:  # leave a shared server as it was
                for label in q.TENANT_LABELS:
                    session.run(f"MATCH (n:{label}) WHERE n.tenant_id IN $ts DETACH DELETE n",
                                ts=[attacker, other]).consume()
        else:
            print(f"abandoned runs ended in the engine {wait_for_abandoned_runs():.1f} s after the last call")
        wm.close()

    def past(samples: list[float]) -> str:
        over = [s - timeout for s in samples]
        return f"{statistics.median(over):>+8.2f} {max(over):>+8.2f}"

    print(f"\n{'Neo4j' if uri else 'embedded store'}: cypher_timeout {timeout} s; seconds past it "
          "(negative: ended before it)")
    print(f"{'query':<28} {'calls':>5} {'outcome':<30} {'median':>8} {'max':>8}")
    for name, runs in results.items():
        outcomes = ", ".join(sorted({o for o, _ in runs}))
        print(f"{name:<28} {len(runs):>5} {outcomes:<30} {past([t for _, t in runs])}")
    print(f"{f'{together} at once':<28} {len(out):>5} {', '.join(sorted({o for _, o, _ in out})):<30} "
          f"{past([t for _, _, t in out])}")
    ended = [t for runs in results.values() for o, t in runs if o == "timeout"] + [t for _, o, t in out if o == "timeout"]
    print(f"{'all that hit the deadline':<28} {len(ended):>5} {'timeout':<30} {past(ended)}")
    everything = [t for runs in results.values() for _, t in runs] + [t for _, _, t in out]
    print(f"{'every call':<28} {len(everything):>5} {'':<30} {past(everything)}")
    q50 = statistics.median
    print(f"\nother tenant's query, ms: alone p50 {q50(baseline) * 1000:.1f} max {max(baseline) * 1000:.1f}; "
          f"meanwhile ({len(neighbour.samples)} calls) p50 {q50(neighbour.samples) * 1000:.1f} "
          f"p95 {statistics.quantiles(neighbour.samples, n=20)[-1] * 1000:.1f} max {max(neighbour.samples) * 1000:.1f}")
    return 0 if ended and max(everything) - timeout <= 2.0 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uri", help="a Neo4j you own (indexes are dropped and re-created); default: start a local one")
    ap.add_argument("--own-server", action="store_true", help="confirm --uri is not shared")
    ap.add_argument("--user", default="neo4j")
    ap.add_argument("--password", default="worldgraph-dev")
    ap.add_argument("--runs", type=int, default=5, help="runs per variant (writes)")
    ap.add_argument("--elements", type=int, default=10_000, help="graph elements per plan")
    ap.add_argument("--batch", type=int, default=1000, help="episodes per add_episodes call")
    ap.add_argument("--queries", type=int, default=200, help="repetitions per read query")
    ap.add_argument("--reads-only", action="store_true", help="skip the writes (which drop indexes): --uri may "
                    "then be a shared server")
    ap.add_argument("--hostile", action="store_true", help="measure how hostile queries end instead (see above)")
    ap.add_argument("--timeout", type=float, default=2.0, help="--hostile: cypher_timeout_seconds")
    ap.add_argument("--rounds", type=int, default=2, help="--hostile: calls of each hostile query, one at a time")
    ap.add_argument("--together", type=int, default=8, help="--hostile: hostile calls at once, last")
    ap.add_argument("--embedded", action="store_true", help="--hostile: on the embedded store (LadybugDB) instead")
    args = ap.parse_args()
    if args.hostile:
        if not args.uri and not args.embedded:
            ap.error("--hostile needs --uri (a running Neo4j; it drops nothing) or --embedded")
        return run_hostile(None if args.embedded else args.uri, args.user, args.password, args.timeout, args.rounds,
                           args.together)
    if args.uri and not args.own_server and not args.reads_only:
        ap.error("--uri drops and re-creates indexes on that server: add --own-server if nobody else uses it")

    with tempfile.TemporaryDirectory() as tmp:
        local_home, uri = None, args.uri
        if not uri:
            from worldgraph import neo4j_local

            local_home = Path(tmp) / "neo4j-local"
            print("starting a local Neo4j (tools/neo4j-local) ...", file=sys.stderr)
            uri = neo4j_local.start(port=_free_port(), data_dir=local_home / "data", timeout=300, home=local_home)
        try:
            wm = WorldModel.open(Path(tmp) / "data", embedder=HashingEmbedder(64), graph="neo4j", neo4j_uri=uri,
                                 neo4j_user=args.user, neo4j_password=args.password)
            store = wm.store
            assert isinstance(store, Neo4jGraphStore)
            tenant = f"reader-{uuid.uuid4().hex[:8]}"
            replay_log(wm, tenant, ENV, ROOT / "examples" / "text_adventure.jsonl", use_shipped_deltas=True)
            local = WorldModel.open(Path(tmp) / "embedded", embedder=HashingEmbedder(64))
            try:
                replay_log(local, tenant, ENV, ROOT / "examples" / "text_adventure.jsonl", use_shipped_deltas=True)
                first_ms = timed(lambda: local.store.cypher(tenant, READS["rules by evidence"][0], {"env": ENV})) * 1000
                reads = measure_reads(store, tenant, args.queries, local.store)
            finally:
                local.close()
            writes = {} if args.reads_only else measure_writes(store, args.runs, args.elements, args.batch)
            if args.reads_only:  # perhaps a shared server: leave it as it was
                with store._driver.session(database=store.database) as session:
                    for label in q.TENANT_LABELS:
                        session.run(f"MATCH (n:{label} {{tenant_id: $t}}) DETACH DELETE n", t=tenant).consume()
            wm.close()
        finally:
            if local_home is not None:
                from worldgraph import neo4j_local

                neo4j_local.stop(home=local_home)

    if writes:
        print(f"\nwrites, median of {args.runs} alternating runs   apply_plan el/s   add_episodes eps/s")
        for variant, r in writes.items():
            print(f"{variant:<42} {r['plan']:>15,.0f} {r['episodes']:>20,.0f}")
    print(f"\nreads, p50 of {args.queries}      neo4j bare ms   neo4j cypher() ms   overhead ms   embedded cypher() ms")
    for name, bare_ms, guarded_ms, local_ms in reads:
        print(f"{name:<26} {bare_ms:>15.2f} {guarded_ms:>19.2f} {guarded_ms - bare_ms:>13.2f} {local_ms:>22.2f}")
    print(f"embedded store's first query (builds the tenant's projection): {first_ms:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
