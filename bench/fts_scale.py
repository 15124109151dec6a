"""LanceDB's full-text search (BM25) at any size, without recording a single episode.

``build N DIR``: a Lance table of what the full-text search needs, the bench corpus's ``text``
column (``Corpus(N, seed)``: the texts ``index_text`` makes of its episodes, generated a chunk at a
time by a cheaper loop; ``--check`` compares them with the library's on two chunks) and its
``agent_id``, with the FTS index made as ``maintenance.py`` makes it (``FTS()`` defaults, named
``text_idx``) and a BITMAP on ``agent_id``. 10M rows: ~5 minutes of writing, ~6 of indexing.

``time DIR``: search.py's call (``ds.scanner(columns=["_score"], with_row_address=True,
full_text_query=MatchQuery(text, "text"), limit=50)``) for bench_memory's queries, on a dataset
opened with a ``lance.Session`` of the library's cache sizes; every query once to warm, then timed:
wall and process CPU (every thread) p50 / p99. ``--filter``: an agent of the query's role as a
prefilter (~1.5 %, as filtered.py's "agent"); ``--allow SHARE``: a random set of that share of the
row addresses (``row_addr_allowlist``, as search.py restricts a search to an episode-id set's rows).
``--out X.npz`` keeps every query's hits and scores, for comparing two runs (``compare A B``).

``common DATASET``: the whole query against the one led by its rare words (common_terms.py) on
any Lance dataset with a text column and its FTS index (a store's ``lancedb/ep-bench.lance``):
CPU, hits, and whether the hits' scores are the whole query's. bench/README.md, "Common words at
10M: the rare words lead".

    python bench/fts_scale.py build 10000000 /tmp/fts10m
    LANCE_FLAT_SEARCH_PERCENT_THRESHOLD=10 python bench/fts_scale.py time /tmp/fts10m --filter --out a.npz
    python bench/fts_scale.py compare a.npz b.npz

bench/README.md, "Full-text search at 10M rows".
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from corpus import DETAILS, LEARNINGS, OBJECTS, ROLES, VERBS, Corpus  # noqa: E402

_DAYS: dict[int, str] = {}


def chunk_texts(corpus: Corpus, c: int) -> tuple[list[str], list[str]]:
    """The ``text`` (as ``index_text`` makes it) and ``agent_id`` of chunk ``c``'s episodes."""
    from worldgraph.memory.record import date_text

    rng, first, topic_arr, _ = corpus._chunk_start(c)
    d = {k: v.tolist() for k, v in corpus._draws(rng, topic_arr).items()}
    topic = topic_arr.tolist()
    trole, tverb, tobj = corpus.topic_role.tolist(), corpus.topic_verb.tolist(), corpus.topic_obj.tolist()
    texts, agents = [], []
    for j, t in enumerate(topic):
        role = ROLES[trole[t] if d["own_role"][j] else d["any_role"][j]]
        verb, obj = VERBS[tverb[t]], OBJECTS[tobj[t]]
        learn = [LEARNINGS[d["learn_a"][j]], LEARNINGS[d["learn_b"][j]]][: d["n_learnings"][j]]
        day = int(round(corpus.anchor - d["ages"][j], 6) // 86400)  # the stored timestamp's day
        if day not in _DAYS:
            _DAYS[day] = date_text(day * 86400.0 + 1.0)
        texts.append(f"{verb}_{obj.split()[0].lower()}\n{verb.capitalize()} {obj} {DETAILS[d['detail'][j]]} "
                     f"(#{first + j})\nTicket {d['ticket'][j]}: {obj} flagged by {ROLES[d['team'][j]]} team\n"
                     f"{'success' if d['ok'][j] else 'failure'}\n{' '.join(learn)}\n{_DAYS[day]}")
        agents.append(f"{role.lower()}-{d['agent'][j]}")
    return texts, agents


def check(corpus: Corpus) -> None:
    """``chunk_texts`` against the library's ``index_text`` of the corpus's episodes (chunks 0 and 7)."""
    from worldgraph.kg.derived import summarize
    from worldgraph.memory.record import index_text

    for c in sorted({0, min(7, corpus.chunks - 1)}):
        exps, _ = corpus._chunk(c)
        texts, agents = chunk_texts(corpus, c)
        for e, text, agent in zip(exps, texts, agents):
            ep = {**e, "ts": datetime.fromisoformat(e["timestamp"]).timestamp(),
                  "input_summary": summarize(e["input_summary"])}
            assert index_text(ep) == text, (index_text(ep), text)
            assert e["agent_id"] == agent
    print("the texts are the library's index_text on 2 chunks")


def build(args: argparse.Namespace) -> None:
    import lance
    import pyarrow as pa
    from lancedb.index import FTS, Bitmap

    from worldgraph.memory.index.lance_import import import_lancedb

    anchor = datetime.fromisoformat(args.anchor).replace(tzinfo=timezone.utc).timestamp() if args.anchor else None
    corpus = Corpus(args.n, args.seed, anchor=anchor)
    if args.check:
        check(corpus)
        return
    schema = pa.schema([("text", pa.string()), ("agent_id", pa.string())])
    t0 = time.time()

    def batches() -> Any:
        for c in range(corpus.chunks):
            texts, agents = chunk_texts(corpus, c)
            yield pa.record_batch([pa.array(texts), pa.array(agents)], schema=schema)
            if c % 100 == 0:
                print(f"  chunk {c}/{corpus.chunks} {time.time() - t0:.0f}s", flush=True)

    lance.write_dataset(pa.RecordBatchReader.from_batches(schema, batches()), os.path.join(args.dir, "t.lance"),
                        schema=schema, max_rows_per_file=1 << 20)
    print(f"{args.n} rows written in {time.time() - t0:.0f} s", flush=True)
    tbl = import_lancedb().connect(args.dir).open_table("t")
    t1 = time.time()
    tbl.create_index("text", config=FTS(), name="text_idx", replace=False)  # as maintenance.py does
    print(f"FTS index in {time.time() - t1:.0f} s", flush=True)
    tbl.create_index("agent_id", config=Bitmap(), name="agent_id_idx", replace=False)


def bench_queries(seed: int, count: int) -> list[tuple[str, str]]:
    """bench_memory's queries (they depend on the seed only) and each one's ``--filter`` agent: one of the
    query's topic's role (~1.5 % of the rows, as filtered.py's "agent")."""
    corpus = Corpus(10, seed)
    return [(text, f"{ROLES[int(corpus.topic_role[topic])].lower()}-{q % 8}")
            for q, (text, _, topic) in enumerate(corpus.queries(count, seed=seed + 2))]


def timed(args: argparse.Namespace) -> None:
    import lance
    from lance.query import MatchQuery

    from worldgraph.memory.index.search import row_addr_set

    session = lance.Session(index_cache_size_bytes=args.cache_mb << 20, metadata_cache_size_bytes=256 << 20)
    ds = lance.dataset(os.path.join(args.dir, "t.lance"), session=session)
    queries = bench_queries(args.seed, args.queries)
    addrs = np.concatenate([(np.int64(f.fragment_id) << 32) + np.arange(f.count_rows(), dtype=np.int64)
                            for f in ds.get_fragments()])
    allows = []
    for q in range(len(queries)):
        pick = np.sort(np.random.default_rng(q).choice(len(addrs), int(len(addrs) * args.allow), replace=False))
        allows.append(row_addr_set(addrs[pick]) if args.allow else None)

    def run(q: int, text: str, agent: str) -> Any:
        pred = f"agent_id = '{agent}'" if args.filter else None
        return ds.scanner(columns=["_score"], with_row_address=True, full_text_query=MatchQuery(text, "text"),
                          filter=pred, prefilter=pred is not None, row_addr_allowlist=allows[q],
                          limit=args.limit).to_table()

    for q, (text, agent) in enumerate(queries):
        run(q, text, agent)
    walls, cpus, hits = [], [], []
    for q, (text, agent) in enumerate(queries):
        c0, w0 = time.process_time(), time.perf_counter()
        tbl = run(q, text, agent)
        walls.append((time.perf_counter() - w0) * 1e3)
        cpus.append((time.process_time() - c0) * 1e3)
        hits.append((tbl.column("_rowaddr").to_numpy(), tbl.column("_score").to_numpy()))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"rows {ds.count_rows():,} filter {'agent' if args.filter else args.allow or 'none'}: wall p50 "
          f"{np.percentile(walls, 50):.1f} p99 {np.percentile(walls, 99):.1f} ms, CPU p50 {np.percentile(cpus, 50):.1f} "
          f"p99 {np.percentile(cpus, 99):.1f} ms, peak RSS {rss:.0f} MB "
          f"(LANCE_FLAT_SEARCH_PERCENT_THRESHOLD={os.environ.get('LANCE_FLAT_SEARCH_PERCENT_THRESHOLD')})", flush=True)
    if args.out:
        k = args.limit
        np.savez(args.out, walls=np.array(walls), cpus=np.array(cpus),
                 addrs=np.array([np.pad(a.astype(np.int64), (0, k - len(a)), constant_values=-1) for a, _ in hits]),
                 scores=np.array([np.pad(s.astype(np.float64), (0, k - len(s)), constant_values=np.nan) for _, s in hits]))


