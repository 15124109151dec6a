"""Service benchmark: N concurrent HTTP clients on loopback against ``worldgraph serve``.

    python bench/bench_serve.py --clients 16 --seconds 30 --episodes 2000 --out bench/results/serve.json

One run, in this order, on one data folder (embedded store unless ``--graph neo4j``):

1. seed ``--episodes`` experiences in-process and create an API key;
2. in-process recall: p50 of ``--queries`` sequential ``wm.recall_experiences`` calls, then
   ``--clients`` threads calling it for ``--seconds`` (throughput and p50 at that concurrency);
3. start ``worldgraph serve`` (a subprocess, loopback, a free port) on the same folder;
4. HTTP recall: p50 of the same sequential queries from one client (the layer's own cost);
5. load: ``--clients`` asyncio clients (httpx, keep-alive) for ``--seconds``, each request a
   record (``--record-share``) or a recall, reporting per kind: count, throughput, p50 / p99,
   errors (any non-200 or transport error);
6. SIGTERM the server (graceful), reopen the folder and check every acknowledged episode
   (a 200 with its id) is stored, and indexed for recall.
7. coalesced recording: record-only load (one experience a request) at ``--clients`` for
   ``--coalesce-seconds``, against a server with ``WORLDGRAPH_EMBEDDING_COALESCE=false`` and
   ``WORLDGRAPH_RECORD_GROUP_COMMIT=false`` (each record embeds and commits alone, as before) and
   one with both on (concurrent records share embedding batches and group commits), alternated
   ``--coalesce-rounds`` times on the same folder; reports both throughputs and their ratio.
   ``--coalesce-embed-only`` adds a third server between them with shared embedding batches but
   commits one at a time. ``--only-coalescing`` runs just this phase (after seeding).

The embedder is the deterministic hashing one (``--embedder hashing``, the default) so the
numbers measure the service and the recall pipeline, not a model; ``--embedder local`` uses the
offline all-MiniLM-L6-v2. Queries and experiences come from a fixed seed.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from worldgraph import WorldModel  # noqa: E402
from worldgraph.server.keys import ApiKeys  # noqa: E402

TENANT = "bench"
ROLES = ["Finance", "Developer", "Support", "Ops"]
VERBS = ["reconcile", "migrate", "debug", "summarise", "forecast", "audit", "deploy", "triage", "draft", "review"]
OBJECTS = ["inventory discrepancies", "quarterly revenue", "customer churn report", "payment gateway",
           "shipping delays", "database schema", "login failures", "marketing funnel", "vendor contracts",
           "support backlog", "pricing model", "cache invalidation", "tax filings", "refund requests"]
DETAILS = ["for the EMEA region", "after the weekend outage", "with partial data", "under a tight deadline",
           "for a key account", "across three systems", "before the board meeting", "in the staging env"]


def experience(rng: random.Random, n: int) -> dict[str, Any]:
    return {"agent_id": f"agent-{rng.randrange(32)}", "agent_role": rng.choice(ROLES), "task_type": rng.choice(VERBS),
            "task_description": f"{rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(DETAILS)} (#{n})",
            "input_summary": f"ticket {n}: {rng.choice(OBJECTS)}", "outcome": rng.choice(["success"] * 3 + ["failure"]),
            "confidence_score": round(rng.uniform(0.3, 1.0), 2), "learnings": [f"check the {rng.choice(OBJECTS)} first"]}


def query(rng: random.Random) -> str:
    return f"{rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(DETAILS)}"


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its live children (``serve --workers N``), from
    Linux /proc: what it cost, whatever the machine's load."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        if stat.parent.name == str(pid) or fields[1] == str(pid):  # fields[1]: the parent's pid
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def ms(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(pct(values, 50) * 1000, 2), "p99_ms": round(pct(values, 99) * 1000, 2)}


# ---------------------------------------------------------------------------- recall, both ways
def sequential_pair(wm: WorldModel, url: str, key: str, queries: list[str]) -> dict[str, Any]:
    """One recall at a time, in-process and over HTTP alternately (query by query), so both
    see the same machine: on a shared box, phases run one after the other do not."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
        def http(q: str) -> None:
            client.post("/v1/recall", json={"query": q, "limit": 5}).raise_for_status()

        def local(q: str) -> None:
            wm.recall_experiences(TENANT, None, q, 5)

        for q in queries[:10]:
            local(q), http(q)
        lat: dict[str, list[float]] = {"in_process": [], "http": []}
        for i, q in enumerate(queries):
            for name, fn in (("in_process", local), ("http", http)) if i % 2 else (("http", http),
                                                                                ("in_process", local)):
                t = time.perf_counter()
                fn(q)
                lat[name].append(time.perf_counter() - t)
    return {name: {"n": len(v), **ms(v)} for name, v in lat.items()}


