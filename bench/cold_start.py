"""Cold start: how long a new process takes to open a big data folder and answer its first recall,
cleanly and after a kill -9 mid-ingest, and whether anything acknowledged was lost.

For each trial the kept store (``--store``, never modified) is copied to ``--work``. A kill
trial starts a recorder process (its own session: the kill takes its maintenance child too, as
a container's or a machine's end would) that opens the copy, records the bench corpus (corpus.py)
from the store's count on, in batches of ``--batch``, and logs each acknowledged batch (the
call returned) and the moments a maintenance run or a mirror save starts; it is SIGKILLed at the
chosen moment:

- ``kill:S``: S seconds after its first acknowledged batch;
- ``kill:fold``: ``--into`` seconds after a maintenance run (a fold, compaction or ANN build)
  starts (at ``--max-wait`` s of ingest if none does);
- ``kill:save``: ``--into`` seconds after a mirror save starts (likewise).

``clean`` copies and does not record. Then a new process (file cache warm: the copy was just
written) imports worldgraph, opens the folder (``WorldModel.open``: re-indexing what a crash left
unindexed), answers a first plain recall, a first filtered one (``agent_role``) and a second
plain one, each timed; then, outside the timings, it checks that the store holds every episode
the recorder was told was stored, and reports where the time can go: the table's rows, the rows
its mirror holds (``mirror_stats``), the rows the ANN and BM25 indexes do not cover yet; and how
long ``close`` takes (saving the mirror). ``--checkout`` (repeatable) names checkouts whose
``worldgraph`` is used (PYTHONPATH) for the recorder and the new process: trials alternate
between them, so a before/after comparison shares the machine's load.

    nice -n 5 .venv/bin/python bench/cold_start.py --store /work/tmp/cold/prepared \\
        --work /work/tmp/cold/trials --checkout /work/tmp/cold-base --checkout . \\
        --scenarios clean,kill:40,kill:fold --repeat 2 --out /work/tmp/cold/cold.json

``--in-place`` runs the trials on the store itself, for a store too big to copy (10M): its kill
trials append to it, so it is the last thing done with a kept store.

The copy's recorder continues the corpus of ``bench_memory.py`` (``--seed``): the new process
re-indexes the batch that was committed but not acknowledged with a placeholder vector (its
embedder knows the query only), which changes no timing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from corpus import ROLES, Corpus  # noqa: E402
from measure import load_average  # noqa: E402

TENANT = "bench"

RECORDER = """
import json, os, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[2])
from corpus import Corpus, PrecomputedEmbedder
from worldgraph import WorldModel
from worldgraph.memory.index import mirror_files, worker
log = open(sys.argv[3], "a", buffering=1)
def event(kind, **kw):
    log.write(json.dumps({"event": kind, "t": time.perf_counter() - t0, **kw}) + "\\n")
def wrap(owner, name, kind):
    original = getattr(owner, name)
    def wrapped(*a, **kw):
        event(kind)
        return original(*a, **kw)
    setattr(owner, name, wrapped)
wrap(worker.MaintenanceWorker, "run", "fold")
wrap(mirror_files, "save", "save")
emb = PrecomputedEmbedder()
wm = WorldModel.open(sys.argv[1], embedder=emb)
stored = wm.store.stats("bench")["episodes"]
event("open", stored=stored)
corpus = Corpus(stored + 2_000_000, seed=int(sys.argv[4]))
for exps, vectors in corpus.batches(int(sys.argv[5]), start=stored):
    texts = emb.register(exps, vectors)
    wm.record_experiences("bench", exps)
    emb.forget(texts)
    stored += len(exps)
    event("ack", done=stored, last=exps[-1]["episode_id"])
"""

COLD = """
import json, sys, time
t0 = time.perf_counter()
import worldgraph
from worldgraph import WorldModel
t1 = time.perf_counter()
sys.path.insert(0, sys.argv[2])
import numpy as np
from corpus import PrecomputedEmbedder
emb = PrecomputedEmbedder()
emb.vectors[sys.argv[3]] = np.load(sys.argv[4])
t2 = time.perf_counter()
wm = WorldModel.open(sys.argv[1], embedder=emb)
t3 = time.perf_counter()
plain = wm.recall_experiences("bench", None, sys.argv[3], 5, {"hybrid": True})
t4 = time.perf_counter()
role = wm.recall_experiences("bench", sys.argv[5], sys.argv[3], 5, {"hybrid": True})
t5 = time.perf_counter()
again = wm.recall_experiences("bench", None, sys.argv[3], 5, {"hybrid": True})
t6 = time.perf_counter()
out = {"import_s": t1 - t0, "open_s": t3 - t2, "recall_s": t4 - t3, "recall_role_s": t5 - t4,
       "recall_again_s": t6 - t5, "total_s": (t1 - t0) + (t5 - t2), "hits": [len(plain), len(role), len(again)],
       "package": str(worldgraph.__file__)}
