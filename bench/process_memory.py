"""Resident memory of a worldgraph process and its children over time, anonymous and file-backed.

    python bench/process_memory.py sample --out RUN.json -- CMD ARGS...
    python bench/process_memory.py mirror DATA          # a worker: open, build the mirror, close
    python bench/process_memory.py recall DATA [--queries 200]   # a worker: open, 200 recalls, close
    python bench/process_memory.py parts DATA --out PARTS.json   # what a recalling process holds, by part

``sample`` runs CMD and, every ``--every`` seconds until it exits, reads ``/proc/PID/smaps_rollup``
of it and of every process under it (the index's maintenance child): ``Rss``, ``Anonymous`` (the
heap, malloc's arenas, numpy arrays, LanceDB's caches) and the rest (file-backed: memory-mapped
files such as the mirror's, and the libraries), plus each process's own peak (``VmHWM``, which
sees between samples). It writes every sample and a summary (peaks per role: the process, its
children, the sum at one moment; CMD's last stdout line if it is JSON) to ``--out`` and prints the
summary. Linux only.

The workers import ``worldgraph`` from ``PYTHONPATH`` (a checkout; before/after runs alternate
between two) and the bench corpus (corpus.py) from this folder:

- ``mirror DATA``: opens the store (tenant ``bench`` of bench_memory.py), builds its mirror and the
  mirror's lists (``warm_mirror`` then ``wait_for_maintenance``: from the table when the saved
  mirror files were deleted) and closes; prints the seconds.
- ``recall DATA``: opens the store, makes its mirror ready, then answers ``--queries`` plain hybrid
  recalls of bench_memory's queries (10 unmeasured first); prints p50 / p90 and the CPU p50 (ms).
- ``parts DATA``: what the recalling process itself holds, by part, after each stage: open,
  ``warm_mirror``, 200 plain and 200 filtered recalls (bench_memory.py's), 20 of each of
  filtered.py's filter kinds. Each stage reads ``/proc/self/smaps_rollup`` and ``/proc/self/smaps``
  summed by mapping (each mirror file, the libraries, the heap, other anonymous maps) and the
  sizes of the mirror's in-memory arrays, the lance sessions' caches and Arrow's pool; written
  to ``--out`` (bench/README.md, "What a recalling process holds").
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
TENANT = "bench"
SEED = 20260101  # bench_memory.py's default --seed


def rollup(pid: int) -> dict[str, int] | None:
    """kB of Rss, Anonymous and VmHWM of ``pid`` (None: gone)."""
    out = {"rss": 0, "anon": 0, "hwm": 0}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Rss:"):
                    out["rss"] = int(line.split()[1])
                elif line.startswith("Anonymous:"):
                    out["anon"] = int(line.split()[1])
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    out["hwm"] = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return out


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], list(children.get(root, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def sample(cmd: list[str], out: Path, every: float) -> dict[str, Any]:
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    samples: list[dict[str, Any]] = []
    peak: dict[str, dict[int, int]] = {"rss": {}, "anon": {}, "hwm": {}}
    while proc.poll() is None:
        row: dict[str, Any] = {"t": round(time.monotonic() - t0, 1), "procs": {}}
        for pid in [proc.pid, *descendants(proc.pid)]:
            r = rollup(pid)
            if r is not None:
                row["procs"][pid] = r
        samples.append(row)
        time.sleep(every)
    stdout = proc.stdout.read() if proc.stdout is not None else ""
    last = next((ln for ln in reversed(stdout.strip().splitlines()) if ln.startswith("{")), None)

    def mb(kb: float) -> float:
        return round(kb / 1024, 1)

    def peaks(pick: Any) -> dict[str, float]:
        rss = [sum(r["rss"] for p, r in s["procs"].items() if pick(p)) for s in samples]
        anon = [sum(r["anon"] for p, r in s["procs"].items() if pick(p)) for s in samples]
        hwm = [max((r["hwm"] for p, r in s["procs"].items() if pick(p)), default=0) for s in samples]
        at = max(range(len(rss)), key=rss.__getitem__) if rss else 0
        return {"rss_peak_mb": mb(max(rss, default=0)), "anon_peak_mb": mb(max(anon, default=0)),
                "file_at_rss_peak_mb": mb(rss[at] - anon[at]) if rss else 0.0,
                "hwm_max_mb": mb(max(hwm, default=0)), "rss_end_mb": mb(rss[-1]) if rss else 0.0}

    del peak
    summary = {"cmd": cmd, "seconds": round(time.monotonic() - t0, 1), "returncode": proc.returncode,
               "load_end": [round(x, 2) for x in os.getloadavg()],
               "process": peaks(lambda p: p == proc.pid),
               "children": peaks(lambda p: p != proc.pid),
               "together": peaks(lambda p: True),
               "result": json.loads(last) if last else None}
    out.write_text(json.dumps({"summary": summary, "samples": samples}))
    return summary


def open_store(data: Path) -> Any:
    sys.path.append(str(HERE))  # corpus.py; worldgraph from PYTHONPATH (before this folder)
    from corpus import PrecomputedEmbedder

    from worldgraph import WorldModel

    emb = PrecomputedEmbedder()
    return WorldModel.open(data, embedder=emb), emb


def mirror(data: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    wm, _ = open_store(data)
    opened = time.perf_counter() - t0
    wm.index.warm_mirror(TENANT)
    wm.index.wait_for_maintenance()
    built = time.perf_counter() - t0 - opened
    stats = wm.index.mirror_stats(TENANT)
    cache = lance_cache_mb(wm)
    wm.close()
    return {"open_s": round(opened, 2), "mirror_s": round(built, 2), "mirror": stats, "lance_cache_mb": cache}


def recall(data: Path, queries: int) -> dict[str, Any]:
    wm, emb = open_store(data)
    from corpus import Corpus

    stored = wm.store.stats(TENANT)["episodes"]
    corpus = Corpus(stored, seed=SEED)
    qs = corpus.queries(queries, seed=SEED + 2)  # bench_memory.py's queries
    for text, vec, _ in qs:
        emb.vectors[text] = vec
    wm.index.warm_mirror(TENANT)
    wm.index.wait_for_maintenance()
    for text, _, _ in qs[:10]:
        wm.recall_experiences(TENANT, None, text, 5, {"hybrid": True})
    walls, cpus = [], []
    for text, _, _ in qs:
        t0, c0 = time.perf_counter(), time.process_time()
        wm.recall_experiences(TENANT, None, text, 5, {"hybrid": True})
        walls.append((time.perf_counter() - t0) * 1000)
        cpus.append((time.process_time() - c0) * 1000)
    cache = lance_cache_mb(wm)
    wm.close()
    walls.sort()
    return {"queries": len(walls), "p50_ms": round(statistics.median(walls), 2),
            "p90_ms": round(walls[int(len(walls) * 0.9)], 2), "cpu_p50_ms": round(statistics.median(cpus), 2),
            "lance_cache_mb": cache}


def lance_cache_mb(wm: Any) -> float | None:
    """MB held by the process's LanceDB and pylance sessions (None: a checkout without them)."""
    try:
        from worldgraph.memory.index.lance_import import sessions
    except ImportError:
        return None
    connection, dataset = sessions(wm.config)
    return round((connection.size_bytes + dataset.size_bytes()) / 2**20, 1)