def in_process_concurrent(wm: WorldModel, queries: list[str], clients: int, seconds: float) -> dict[str, Any]:
    """``clients`` threads calling ``wm.recall_experiences`` for ``seconds``."""
    def worker(k: int) -> list[float]:
        rng, out, end = random.Random(k), [], time.perf_counter() + seconds
        while time.perf_counter() < end:
            t = time.perf_counter()
            wm.recall_experiences(TENANT, None, rng.choice(queries), 5)
            out.append(time.perf_counter() - t)
        return out

    start, cpu = time.perf_counter(), time.process_time()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        lat = [x for part in pool.map(worker, range(clients)) for x in part]
    return {"latencies": {"recall": lat}, "errors": {"recall": []}, "acked": [],
            "elapsed": time.perf_counter() - start, "server_cpu": time.process_time() - cpu, "client_cpu": 0.0}


# ---------------------------------------------------------------------------- HTTP
Request = tuple[str, str, str, Any]  # kind, method, path, JSON body


async def http_phase(url: str, key: str, clients: int, seconds: float, pick: Any,
                     server_pid: int) -> dict[str, Any]:
    """``clients`` keep-alive clients sending ``pick(rng, client, n)`` requests for ``seconds``;
    raw latencies, errors, acknowledged episode ids, and the CPU time the server process and
    this (client) process spent."""
    lat: dict[str, list[float]] = {}
    errors: dict[str, list[str]] = {}
    acked: list[str] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120,
                                 limits=limits) as client:
        end = time.perf_counter() + seconds

        async def one(k: int) -> None:
            rng, n = random.Random(1000 + k + int(end)), 0
            while time.perf_counter() < end:
                kind, method, path, body = pick(rng, k, n)
                n += 1
                lat.setdefault(kind, [])
                errors.setdefault(kind, [])
                t = time.perf_counter()
                try:
                    r = await client.request(method, path, json=body)
                except httpx.HTTPError as exc:
                    errors[kind].append(f"{type(exc).__name__}: {exc}")
                    continue
                lat[kind].append(time.perf_counter() - t)
                if r.status_code != 200:
                    errors[kind].append(f"HTTP {r.status_code}: {r.text[:200]}")
                elif kind == "record":
                    acked.extend(r.json()["episode_ids"])

        start, server_cpu, client_cpu = time.perf_counter(), cpu_seconds(server_pid), time.process_time()
        await asyncio.gather(*(one(k) for k in range(clients)))
        return {"latencies": lat, "errors": errors, "acked": acked, "elapsed": time.perf_counter() - start,
                "server_cpu": cpu_seconds(server_pid) - server_cpu, "client_cpu": time.process_time() - client_cpu}


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"latencies": {}, "errors": {}, "acked": [], "elapsed": 0.0, "server_cpu": 0.0,
                           "client_cpu": 0.0}
    for run in runs:
        for part in ("latencies", "errors"):
            for kind, values in run[part].items():
                out[part].setdefault(kind, []).extend(values)
        out["acked"] += run["acked"]
        for k in ("elapsed", "server_cpu", "client_cpu"):
            out[k] += run[k]
    return out