def common(args: argparse.Namespace) -> None:
    """The whole query against the one led by its rare words (common_terms.py), on any Lance
    dataset with a ``text`` column and an FTS index (a store's ``lancedb/ep-bench.lance``, or
    ``build``'s ``t.lance``): process CPU per query, hits, and the whole query's score of every row
    both find (they must be equal: the boolean query's score is the sum of its clauses')."""
    import lance
    from lance.query import MatchQuery

    from worldgraph.memory.index.common_terms import CommonTerms, led_by_rare, split
    from worldgraph.memory.index.search import row_addr_set

    session = lance.Session(index_cache_size_bytes=args.cache_mb << 20, metadata_cache_size_bytes=256 << 20)
    ds = lance.dataset(args.dataset, session=session)
    rows = ds.count_rows()
    held = CommonTerms(0, args.share).common_of(ds)
    print(f"rows {rows:,}: {len(held)} common terms (more than {args.share:.2%} of a {min(rows, 2048)}-row sample)")
    rng = np.random.default_rng(args.seed)
    kinds: dict[str, list[str]] = {"bench's (how to V O qN)": [], "a ticket number (how to V O ticket N)": [],
                                   "common words only (V O flagged by T team)": []}
    for text, _ in bench_queries(args.seed, args.queries):
        verb_obj = text.split(" ", 2)[2].rsplit(" ", 1)[0]
        kinds["bench's (how to V O qN)"].append(text)
        kinds["a ticket number (how to V O ticket N)"].append(f"how to {verb_obj} ticket {rng.integers(10_000, 100_000)}")
        kinds["common words only (V O flagged by T team)"].append(f"{verb_obj} flagged by Finance team")

    def run(query: Any, k: int) -> Any:
        return ds.scanner(columns=["_score"], with_row_address=True, full_text_query=query, limit=k).to_table()

    for kind, texts in kinds.items():
        cpu: dict[str, list[float]] = {"whole": [], "led": []}
        hits = {"whole": 0, "led": 0}
        both, worst = 0, 0.0
        for rep in range(2):  # the first pass warms the caches
            for text in texts:
                rare, words = split(text, held)
                led = led_by_rare(rare, words) if rare and words else MatchQuery(text, "text")
                c0 = time.process_time()
                whole_hits = run(MatchQuery(text, "text"), args.limit)
                c1 = time.process_time()
                led_hits = run(led, args.limit)
                c2 = time.process_time()
                if rep:
                    cpu["whole"].append((c1 - c0) * 1e3)
                    cpu["led"].append((c2 - c1) * 1e3)
                    hits["whole"] += whole_hits.num_rows
                    hits["led"] += led_hits.num_rows
                    if led_hits.num_rows:  # the whole query's scores of the led query's hits
                        allow = row_addr_set(led_hits.column("_rowaddr").to_numpy())
                        ref = ds.scanner(columns=["_score"], with_row_address=True, limit=led_hits.num_rows,
                                         full_text_query=MatchQuery(text, "text"), row_addr_allowlist=allow).to_table()
                        want = dict(zip(ref.column("_rowaddr").to_pylist(), ref.column("_score").to_pylist()))
                        for addr, score in zip(led_hits.column("_rowaddr").to_pylist(), led_hits.column("_score").to_pylist()):
                            both += 1
                            worst = max(worst, abs(want[addr] - score))
        n = len(texts)
        print(f"{kind:45s} whole CPU p50 {np.percentile(cpu['whole'], 50):6.2f} p99 {np.percentile(cpu['whole'], 99):6.2f} ms, "
              f"{hits['whole'] / n:4.1f} hits | led by the rare words p50 {np.percentile(cpu['led'], 50):6.2f} "
              f"p99 {np.percentile(cpu['led'], 99):6.2f} ms, {hits['led'] / n:4.1f} hits; "
              f"the whole query's score of those {both} hits: largest difference {worst:.2g}", flush=True)