def smaps_parts() -> dict[str, float]:
    """MB resident in this process by mapping: each mirror file, libraries, heap, other anonymous."""
    def group(path: str) -> str:
        if not path:
            return "anonymous maps"
        if "/_mirror/" in path:
            return "mirror " + Path(path).name.split("-")[0]
        if ".so" in path or "/lib/" in path:
            return "libraries"
        if "worldgraph.db" in path:
            return "sqlite files"
        if ".lance" in path:
            return "lance files"
        return path if path.startswith("[") else "other files"

    out: dict[str, int] = {}
    current = ""
    with open("/proc/self/smaps") as fh:
        for line in fh:
            parts = line.split()
            if parts and "-" in parts[0] and not parts[0].endswith(":"):
                current = group(parts[5] if len(parts) > 5 else "")
            elif parts and parts[0] == "Rss:":
                out[current] = out.get(current, 0) + int(parts[1])
    return {k: round(v / 1024, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1]) if v >= 512}


def held_parts(wm: Any) -> dict[str, float]:
    """MB of the mirror's in-memory arrays, the lance sessions' caches and Arrow's pool."""
    import pyarrow as pa

    def mb(n: int) -> float:
        return round(n / 2**20, 2)

    out: dict[str, float] = {"arrow pool": mb(pa.total_allocated_bytes())}
    for m in wm.index._mirrors._mirrors.values():
        cols = m.cols
        out.update({"rows": cols.n, "row addresses": mb(cols.addr.nbytes), "live mask": mb(m.alive.nbytes),
                    "fragment maps": mb(sum(f.by_offset.nbytes for f in m.frags.values())),
                    "tail": mb(sum(v.nbytes for v in cols.tail.values())),
                    "id lookup": mb(sum(x.nbytes for x in cols.by_eid) if cols.by_eid else 0),
                    "codes' places": mb(getattr(cols, "slot", None).nbytes if getattr(cols, "slot", None) is not None
                                        else 0)})
        if m.lists is not None:
            out["lists"] = mb(m.lists.assign.nbytes + m.lists.rows_in(np.arange(m.lists.nlist)).nbytes
                              + m.lists.centroids.nbytes)
    cache = lance_cache_mb(wm)
    if cache is not None:
        out["lance sessions"] = cache
    return out