# outside the timings: what the store and the index hold
out["stored"] = wm.store.stats("bench")["episodes"]
out["indexed"] = wm.index.count("bench")
last = sys.argv[6]
if last:
    try:
        out["last_ack_found"] = wm.get_episode("bench", last)["id"] == last
    except Exception as exc:
        out["last_ack_found"] = False
        out["last_ack_error"] = repr(exc)
out["mirror"] = wm.index.mirror_stats("bench")
part = wm.index._part("bench")
unindexed = {}
for idx in part.table.list_indices():
    stats = part.table.index_stats(idx.name)
    unindexed[idx.name] = None if stats is None else stats.num_unindexed_rows
out["unindexed"] = unindexed
out["mirror_saved"] = None
try:
    manifest = json.loads((worldgraph_path := __import__("pathlib").Path(sys.argv[1]) / "lancedb" / "_mirror" /
                           part.name / "manifest.json").read_text())
    out["mirror_saved"] = manifest["rows"]
except OSError:
    pass
t7 = time.perf_counter()
wm.close()
out["close_s"] = time.perf_counter() - t7
print(json.dumps(out))
"""


def events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # the line the kill cut
            pass
    return out


def record_and_kill(copy: Path, checkout: Path, moment: str, args: argparse.Namespace) -> dict[str, Any]:
    """Start the recorder on ``copy``, SIGKILL its process group at ``moment``; what it acknowledged."""
    log = copy.parent / f"{copy.name}-events.jsonl"
    log.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    errfile = copy.parent / f"{copy.name}-recorder.err"
    with errfile.open("wb") as err_out:  # a file, not a pipe nobody reads while it records
        proc = subprocess.Popen([sys.executable, "-c", RECORDER, str(copy), str(Path(__file__).parent), str(log),
                                 str(args.seed), str(args.batch)], env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=err_out, cwd=checkout)
    started = time.monotonic()
    first_ack: float | None = None
    trigger: float | None = None
    kind = moment.split(":", 1)[1]
    reached = False
    try:
        while proc.poll() is None:
            time.sleep(0.05)
            evs = events(log)
            now = time.monotonic()
            if first_ack is None and any(e["event"] == "ack" for e in evs):
                first_ack = now
            if first_ack is None:
                if now - started > 600:
                    raise RuntimeError("the recorder acknowledged nothing in 600 s")
                continue
            if kind.replace(".", "").isdigit():
                if now - first_ack >= float(kind):
                    reached = True
                    break
                continue
            if trigger is None and any(e["event"] == kind and e["t"] > 0 for e in evs[-50:]) and \
                    sum(1 for e in evs if e["event"] == "ack") >= 1:
                trigger = now
            if trigger is not None and now - trigger >= args.into:
                reached = True
                break
            if now - first_ack >= args.max_wait:
                break
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        err = errfile.read_text(errors="replace")
        errfile.unlink(missing_ok=True)
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"the recorder ended by itself ({proc.returncode}): {err[-2000:]}")
    evs = events(log)
    acks = [e for e in evs if e["event"] == "ack"]
    opened = next((e for e in evs if e["event"] == "open"), {})
    log.unlink(missing_ok=True)
    return {"moment": moment, "reached": reached, "ingest_s": round(time.monotonic() - (first_ack or started), 1),
            "stored_before": opened.get("stored"), "acked": acks[-1]["done"] if acks else opened.get("stored"),
            "last_ack": acks[-1]["last"] if acks else "",
            "folds_started": sum(1 for e in evs if e["event"] == "fold"),
            "saves_started": sum(1 for e in evs if e["event"] == "save")}


def cold_process(copy: Path, checkout: Path, query: tuple[str, np.ndarray, str], last_ack: str) -> dict[str, Any]:
    qfile = copy.parent / f"{copy.name}-query.npy"
    np.save(qfile, query[1])
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    try:
        proc = subprocess.run([sys.executable, "-c", COLD, str(copy), str(Path(__file__).parent), query[0], str(qfile),
                               query[2], last_ack], env=env, capture_output=True, text=True, cwd=checkout)
    finally:
        qfile.unlink(missing_ok=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the cold process failed: {proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def trial(store: Path, work: Path | None, checkout: Path, scenario: str, query: tuple[str, np.ndarray, str],
          args: argparse.Namespace) -> dict[str, Any]:
    """One trial on a copy of ``store`` made in ``work`` (deleted after), or on ``store`` itself
    (``work`` None: ``--in-place``)."""
    copy = store if work is None else work / "trial"
    if work is not None:
        shutil.rmtree(copy, ignore_errors=True)
        subprocess.run(["cp", "-a", str(store), str(copy)], check=True)
    try:
        row: dict[str, Any] = {"checkout": str(checkout), "scenario": scenario, "load": load_average()}
        killed = record_and_kill(copy, checkout, scenario, args) if scenario.startswith("kill:") else {}
        row.update(killed)
        row.update(cold_process(copy, checkout, query, killed.get("last_ack", "")))
        acked = killed.get("acked")
        row["lost"] = None if acked is None else max(0, acked - row["stored"])
        row["load_after"] = load_average()
        return row
    finally:
        if work is not None:
            shutil.rmtree(copy, ignore_errors=True)


def fmt(row: dict[str, Any]) -> str:
    mirror = row.get("mirror") or {}
    unidx = row.get("unindexed") or {}
    vec = unidx.get("vector_idx")
    fts = unidx.get("text_idx", unidx.get("fts_idx"))
    kill = "" if "acked" not in row else \
        f" acked {row['acked']:,} stored {row['stored']:,} lost {row['lost']} (ingest {row['ingest_s']} s, " \
        f"folds {row['folds_started']}, saves {row['saves_started']}{'' if row['reached'] else ', moment NOT reached'})"
    return (f"{Path(row['checkout']).name:>12} {row['scenario']:>10}  import {row['import_s']:5.2f}  open "
            f"{row['open_s']:5.2f}  recall {row['recall_s']:5.2f}  role {row['recall_role_s']:5.2f}  = "
            f"{row['total_s']:5.2f} s  (again {row['recall_again_s']:.3f}, close {row['close_s']:.2f})  rows "
            f"{row['indexed']:,}, mirror held {mirror.get('rows', 0):,} saved {row.get('mirror_saved') or 0:,}, "
            f"unindexed vec {vec} text {fts}  load {row['load'][0]:.1f}{kill}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True, help="the kept store (a bench_memory.py --keep folder), never modified "
                                                   "(unless --in-place)")
    ap.add_argument("--work", help="where each trial's copy is made (and deleted)")
    ap.add_argument("--in-place", action="store_true",
                    help="no copy: each trial runs on --store itself, whose kill trials append the corpus's next "
                         "episodes to it (for a store too big to copy, e.g. 10M: ~30 GB; afterwards it holds more "
                         "than bench_memory.py's --sizes and that script refuses it)")
    ap.add_argument("--checkout", action="append", default=[], help="a checkout whose worldgraph is used (repeat)")
    ap.add_argument("--scenarios", default="clean,kill:40,kill:fold", help="clean, kill:S, kill:fold, kill:save")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--into", type=float, default=1.0, help="s after a fold / save starts that the kill comes")
    ap.add_argument("--max-wait", type=float, default=120.0, help="s of ingest after which a kill comes anyway")
    ap.add_argument("--seed", type=int, default=20260101)
    ap.add_argument("--out", help="JSON file of every trial")
    args = ap.parse_args()
    if (args.work is None) == (not args.in_place):
        ap.error("give --work (trials on copies) or --in-place (trials on --store itself), one of them")
    store, work = Path(args.store), None if args.in_place else Path(args.work)
    if work is not None:
        work.mkdir(parents=True, exist_ok=True)
    checkouts = [Path(c).resolve() for c in (args.checkout or ["."])]
    corpus = Corpus(1000, seed=args.seed)
    text, vec, topic = corpus.queries(1, seed=args.seed + 2)[0]
    query = (text, vec, ROLES[int(corpus.topic_role[topic])])
    rows: list[dict[str, Any]] = []
    print(f"cold start of {store} (load {load_average()})", flush=True)
    for rep in range(args.repeat):
        for scenario in args.scenarios.split(","):
            order = checkouts if rep % 2 == 0 else checkouts[::-1]
            for checkout in order:
                row = trial(store, work, checkout, scenario, query, args)
                rows.append(row)
                print(fmt(row), flush=True)
                if args.out:
                    Path(args.out).write_text(json.dumps(rows, indent=1, default=str))
    print("\nmedians (s)                        import   open  recall  role  total   lost")
    for scenario in args.scenarios.split(","):
        for checkout in checkouts:
            sel = [r for r in rows if r["scenario"] == scenario and r["checkout"] == str(checkout)]
            med = {k: statistics.median(r[k] for r in sel) for k in ("import_s", "open_s", "recall_s",
                                                                      "recall_role_s", "total_s")}
            lost = sum(r["lost"] or 0 for r in sel)
            print(f"{Path(checkout).name:>12} {scenario:>10} (x{len(sel)})  {med['import_s']:6.2f} {med['open_s']:6.2f} "
                  f"{med['recall_s']:6.2f} {med['recall_role_s']:5.2f} {med['total_s']:6.2f}   {lost}")


if __name__ == "__main__":
    main()
