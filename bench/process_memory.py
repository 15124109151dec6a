"""Resident memory of a worldgraph process and its children over time, anonymous and file-backed.

    python bench/process_memory.py sample --out RUN.json -- CMD ARGS...
    python bench/process_memory.py mirror DATA          # a worker: open, build the mirror, close
    python bench/process_memory.py recall DATA [--queries 200]   # a worker: open, 200 recalls, close

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
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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
    args = ap.parse_args(argv)
    if args.what == "sample":
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        print(json.dumps(sample(cmd, args.out, args.every)))
    elif args.what == "mirror":
        print(json.dumps(mirror(args.data)))
    else:
        print(json.dumps(recall(args.data, args.queries)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