def parts(data: Path, out: Path, queries: int) -> dict[str, Any]:
    sys.path.append(str(HERE))  # corpus.py, filtered.py
    from corpus import DAY, ROLES, Corpus, _iso
    from filtered import KINDS, make_filter

    stages: dict[str, Any] = {}

    def stage(name: str, wm: Any = None, **extra: Any) -> None:
        gc.collect()
        stages[name] = {"rss": {k: round(v / 1024, 1) for k, v in (rollup(os.getpid()) or {}).items()},
                        "maps": smaps_parts(), **({"held": held_parts(wm)} if wm is not None else {}), **extra}

    def timed(wm: Any, calls: list[tuple[str, Any, dict[str, Any]]]) -> dict[str, float]:
        for text, role, opts in calls[:10]:
            wm.recall_experiences(TENANT, role, text, 5, opts)
        walls, cpus = [], []
        for text, role, opts in calls:
            t0, c0 = time.perf_counter(), time.process_time()
            wm.recall_experiences(TENANT, role, text, 5, opts)
            walls.append((time.perf_counter() - t0) * 1000)
            cpus.append((time.process_time() - c0) * 1000)
        return {"p50_ms": round(statistics.median(walls), 2), "cpu_p50_ms": round(statistics.median(cpus), 2)}

    stage("imported")
    t0 = time.perf_counter()
    wm, emb = open_store(data)
    stage("open", wm, s=round(time.perf_counter() - t0, 2))
    t0 = time.perf_counter()
    wm.index.warm_mirror(TENANT)
    wm.index.wait_for_maintenance()
    stage("warm", wm, s=round(time.perf_counter() - t0, 2))
    corpus = Corpus(wm.store.stats(TENANT)["episodes"], seed=SEED)
    qs = corpus.queries(queries, seed=SEED + 2)  # bench_memory.py's queries
    for text, vec, _ in qs:
        emb.vectors[text] = vec
    stage("counted", wm)  # (the episode count fills SQLite's page cache)
    stage("plain", wm, **timed(wm, [(t, None, {"hybrid": True}) for t, _, _ in qs]))
    rng = np.random.default_rng(7)  # bench_memory.py's filtered recalls: the topic's role, 30 days
    calls = []
    for text, _, t in qs:
        end = corpus.anchor - float(rng.uniform(0, 30)) * DAY
        calls.append((text, ROLES[int(corpus.topic_role[t])],
                      {"hybrid": True, "date_range": {"start": _iso(end - 30 * DAY), "end": _iso(end)}}))
    stage("filtered", wm, **timed(wm, calls))
    kinds, kinds_cpu = {}, {}
    for kind in KINDS:
        picked = [make_filter(kind, corpus, q, t) for q, (_, _, t) in enumerate(qs[:20])]
        got = timed(wm, [(text, f.role, {"hybrid": True, **f.options}) for (text, _, _), f in zip(qs[:20], picked)])
        kinds[kind], kinds_cpu[kind] = got["p50_ms"], got["cpu_p50_ms"]
    stage("kinds", wm, kinds_p50_ms=kinds, kinds_cpu_p50_ms=kinds_cpu)
    wm.close()
    stages["load"] = [round(x, 2) for x in os.getloadavg()]
    out.write_text(json.dumps(stages, indent=1))
    return {name: s["rss"] for name, s in stages.items() if isinstance(s, dict)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--every", type=float, default=1.0)
    s.add_argument("cmd", nargs=argparse.REMAINDER)
    m = sub.add_parser("mirror")
    m.add_argument("data", type=Path)
    r = sub.add_parser("recall")
    r.add_argument("data", type=Path)
    r.add_argument("--queries", type=int, default=200)
    pp = sub.add_parser("parts")
    pp.add_argument("data", type=Path)
    pp.add_argument("--out", type=Path, required=True)
    pp.add_argument("--queries", type=int, default=200)
    args = ap.parse_args(argv)
    if args.what == "sample":
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        print(json.dumps(sample(cmd, args.out, args.every)))
    elif args.what == "mirror":
        print(json.dumps(mirror(args.data)))
    elif args.what == "parts":
        print(json.dumps(parts(args.data, args.out, args.queries)))
    else:
        print(json.dumps(recall(args.data, args.queries)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