def summary(run: dict[str, Any], clients: int) -> dict[str, Any]:
    total = max(1, sum(len(v) for v in run["latencies"].values()))
    out: dict[str, Any] = {"clients": clients, "seconds": round(run["elapsed"], 1),
                           "cpu_ms_per_request": round(run["server_cpu"] / total * 1000, 2),
                           "client_cpu_ms_per_request": round(run["client_cpu"] / total * 1000, 2)}
    for kind, values in run["latencies"].items():
        errs = run["errors"].get(kind, [])
        out[kind] = {"n": len(values), "per_s": round(len(values) / run["elapsed"], 1), "errors": len(errs),
                     "error_samples": errs[:5], **ms(values)}
    return out


def recalls(queries: list[str]) -> Any:
    return lambda rng, k, n: ("recall", "POST", "/v1/recall", {"query": rng.choice(queries), "limit": 5})


def mixed(queries: list[str], record_share: float) -> Any:
    def pick(rng: random.Random, k: int, n: int) -> Request:
        if rng.random() < record_share:
            return "record", "POST", "/v1/experiences", {"experiences": [experience(rng, 10_000_000 + k * 100_000 + n)]}
        return "recall", "POST", "/v1/recall", {"query": rng.choice(queries), "limit": 5}
    return pick


def records(rng: random.Random, k: int, n: int) -> Request:
    return "record", "POST", "/v1/experiences", {"experiences": [experience(rng, 50_000_000 + k * 1_000_000 + n)]}


COALESCE_MODES = {  # mode -> (WORLDGRAPH_EMBEDDING_COALESCE, WORLDGRAPH_RECORD_GROUP_COMMIT)
    "off": ("false", "false"), "embed": ("true", "false"), "on": ("true", "true")}


def coalescing_phase(data: Path, graph: str, env: dict[str, str], workers: int, key: str, clients: int,
                     seconds: float, rounds: int, embed_only: bool = False) -> dict[str, Any]:
    """Record throughput with coalescing and group commit off, then on (and, with ``embed_only``,
    coalesced embedding with commits one at a time in between), alternated ``rounds`` times."""
    modes = ("off", "embed", "on") if embed_only else ("off", "on")
    load_start = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for _ in range(rounds):
        for mode in modes:
            coalesce, group = COALESCE_MODES[mode]
            mode_env = {**env, "WORLDGRAPH_EMBEDDING_COALESCE": coalesce, "WORLDGRAPH_RECORD_GROUP_COMMIT": group}
            with Server(data, graph, mode_env, workers) as srv:
                pid = srv.proc.pid  # type: ignore[union-attr]
                runs[mode].append(asyncio.run(http_phase(srv.url, key, clients, seconds, records, pid)))
    out: dict[str, Any] = {mode: summary(merge(r), clients) for mode, r in runs.items()}
    off, on = out["off"]["record"]["per_s"], out["on"]["record"]["per_s"]
    out["ratio"] = round(on / off, 2) if off else None
    out["load_average"] = [load_start, os.getloadavg()]
    return out


def light(rng: random.Random, k: int, n: int) -> Request:
    """The layer alone: key check, routing, one small store read, JSON out."""
    return "episodes", "GET", f"/v1/agents/agent-{rng.randrange(32)}/episodes?limit=1", None


class Server:
    """``worldgraph serve`` in a subprocess on a free loopback port."""

    def __init__(self, data: Path, graph: str, env: dict[str, str], workers: int = 1) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "worldgraph.cli", "--data", str(data), "--graph", graph, "serve",
                    "--port", str(self.port), "--workers", str(workers)]
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read().decode() if self.proc.stderr else ''}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError("server did not start in 120 s")

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.code = self.proc.wait(timeout=300)


