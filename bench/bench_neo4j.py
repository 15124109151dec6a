"""Neo4j vs the embedded store, in the same run: apply_plan throughput and recall at 100k episodes.

Throughput: each run applies one MergePlan of ~10k graph elements (nodes + edges + rules) to a fresh tenant
("create"), then the same plan again with every record changed and every edge closed ("update",
the upsert path). Reports the median over ``--runs`` runs, in graph elements per second.
Two more rows frame the Neo4j number: "neo4j floor", the same nodes and edges written by plain
CREATE statements (nothing else apply_plan does), i.e. about the best this server and machine
do for these writes; and "x N" (``--writers``), N threads applying create + update plans to
their own tenants at once, total elements over wall time. Each Neo4j apply_plan run is followed by a floor
run and their ratio is printed per pair (both see the same load); ``--server-pid`` adds the ratio
in the Neo4j server's CPU seconds per element, which the machine's load moves less.

    python bench/bench_neo4j.py                      # starts a local Neo4j (tools/neo4j-local), stops it after
    python bench/bench_neo4j.py --uri bolt://127.0.0.1:7687 --elements 20000 --runs 5
    NEO4J_URI=bolt://... python bench/bench_neo4j.py

Recall (``--episodes``, default 100,000; 0 skips it): loads the synthetic episodes of
bench_memory.py (precomputed vectors, embedding excluded) with batched ``record_experiences``
into a WorldModel on each store (40 % on canvases with 1-3 actions each, 1 % rated), adds
``--scenes`` scenes (8 world nodes, 4 edges and 2 rules each, linked to an episode; half of them
to episodes the queries recall), then times ``recall_experiences`` with and without
``include_neighborhood`` over ``--queries`` queries. Both WorldModels share one LanceDB index,
so the difference between them is the store.

    python bench/bench_neo4j.py --episodes 0                  # throughput only
    python bench/bench_neo4j.py --elements 0 --episodes 100000 --queries 200   # recall only

Targets: >= 20,000 elements/s on Neo4j; recall with neighbourhood p50 <= 50 ms at 100k on Neo4j.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
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

from bench_memory import Corpus, PrecomputedEmbedder, pct  # noqa: E402

from worldgraph import WorldModel  # noqa: E402
from worldgraph.kg.embedded.store import EmbeddedGraphStore  # noqa: E402
from worldgraph.kg.records import MergePlan  # noqa: E402
from worldgraph.kg.store import GraphStore  # noqa: E402

ENV = "bench-env"
NOW = "2026-01-05T12:00:00.000000+00:00"
LATER = "2026-01-05T13:00:00.000000+00:00"


def make_plan(tenant: str, elements: int, update: bool = False) -> MergePlan:
    """Half nodes (4 entities : 1 state), half edges (containment tree, transition chains), 1% rules."""
    n_rules = max(1, elements // 100)
    n_nodes = (elements - n_rules) // 2
    n_edges = elements - n_rules - n_nodes
    n_states = n_nodes // 5
    stamp = LATER if update else NOW
    scene_id = f"scene-{'b' if update else 'a'}"
    nodes, edges, rules = [], [], []
    for i in range(n_nodes):
        state = i >= n_nodes - n_states
        nodes.append({
            "id": f"n{i:07d}", "tenant_id": tenant, "env_name": ENV, "kind": "state" if state else "entity",
            "type": "door_state" if state else "item", "name": f"thing {i}", "norm_name": f"thing {i}",
            "attributes": {"color": "brass", "size": i % 7}, "confidence": 0.9 if update else 0.7,
            "evidence": [f"seen {i}"] * (2 if update else 1), "evidence_count": 2 if update else 1,
            "source_scenes": ["scene-a", "scene-b"] if update else ["scene-a"],
            "entity_id": "n0000000" if state else None, "valid_from": NOW, "valid_to": None,
            "created_at": NOW, "updated_at": stamp})
    entities = n_nodes - n_states
    for j in range(n_edges):
        if j < entities - 1:  # containment tree over the entities
            rel, src, dst = "containment", f"n{j // 8:07d}", f"n{j + 1:07d}"
        else:  # transition chain over the states
            k = j % max(1, n_states - 1)
            rel, src, dst = "transition", f"n{entities + k:07d}", f"n{entities + k + 1:07d}"
        edges.append({
            "id": f"e{j:07d}", "tenant_id": tenant, "env_name": ENV, "relation": rel, "src_id": src, "dst_id": dst,
            "action": "open" if rel == "transition" else None, "confidence": 0.8, "evidence": ["seen"],
            "evidence_count": 1, "source_scenes": ["scene-a"], "valid_from": NOW,
            "valid_to": LATER if update else None, "created_at": NOW, "updated_at": stamp})
    for r in range(n_rules):
        rules.append({
            "id": f"r{r:07d}", "tenant_id": tenant, "env_name": ENV, "condition": f"condition {r}",
            "outcome": "outcome", "linked_node_ids": [f"n{r:07d}", f"n{r + 1:07d}"], "confidence": 0.6,
            "evidence": ["tried"], "evidence_count": 1, "source_scenes": ["scene-a"], "valid_from": NOW,
            "valid_to": None, "created_at": NOW, "updated_at": stamp})
    scene = {"id": scene_id, "tenant_id": tenant, "env_name": ENV, "status": "merged", "error": None,
             "episode_id": None, "created_at": stamp, "updated_at": stamp, "current_round": 1,
             "trigger_reason": "bench", "action": "look", "before_observation": "", "after_observation": "",
             "feedback": "", "admissible_commands": [], "latest_response": "", "recent_history_excerpt": ""}
    meta = {"env_name": ENV, "app_name": "bench", "graph_version": 2 if update else 1, "updated_at": stamp,
            "last_trigger_reason": "bench"}
    return MergePlan(tenant_id=tenant, env_name=ENV, nodes=nodes, edges=edges, rules=rules, scene=scene, meta=meta)


def measure(store: GraphStore, elements: int, runs: int) -> dict[str, Any]:
    create, update, read, cpu = [], [], [], []
    for _ in range(runs):
        tenant = f"bench-{uuid.uuid4().hex[:10]}"
        plan, again = make_plan(tenant, elements), make_plan(tenant, elements, update=True)
        cpu0 = server_cpu_s()
        create.append(_timed(lambda: store.apply_plan(plan)))
        cpu1 = server_cpu_s()
        update.append(_timed(lambda: store.apply_plan(again)))
        cpu.append((cpu1 - cpu0, server_cpu_s() - cpu1))
        read.append(_timed(lambda: store.world_graph(tenant, ENV)))
        meta = store.world_graph(tenant, ENV)["meta"]
        assert meta["counts"]["nodes"] == len(plan.nodes) and meta["counts"]["edges"] == len(plan.edges), meta
    size = make_plan("x", elements).size()
    return {"store": store.name, "elements": size, "runs": runs,
            "create_s": statistics.median(create), "update_s": statistics.median(update),
            "world_graph_s": statistics.median(read),
            "create_eps": size / statistics.median(create), "update_eps": size / statistics.median(update),
            "server_cpu_s": (statistics.median(c for c, _ in cpu), statistics.median(u for _, u in cpu))}


def measure_floor(store: Any, elements: int, runs: int) -> dict[str, Any]:
    """The same plan's nodes and edges, with the properties apply_plan writes, written by plain
    CREATE statements in one transaction: no MERGE, rules, scene links, meta or counts. About
    what this server and machine do for these writes at best; apply_plan cannot beat it."""
    from worldgraph.kg.neo4j import queries as q
    from worldgraph.kg.neo4j.rows import unwind_row

    nodes_q = {kind: f"UNWIND $rows AS row CREATE (n:WorldNode:{label} {{key: row.key}}) "
                     f"SET n.tenant_id = $tenant_id, n.env_name = $env_name, n.id = row.id, "
                     f"{q._set('n', q.NODE_PROPS)}, n.record = row.record"
               for kind, label in q.NODE_LABELS.items()}
    edges_q = {rel: f"UNWIND $rows AS row MATCH (src:WorldNode {{key: row.src}}) MATCH (dst:WorldNode {{key: row.dst}}) "
                    f"CREATE (src)-[r:{rtype} {{key: row.key}}]->(dst) "
                    f"SET r.tenant_id = $tenant_id, r.env_name = $env_name, r.id = row.id, "
                    f"{q._set('r', q.EDGE_PROPS)}, r.record = row.record"
               for rel, rtype in q.EDGE_TYPES.items() if rel != "episodic"}
    times, cpus = [], []
    for _ in range(runs):
        tenant = f"floor-{uuid.uuid4().hex[:10]}"
        plan = make_plan(tenant, elements)
        prefix = q.env_prefix(tenant, ENV)
        params = {"tenant_id": tenant, "env_name": ENV}

        def work(tx: Any) -> None:
            results = []
            for kind, query in nodes_q.items():
                rows = [{**unwind_row(n, q.NODE_PROPS), "key": prefix + n["id"]} for n in plan.nodes if n["kind"] == kind]
                results.append(tx.run(query, params, rows=rows))
            for rel, query in edges_q.items():
                rows = [{**unwind_row(e, q.EDGE_PROPS), "key": prefix + e["id"], "src": prefix + e["src_id"],
                         "dst": prefix + e["dst_id"]} for e in plan.edges if e["relation"] == rel]
                results.append(tx.run(query, params, rows=rows))
            for result in results:
                result.consume()
        cpu0 = server_cpu_s()
        times.append(_timed(lambda: store.db.write(work)))
        cpus.append(server_cpu_s() - cpu0)
    size = len(plan.nodes) + len(plan.edges)
    return {"store": "neo4j floor", "elements": size, "runs": runs, "create_s": statistics.median(times),
            "create_eps": size / statistics.median(times), "server_cpu_s": statistics.median(cpus)}


def measure_paired(store: Any, elements: int, runs: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """``measure`` and ``measure_floor`` one run each, alternated ``runs`` times, so both see the
    same load; also the ratio of apply_plan to the floor (elements/s over elements/s) per pair."""
    pairs = [(measure(store, elements, 1), measure_floor(store, elements, 1)) for _ in range(runs)]
    row: dict[str, Any] = {"store": store.name, "elements": pairs[0][0]["elements"], "runs": runs}
    for key in ("create_s", "update_s", "world_graph_s"):
        row[key] = statistics.median(p[0][key] for p in pairs)
    row["create_eps"], row["update_eps"] = row["elements"] / row["create_s"], row["elements"] / row["update_s"]
    row["create_ratios"] = [p[0]["create_eps"] / p[1]["create_eps"] for p in pairs]
    row["update_ratios"] = [p[0]["update_eps"] / p[1]["create_eps"] for p in pairs]
    if SERVER_PID is not None:  # the same ratios in the server's CPU seconds per element (load-proof)
        row["create_cpu_ratios"] = [p[1]["server_cpu_s"] / p[1]["elements"] / (p[0]["server_cpu_s"][0] / p[0]["elements"])
                                    for p in pairs]
        row["update_cpu_ratios"] = [p[1]["server_cpu_s"] / p[1]["elements"] / (p[0]["server_cpu_s"][1] / p[0]["elements"])
                                    for p in pairs]
    floor = dict(pairs[0][1], runs=runs, create_s=statistics.median(p[1]["create_s"] for p in pairs))
    floor["create_eps"] = floor["elements"] / floor["create_s"]
    return row, floor


def measure_writers(make_store: Callable[[], GraphStore], elements: int, runs: int, writers: int) -> dict[str, Any]:
    """``writers`` threads, each with its own store, applying create + update plans to their own
    tenants at the same time (as merges of different environments do): total elements / wall time."""
    stores = [make_store() for _ in range(writers)]
    plans = []
    for _ in range(writers):
        tenant = f"bench-{uuid.uuid4().hex[:10]}"
        plans.append([p for _ in range(runs) for p in (make_plan(tenant, elements), make_plan(tenant, elements, True))])
    errors: list[BaseException] = []

    def write(store: GraphStore, mine: list[MergePlan]) -> None:
        try:
            for plan in mine:
                store.apply_plan(plan)
        except BaseException as exc:  # reported below
            errors.append(exc)
    threads = [threading.Thread(target=write, args=(st, mine)) for st, mine in zip(stores, plans)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    for st in stores:
        st.close()
    if errors:
        raise errors[0]
    total = sum(p.size() for mine in plans for p in mine)
    return {"store": f"{stores[0].name} x{writers}", "writers": writers, "elements": total, "wall_s": wall,
            "eps": total / wall}


# ------------------------------------------------------------------------------------ recall at scale
RECALL_ENV = "bench-world"
RECALL_OPTS: dict[str, Any] = {"min_similarity": 0.0}
NEIGHBOURHOOD_OPTS: dict[str, Any] = {"include_neighborhood": True, "min_similarity": 0.0}


def load_memory(wm: WorldModel, tenant: str, corpus: Corpus, batch: int) -> dict[str, Any]:
    """record_experiences in batches (canvases with actions for the episodes on a canvas), then feedback."""
    rates, started = [], time.perf_counter()
    exps = corpus.experiences
    for start in range(0, len(exps), batch):
        chunk = exps[start:start + batch]
        t0 = time.perf_counter()
        wm.record_experiences(tenant, chunk, canvases=[_canvas(e) for e in chunk])
        rates.append(len(chunk) / (time.perf_counter() - t0))
    total = time.perf_counter() - started
    rng = random.Random(11)
    rated = rng.sample(range(len(exps)), max(1, len(exps) // 100))
    for i in rated:
        wm.submit_feedback(tenant, exps[i]["episode_id"], rng.uniform(-1, 1), category=rng.choice(["quality", None]))
    return {"record_eps_median": statistics.median(rates), "record_s": total, "feedback": len(rated)}


def _canvas(exp: dict[str, Any]) -> dict[str, Any] | None:
    if "canvas_id" not in exp:
        return None
    actions = exp.get("canvas_action_ids") or [f"{exp['episode_id']}-a0"]
    return {"id": exp["canvas_id"], "name": f"board {exp['canvas_id']}",
            "actions": [{"id": a, "type": "edit", "component_id": f"widget-{k}", "timestamp": exp["timestamp"]}
                        for k, a in enumerate(actions)]}


def scene_plans(tenant: str, episode_ids: list[str]) -> list[MergePlan]:
    """One plan per scene: the scene (from an episode), 8 nodes, 4 edges, 2 rules learned from it."""
    plans = []
    for s, eid in enumerate(episode_ids):
        sid = f"scene-{s:04d}"
        stamp = NOW
        nodes = [{"id": f"s{s:04d}-n{k}", "tenant_id": tenant, "env_name": RECALL_ENV,
                  "kind": "state" if k == 7 else "entity", "type": "door_state" if k == 7 else "item",
                  "name": f"thing {s}.{k}", "norm_name": f"thing {s}.{k}", "attributes": {"size": k},
                  "confidence": 0.7, "evidence": [f"seen in {sid}"], "evidence_count": 1, "source_scenes": [sid],
                  "entity_id": f"s{s:04d}-n0" if k == 7 else None, "valid_from": NOW, "valid_to": None,
                  "created_at": NOW, "updated_at": stamp} for k in range(8)]
        edges = [{"id": f"s{s:04d}-e{k}", "tenant_id": tenant, "env_name": RECALL_ENV, "relation": "containment",
                  "src_id": f"s{s:04d}-n0", "dst_id": f"s{s:04d}-n{k + 1}", "action": None, "confidence": 0.8,
                  "evidence": ["seen"], "evidence_count": 1, "source_scenes": [sid], "valid_from": NOW,
                  "valid_to": None, "created_at": NOW, "updated_at": stamp} for k in range(4)]
        rules = [{"id": f"s{s:04d}-r{k}", "tenant_id": tenant, "env_name": RECALL_ENV,
                  "condition": f"condition {s}.{k}", "outcome": "outcome", "linked_node_ids": [f"s{s:04d}-n{k}"],
                  "confidence": 0.6, "evidence": ["tried"], "evidence_count": 1, "source_scenes": [sid],
                  "valid_from": NOW, "valid_to": None, "created_at": NOW, "updated_at": stamp} for k in range(2)]
        scene = {"id": sid, "tenant_id": tenant, "env_name": RECALL_ENV, "status": "merged", "error": None,
                 "episode_id": eid, "created_at": stamp, "updated_at": stamp, "current_round": s,
                 "trigger_reason": "bench", "action": "look", "before_observation": "", "after_observation": "",
                 "feedback": "", "admissible_commands": [], "latest_response": "", "recent_history_excerpt": ""}
        meta = {"env_name": RECALL_ENV, "app_name": "bench", "graph_version": s + 1, "updated_at": stamp,
                "last_trigger_reason": "bench"}
        plans.append(MergePlan(tenant_id=tenant, env_name=RECALL_ENV, nodes=nodes, edges=edges, rules=rules,
                               scene=scene, meta=meta))
    return plans


def time_recall(wm: WorldModel, tenant: str, queries: list[str], opts: dict[str, Any],
                warmup: int = 10) -> dict[str, Any]:
    for text in queries[:warmup]:
        wm.recall_experiences(tenant, None, text, 5, opts)
    samples, found = [], []
    for text in queries:
        t0 = time.perf_counter()
        res = wm.recall_experiences(tenant, None, text, 5, opts)
        samples.append((time.perf_counter() - t0) * 1000)
        found.append(sum(len((r.get("neighborhood") or {}).get("nodes") or []) for r in res))
    return {"p50_ms": pct(samples, 50), "p99_ms": pct(samples, 99), "neighbourhood_nodes": sum(found)}


def time_parts(wm: WorldModel, tenant: str, qvecs: list[Any]) -> dict[str, float]:
    """p50 of the store calls of one recall: get_episodes (candidate pool), feedback_stats, neighborhood (top 5)."""
    ge, fs, nb = [], [], []
    for vec in qvecs:
        ids = [h["episode_id"] for h in wm.index.vector_search(tenant, vec, k=wm.config.candidate_pool)]
        ge.append(_timed(lambda: wm.store.get_episodes(tenant, ids)) * 1000)
        fs.append(_timed(lambda: wm.store.feedback_stats(tenant, ids)) * 1000)
        nb.append(_timed(lambda: wm.store.neighborhood(tenant, ids[:5])) * 1000)
    return {"get_episodes_ms": pct(ge, 50), "feedback_stats_ms": pct(fs, 50), "neighborhood_ms": pct(nb, 50)}


def measure_recall(neo_uri: str, user: str, password: str, tmp: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    from worldgraph.kg.neo4j.store import Neo4jGraphStore

    print(f"generating {args.episodes:,} episodes ...", file=sys.stderr)
    corpus = Corpus(args.episodes, seed=20260101)
    emb: PrecomputedEmbedder = corpus.embedder()
    queries = corpus.queries(args.queries, seed=20260103)
    for text, vec, _ in queries:
        emb.vectors[text] = vec
    texts = [t for t, _, _ in queries]
    tenant = f"recall-{uuid.uuid4().hex[:8]}"  # a fresh tenant, also on a long-lived server
    embedded = WorldModel.open(tmp / "recall", embedder=emb)
    neo = WorldModel(embedded.path, Neo4jGraphStore(neo_uri, user, password), embedded.index, emb, embedded.config)
    out = []
    try:
        loads = {}
        for wm in (embedded, neo):
            print(f"recording into {wm.store.name} ...", file=sys.stderr)
            loads[wm.store.name] = load_memory(wm, tenant, corpus, args.batch)
        embedded.index.ensure_indexes()
        embedded.index.optimize()
        # half the scenes on episodes the queries recall (so neighbourhoods are not all empty), half random
        top = [r[0]["episode_id"] for r in (embedded.recall_experiences(tenant, None, t, 1, RECALL_OPTS)
                                            for t in texts[::2]) if r]
        rng = random.Random(5)
        others = [e["episode_id"] for e in rng.sample(corpus.experiences, max(0, args.scenes - len(top)))]
        chosen = list(dict.fromkeys(top + others))[: args.scenes]
        for wm in (embedded, neo):
            for plan in scene_plans(tenant, chosen):
                wm.store.apply_plan(plan)
        for wm in (embedded, neo):
            print(f"recall on {wm.store.name} ...", file=sys.stderr)
            row: dict[str, Any] = {"store": wm.store.name, **loads[wm.store.name],
                                   "stats": wm.store.stats(tenant)}
            row["plain"] = time_recall(wm, tenant, texts, RECALL_OPTS)
            row["neighbourhood"] = time_recall(wm, tenant, texts, NEIGHBOURHOOD_OPTS)
            row.update(time_parts(wm, tenant, [v for _, v, _ in queries[:50]]))
            out.append(row)
    finally:
        neo.store.close()
        embedded.close()
    return out


def print_recall(rows: list[dict[str, Any]], episodes: int) -> None:
    print(f"\nrecall at {episodes:,} episodes, {rows[0]['stats']['scenes']} scenes, "
          f"{rows[0]['stats']['feedback']} feedback, {rows[0]['stats']['canvas_audits']:,} canvas actions")
    print(f"{'store':<10} {'record eps/s':>12} {'recall p50/p99 ms':>18} {'+neighbourhood p50/p99':>23} "
          f"{'get_episodes':>12} {'feedback_stats':>14} {'neighborhood()':>14}  (parts: p50 ms)")
    for r in rows:
        print(f"{r['store']:<10} {r['record_eps_median']:>12,.0f} "
              f"{r['plain']['p50_ms']:>8.1f} / {r['plain']['p99_ms']:>7.1f} "
              f"{r['neighbourhood']['p50_ms']:>11.1f} / {r['neighbourhood']['p99_ms']:>9.1f} "
              f"{r['get_episodes_ms']:>12.2f} {r['feedback_stats_ms']:>14.2f} {r['neighborhood_ms']:>14.2f}")
    neo = rows[-1]["neighbourhood"]["p50_ms"]
    print(f"Neo4j target recall with neighbourhood p50 <= 50 ms: {'met' if neo <= 50 else 'NOT met'} ({neo:.1f} ms)")



SERVER_PID: int | None = None  # --server-pid: the Neo4j JVM whose CPU time is sampled


def server_cpu_s() -> float:
    """User + system CPU seconds the Neo4j server process has used so far (0 without --server-pid)."""
    if SERVER_PID is None:
        return 0.0
    fields = Path(f"/proc/{SERVER_PID}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uri", default=os.environ.get("NEO4J_URI"), help="a running Neo4j (default: start a local one)")
    ap.add_argument("--user", default=os.environ.get("NEO4J_USER", "neo4j"))
    ap.add_argument("--password", default=os.environ.get("NEO4J_PASSWORD", "worldgraph-dev"))
    ap.add_argument("--elements", type=int, default=10_000, help="graph elements per plan (default 10000; 0 skips)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured runs first (query plans, JIT)")
    ap.add_argument("--writers", type=int, default=2,
                    help="also time this many concurrent writers, each on its own tenant (default 2; 0 or 1 skips)")
    ap.add_argument("--episodes", type=int, default=100_000, help="episodes for the recall section (0 skips it)")
    ap.add_argument("--queries", type=int, default=200, help="recalls timed per variant")
    ap.add_argument("--batch", type=int, default=1000, help="episodes per record_experiences call")
    ap.add_argument("--scenes", type=int, default=300, help="scenes linked to episodes")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--server-pid", type=int, help="also compare the Neo4j server's CPU seconds (its JVM's pid)")
    args = ap.parse_args()
    global SERVER_PID
    SERVER_PID = args.server_pid

    from worldgraph.kg.neo4j.store import Neo4jGraphStore

    results: list[dict[str, Any]] = []
    floor: dict[str, Any] | None = None
    concurrent: list[dict[str, Any]] = []
    recall_rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.elements:
            embedded = EmbeddedGraphStore(Path(tmp) / "bench.db")
            measure(embedded, args.elements, args.warmup) if args.warmup else None
            results.append(measure(embedded, args.elements, args.runs))
            embedded.close()

        local_home = None
        uri = args.uri
        if not uri:
            from worldgraph import neo4j_local

            local_home = Path(tmp) / "neo4j-local"
            print("starting a local Neo4j (tools/neo4j-local) ...", file=sys.stderr)
            uri = neo4j_local.start(port=_free_port(), data_dir=local_home / "data", timeout=300, home=local_home)
        try:
            if args.elements:
                neo = Neo4jGraphStore(uri, args.user, args.password)
                try:
                    if args.warmup:
                        measure(neo, args.elements, args.warmup)
                        measure_floor(neo, args.elements, args.warmup)
                    neo_row, floor = measure_paired(neo, args.elements, args.runs)
                    results.append(neo_row)
                finally:
                    neo.close()
                if args.writers > 1:
                    for make_store in (lambda: EmbeddedGraphStore(Path(tmp) / "bench.db"),
                                       lambda: Neo4jGraphStore(uri, args.user, args.password)):
                        concurrent.append(measure_writers(make_store, args.elements, args.runs, args.writers))
            if args.episodes:
                recall_rows = measure_recall(uri, args.user, args.password, Path(tmp), args)
        finally:
            if local_home is not None:
                from worldgraph import neo4j_local

                neo4j_local.stop(home=local_home)

    if results:
        print(f"\napply_plan throughput, plans of {results[0]['elements']:,} elements, median of {args.runs} runs")
        print(f"{'store':<10} {'create s':>9} {'create el/s':>12} {'update s':>9} {'update el/s':>12} "
              f"{'world_graph s':>14}")
        for r in results:
            print(f"{r['store']:<10} {r['create_s']:>9.3f} {r['create_eps']:>12,.0f} {r['update_s']:>9.3f} "
                  f"{r['update_eps']:>12,.0f} {r['world_graph_s']:>14.3f}")
        if floor is not None:
            print(f"{floor['store']:<10} {floor['create_s']:>9.3f} {floor['create_eps']:>12,.0f}"
                  f"   (CREATE statements only: the {floor['elements']:,} nodes + edges, nothing else)")
        for c in concurrent:
            print(f"{c['store']:<10} {c['wall_s']:>9.3f} {c['eps']:>12,.0f}"
                  f"   ({c['writers']} concurrent writers, create + update, total elements / wall time)")
        if "create_ratios" in results[-1]:
            r = results[-1]
            print(f"apply_plan / floor, per alternated pair: create {' '.join(f'{x:.2f}' for x in r['create_ratios'])}"
                  f" (median {statistics.median(r['create_ratios']):.2f}); update "
                  f"{' '.join(f'{x:.2f}' for x in r['update_ratios'])} (median {statistics.median(r['update_ratios']):.2f})")
            if "create_cpu_ratios" in r:
                print(f"apply_plan / floor in server CPU per element: create "
                      f"{' '.join(f'{x:.2f}' for x in r['create_cpu_ratios'])} "
                      f"(median {statistics.median(r['create_cpu_ratios']):.2f}); update "
                      f"{' '.join(f'{x:.2f}' for x in r['update_cpu_ratios'])} "
                      f"(median {statistics.median(r['update_cpu_ratios']):.2f})")
        neo_eps = min(results[-1]["create_eps"], results[-1]["update_eps"])
        print(f"Neo4j target >= 20,000 elements/s: {'met' if neo_eps >= 20_000 else 'NOT met'}")
    if recall_rows:
        print_recall(recall_rows, args.episodes)
    if args.json:
        args.json.write_text(json.dumps({"apply_plan": results, "floor": floor, "concurrent": concurrent,
                                              "recall": recall_rows}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