def compare(args: argparse.Namespace) -> None:
    """Two ``time --out`` files: queries with the same sorted scores, and the overlap of their hits."""
    a, b = np.load(args.a), np.load(args.b)
    same, overlap = 0, []
    for ra, sa, rb, sb in zip(a["addrs"], a["scores"], b["addrs"], b["scores"]):
        ra, sa, rb, sb = ra[ra >= 0], sa[ra >= 0], rb[rb >= 0], sb[rb >= 0]
        same += int(len(sa) == len(sb) and np.allclose(np.sort(sa), np.sort(sb), rtol=1e-5))
        overlap.append(len(set(ra.tolist()) & set(rb.tolist())) / max(len(ra), 1))
    print(f"{len(overlap)} queries: {same} with the same scores; overlap of the hits mean {np.mean(overlap):.4f}, "
          f"min {np.min(overlap):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("n", type=int)
    b.add_argument("dir")
    b.add_argument("--seed", type=int, default=20260101)
    b.add_argument("--anchor", help="the day the corpus's ages count back from (default: today), e.g. 2026-12-06")
    b.add_argument("--check", action="store_true")
    t = sub.add_parser("time")
    t.add_argument("dir")
    t.add_argument("--seed", type=int, default=20260101)
    t.add_argument("--queries", type=int, default=200)
    t.add_argument("--limit", type=int, default=50, help="k (config fulltext_pool)")
    t.add_argument("--cache-mb", type=int, default=1024, help="the index cache (config lance_index_cache_mb)")
    t.add_argument("--filter", action="store_true")
    t.add_argument("--allow", type=float, default=0.0)
    t.add_argument("--out")
    m = sub.add_parser("common")
    m.add_argument("dataset", help="a Lance dataset with a text column and its FTS index")
    m.add_argument("--share", type=float, default=0.01, help="config fulltext_common_share")
    m.add_argument("--seed", type=int, default=20260101)
    m.add_argument("--queries", type=int, default=100)
    m.add_argument("--limit", type=int, default=50, help="k (config fulltext_pool)")
    m.add_argument("--cache-mb", type=int, default=1024, help="the index cache (config lance_index_cache_mb)")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = ap.parse_args()
    {"build": build, "time": timed, "common": common, "compare": compare}[args.cmd](args)


if __name__ == "__main__":
    main()