# ---------------------------------------------------------------------------- main
def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=float, default=30.0, help="length of each concurrent phase")
    p.add_argument("--rounds", type=int, default=3,
                   help="the in-process and HTTP recall phases alternate this many times (same machine load)")
    p.add_argument("--episodes", type=int, default=2000, help="episodes stored before the run")
    p.add_argument("--queries", type=int, default=200, help="sequential recalls timed (in-process and HTTP)")
    p.add_argument("--record-share", type=float, default=0.2, help="share of records in the HTTP load")
    p.add_argument("--graph", choices=["embedded", "neo4j"], default="embedded")
    p.add_argument("--embedder", choices=["hashing", "local"], default="hashing")
    p.add_argument("--workers", type=int, default=1, help="worldgraph serve --workers (server processes)")
    p.add_argument("--coalesce-seconds", type=float, default=20.0,
                   help="length of each record-only phase of the coalescing comparison")
    p.add_argument("--coalesce-rounds", type=int, default=2, help="off/on pairs of the coalescing comparison")
    p.add_argument("--only-coalescing", action="store_true", help="seed, then run only the coalescing comparison")
    p.add_argument("--coalesce-embed-only", action="store_true",
                   help="add a server with shared embedding batches but commits one at a time to the comparison")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--tmp", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args()

    env = {**os.environ, "WORLDGRAPH_EMBEDDING_PROVIDER": args.embedder}
    os.environ["WORLDGRAPH_EMBEDDING_PROVIDER"] = args.embedder
    tmp = Path(tempfile.mkdtemp(prefix="wg-bench-serve-", dir=args.tmp))
    data = tmp / "data"
    rng = random.Random(args.seed)
    queries = [query(rng) for _ in range(args.queries)]
    try:
        with WorldModel.open(data, graph=args.graph) as wm:
            global TENANT
            if args.graph == "neo4j":  # a shared server: a tenant of this run's own
                TENANT = f"bench-{os.getpid()}-{int(time.time())}"
            exps = [experience(rng, i) for i in range(args.episodes)]
            for i in range(0, len(exps), 500):
                wm.record_experiences(TENANT, exps[i:i + 500])
            key, _ = ApiKeys(wm.store).create(TENANT, "bench_serve")
            print(f"seeded {args.episodes} episodes; starting worldgraph serve ...", file=sys.stderr)
        if args.only_coalescing:
            print(f"record-only, {args.clients} clients: coalescing off / on ...", file=sys.stderr)
            co = coalescing_phase(data, args.graph, env, args.workers, key, args.clients, args.coalesce_seconds,
                                  args.coalesce_rounds, args.coalesce_embed_only)
            print(coalescing_report(co, args))
            if args.out:
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps({"coalescing": co, "embedder": args.embedder}, indent=2) + "\n")
            return 0
        with WorldModel.open(data, graph=args.graph) as wm:
            with Server(data, args.graph, env, args.workers) as srv:
                pid = srv.proc.pid  # type: ignore[union-attr]
                seq = sequential_pair(wm, srv.url, key, queries)
                print(f"{args.clients} concurrent: in-process and HTTP recall, {args.rounds} rounds each ...",
                      file=sys.stderr)
                part = args.seconds / args.rounds
                local_runs, http_runs = [], []
                for _ in range(args.rounds):
                    local_runs.append(in_process_concurrent(wm, queries, args.clients, part))
                    http_runs.append(asyncio.run(http_phase(srv.url, key, args.clients, part, recalls(queries), pid)))
                small = getattr(wm.index, "_small", None)  # copies of small tables (index_small.py)
                if small is not None:
                    print(f"in-process small-table copies: {small.counts}", file=sys.stderr)
                print("mixed record + recall, then the layer alone ...", file=sys.stderr)
                load = asyncio.run(http_phase(srv.url, key, args.clients, args.seconds,
                                              mixed(queries, args.record_share), pid))
                layer = asyncio.run(http_phase(srv.url, key, args.clients, args.seconds, light, pid))
        print(f"record-only, {args.clients} clients: coalescing off / on ...", file=sys.stderr)
        co = coalescing_phase(data, args.graph, env, args.workers, key, args.clients, args.coalesce_seconds,
                              args.coalesce_rounds, args.coalesce_embed_only)
        with WorldModel.open(data, graph=args.graph) as wm:
            acked = load["acked"]
            stored = wm.store.get_episodes(TENANT, acked)
            indexed = sum(1 for e in stored.values() if e.get("index_status") == "indexed")
        check = {"acknowledged": len(acked), "stored": len(stored), "lost": len(set(acked) - set(stored)),
                 "indexed": indexed, "server_exit_code": srv.code}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    result = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "graph": args.graph,
              "embedder": args.embedder, "episodes": args.episodes, "workers": args.workers,
              "load_average": os.getloadavg(),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "sequential": seq, "in_process_concurrent": summary(merge(local_runs), args.clients),
              "http_recall_only": summary(merge(http_runs), args.clients),
              "http_mixed": summary(load, args.clients), "http_layer": summary(layer, args.clients),
              "record_share": args.record_share, "check": check, "coalescing": co}
    print(report(result))
    print(coalescing_report(co, args))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def report(r: dict[str, Any]) -> str:
    seq, ipc, only, c = r["sequential"], r["in_process_concurrent"], r["http_recall_only"], r["check"]
    n = only["clients"]
    rows = [("recall in-process, 1 at a time", seq["in_process"], ""),
            ("recall HTTP, 1 client", seq["http"], ""),
            (f"recall in-process, {n} threads", ipc["recall"], ipc["cpu_ms_per_request"]),
            (f"recall HTTP, {n} clients", only["recall"], only["cpu_ms_per_request"]),
            (f"recall HTTP, {n} clients, mixed", r["http_mixed"]["recall"], r["http_mixed"]["cpu_ms_per_request"]),
            (f"record HTTP, {n} clients, mixed", r["http_mixed"].get("record", {}), ""),
            (f"GET episodes?limit=1, {n} clients", r["http_layer"]["episodes"], r["http_layer"]["cpu_ms_per_request"])]
    lines = [f"{r['graph']} store, {r['embedder']} embedder, {r['episodes']} episodes, "
             f"{r.get('workers', 1)} server process(es), {r['record_share']:.0%} records "
             f"in the mixed phase, load average {', '.join(f'{x:.1f}' for x in r['load_average'])}", "",
             f"{'phase':36}| {'n':>6} | {'per s':>6} | {'p50 ms':>7} | {'p99 ms':>7} | errors | server CPU ms/req",
             f"{'-' * 36}+{'-' * 8}+{'-' * 8}+{'-' * 9}+{'-' * 9}+--------+------------------"]
    for name, m, cpu in rows:
        lines.append(f"{name:36}| {m.get('n', 0):6} | {m.get('per_s', ''):>6} | {m.get('p50_ms', ''):>7} | "
                     f"{m.get('p99_ms', ''):>7} | {m.get('errors', ''):>6} | {cpu}")
    lines += ["", f"acknowledged {c['acknowledged']} records, stored {c['stored']}, lost {c['lost']}, "
                  f"indexed {c['indexed']}; server exit code {c['server_exit_code']}",
              f"HTTP - in-process recall p50: 1 at a time {seq['http']['p50_ms'] - seq['in_process']['p50_ms']:+.2f} ms, "
              f"{n} concurrent {only['recall']['p50_ms'] - ipc['recall']['p50_ms']:+.2f} ms; "
              f"client CPU ms/req (httpx): {only['client_cpu_ms_per_request']}"]
    return "\n".join(lines)


def coalescing_report(co: dict[str, Any], args: argparse.Namespace) -> str:
    lines = ["", f"record-only, {args.clients} clients, {args.embedder} embedder, "
                 f"{args.coalesce_rounds} x {args.coalesce_seconds:g} s each, alternated, load average (1/5/15 min) "
                 + " at the start, ".join(", ".join(f"{x:.1f}" for x in la) for la in co["load_average"]) + " at the end",
             f"{'embedding / commit':30}| {'records/s':>9} | {'p50 ms':>7} | {'p99 ms':>7} | errors | server CPU ms/req",
             f"{'-' * 30}+{'-' * 11}+{'-' * 9}+{'-' * 9}+--------+------------------"]
    names = {"off": "each call alone", "embed": "shared batches, commit alone", "on": "shared batches + group commit"}
    for mode, name in names.items():
        if mode not in co:
            continue
        m = co[mode]["record"]
        lines.append(f"{name:30}| {m['per_s']:>9} | {m['p50_ms']:>7} | {m['p99_ms']:>7} | {m['errors']:>6} | "
                     f"{co[mode]['cpu_ms_per_request']}")
    lines.append(f"(shared batches + group commit) / (each call alone): {co['ratio']}x")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
