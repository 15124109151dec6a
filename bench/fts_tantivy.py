"""tantivy's BM25 against LanceDB's on the texts of a ``fts_scale.py build`` table: a probe, not a worldgraph dependency.

tantivy is PyPI ``tantivy`` 0.27.0 (tantivy-py, the Rust engine with block-max WAND): run this with worldgraph's
venv plus ``pip install tantivy==0.27.0``. The index holds ``text`` (the analyzer below: LanceDB's ``text_idx``
chain with its NLTK stop list; frequencies, no positions, not stored), ``row`` (u64, indexed + fast: the row's
position in the table) and ``agent`` (raw, indexed + fast). DIR holds the index (``DIR/tantivy``) and
``DIR/probe.json`` (the table, the rows, the stop list).

``build N DIR --table T``: index the first N rows of the fts_scale.py table in T (T = fts_scale's build DIR), one
writer thread, a 384 MB writer heap; CPU (reading the Lance column included, and shown apart), wall, peak RSS,
index size, segments.

``time DIR``: the 200 bench queries (``fts_scale.bench_queries``, as fts_scale.py and probe.py), every query once
to warm, then timed: ``searcher.search(query, k, count=False)`` of a ``BooleanQuery`` of ``Should`` ``TermQuery``s
(the query's unique tokens), then the hits' ``row`` fast field. ``--filter``: ``Must`` that and ``Must`` a
zero-scored ``TermQuery`` on the query's agent (~1.5 %). ``--limit K``, ``--count`` (count every match: no pruning),
``--mode verb|ticket|absent`` (the query's verb alone, a ticket number, a term in no row). Wall and process CPU
(every thread) p50 / p99 ms, resident memory.

``compare DIR --table T``: LanceDB's answers (fts_scale.py's ``time`` on T, in this process) against tantivy's, per
query: the same top-k score multisets (rtol 1e-4)? the same id sets? ids differing only among the lowest kept score?
T must hold exactly the rows DIR indexed (build DIR with N = T's rows).

``upkeep DIR``: WRITES INTO DIR (run it on a ``cp -a`` copy). A forgotten row in a built segment (is its unique
token still in the term dictionary?), a forgotten fresh row (grep of the folder against the term dictionary),
appends of 1,000 documents + commit, forget one row + commit, ``--bulk`` x 1,000 appends in 1,000-document commits
(merges included), then a reader in another process (reload() cost; the OnCommit policy's delay).

    python bench/fts_scale.py build 1000000 /tmp/fts1m
    python bench/fts_tantivy.py build 1000000 /tmp/tv1m --table /tmp/fts1m
    python bench/fts_tantivy.py time /tmp/tv1m --filter
    python bench/fts_tantivy.py compare /tmp/tv1m --table /tmp/fts1m --filter
    cp -a /tmp/tv1m /tmp/tv1m-copy && python bench/fts_tantivy.py upkeep /tmp/tv1m-copy

bench/README.md, "tantivy for recall's full-text half at 10M? (ftsx, 2026-12-06)".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import measure  # noqa: E402  (bench/measure.py, through the path just set)

# LanceDB's English stop words (lance 14.0.3: NLTK's 179, checked on a probe table: it drops s, t, don, just, now,
# how, against and keeps would, could, ought). tantivy-py's Filter.stopword("english") is Lucene's 33 words: with
# it every BM25 score is ~0.5 % off (other document lengths, so another average length).
NLTK_EN = """i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he him his
himself she she's her hers herself it it's its itself they them their theirs themselves what which who whom this that
that'll these those am is are was were be been being have has had having do does did doing a an the and but if or because
as until while of at by for with about against between into through during before after above below to from up down in
out on off over under again further then once here there when where why how all any both each few more most other some
such no nor not only own same so than too very s t can will just don don't should should've now d ll m o re ve y ain
aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma mightn mightn't
mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren weren't won won't wouldn wouldn't""".split()
ANALYZER = "lance_en"
NEW_ROWS = 1 << 40  # upkeep's appended documents get rows above any table's


def tantivy_module() -> Any:
    try:
        import tantivy
    except ImportError:
        sys.exit("fts_tantivy.py needs tantivy (a probe, not a worldgraph dependency): pip install tantivy==0.27.0")
    return tantivy


def analyzer(stop: str = "nltk") -> Any:
    tv = tantivy_module()
    stops = tv.Filter.custom_stopword(NLTK_EN) if stop == "nltk" else tv.Filter.stopword("english")
    # text_idx's params (its metadata.lance: simple tokenizer, remove tokens >= 40, lower case, English stemmer, stop
    # words, ascii folding) in lance-index tokenizer.rs's order: the stop words are compared *after* stemming
    b = tv.TextAnalyzerBuilder(tv.Tokenizer.simple())
    for f in (tv.Filter.remove_long(40), tv.Filter.lowercase(), tv.Filter.stemmer("english"), stops,
              tv.Filter.ascii_fold()):
        b = b.filter(f)
    return b.build()


def open_index(d: str, create: bool = False, stop: str | None = None) -> tuple[Any, dict[str, Any]]:
    """The index in ``d`` (made empty with ``create``) with its analyzer registered, and ``d``'s probe.json."""
    tv = tantivy_module()
    meta = {"stop": stop} if create else json.loads(Path(d, "probe.json").read_text())
    sb = tv.SchemaBuilder()
    sb.add_text_field("text", stored=False, tokenizer_name=ANALYZER, index_option="freq")
    sb.add_unsigned_field("row", stored=False, indexed=True, fast=True)
    sb.add_text_field("agent", stored=False, fast=True, tokenizer_name="raw", index_option="basic")
    path = os.path.join(d, "tantivy")
    os.makedirs(path, exist_ok=True)
    idx = tv.Index(sb.build(), path=path, reuse=not create)
    idx.register_tokenizer(ANALYZER, analyzer(meta["stop"]))  # per Index object: every open registers it again
    idx.reload()
    return idx, meta


def add_doc(w: Any, text: str, row: int, agent: str) -> None:
    d = tantivy_module().Document()
    d.add_text("text", text)
    d.add_unsigned("row", row)  # not Document(row=...): that makes an i64, and the writer dies on the u64 field
    d.add_text("agent", agent)
    w.add_document(d)


def row_query(idx: Any, row: int) -> Any:
    # delete_documents_by_term("row", row) on a u64 field deletes nothing, silently: delete by this query instead
    return tantivy_module().Query.term_query(idx.schema, "row", row)


def rss_mb() -> float:
    return measure.rss_mb()["rss_mb"] or float("nan")


def peak_mb() -> float:
    return measure.rss_mb()["peak_rss_mb"] or float("nan")


def dir_mib(d: str) -> float:
    return measure.du(Path(d)) / (1 << 20)


class Searcher:
    """The timed call: the query's unique tokens as ``Should`` terms (MatchQuery's OR), optionally ``Must`` an agent."""

    def __init__(self, idx: Any, stop: str, limit: int, count: bool = False) -> None:
        self.tv, self.idx, self.an, self.limit, self.count = tantivy_module(), idx, analyzer(stop), limit, count
        self.searcher = idx.searcher()

    def __call__(self, text: str, agent: str | None) -> tuple[list[int], list[float]]:
        tv, schema = self.tv, self.idx.schema
        toks = list(dict.fromkeys(self.an.analyze(text)))
        q = tv.Query.boolean_query([(tv.Occur.Should, tv.Query.term_query(schema, "text", t, index_option="freq"))
                                    for t in toks])
        if agent is not None:
            f = tv.Query.const_score_query(tv.Query.term_query(schema, "agent", agent, index_option="basic"), 0.0)
            q = tv.Query.boolean_query([(tv.Occur.Must, q), (tv.Occur.Must, f)])
        # search() counts every match by default (count=True), which turns block-max pruning off
        hits = self.searcher.search(q, self.limit, count=self.count).hits
        return self.searcher.fast_field_values("row", [d for _, d in hits]), [s for s, _ in hits]


def build(args: argparse.Namespace) -> None:
    import lance

    if Path(args.dir, "probe.json").exists():
        sys.exit(f"{args.dir} already holds an index")
    table = os.path.join(args.table, "t.lance")
    c0, w0 = time.process_time(), time.perf_counter()
    idx, meta = open_index(args.dir, create=True, stop=args.stop)
    w = idx.writer(heap_size=args.heap_mb << 20, num_threads=args.threads)
    row, read_cpu = 0, 0.0
    batches = iter(lance.dataset(table).scanner(columns=["text", "agent_id"], batch_size=20_000,
                                                limit=args.n).to_batches())
    while True:
        r0 = time.process_time()
        b = next(batches, None)
        if b is None:
            break
        texts, agents = b.column("text").to_pylist(), b.column("agent_id").to_pylist()
        read_cpu += time.process_time() - r0
        for text, agent in zip(texts, agents):
            add_doc(w, text, row, agent)
            row += 1
        if row % 1_000_000 < len(texts):
            print(f"  {row:,} rows {time.perf_counter() - w0:.0f} s, {time.process_time() - c0:.0f} CPU-s, "
                  f"RSS {rss_mb():.0f} MB", flush=True)
    w.commit()
    w.wait_merging_threads()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    Path(args.dir, "probe.json").write_text(json.dumps({**meta, "table": os.path.abspath(table), "rows": row}))
    idx.reload()
    s = idx.searcher()
    print(f"{s.num_docs:,} rows indexed (stop words {args.stop}, heap {args.heap_mb} MB, {args.threads} thread): "
          f"{cpu:.1f} CPU-s ({read_cpu:.1f} of them reading the table), {wall:.1f} s wall, peak RSS {peak_mb():.0f} MB, "
          f"index {dir_mib(os.path.join(args.dir, 'tantivy')):.1f} MiB, {s.num_segments} segments", flush=True)


def query_texts(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    from fts_scale import bench_queries

    def mode(text: str) -> str:
        w = text.split()  # "how to VERB OBJECT... qN"
        return {"full": text, "verb": w[2], "ticket": "12345", "absent": w[-1]}[args.mode]

    return [(mode(text), agent if args.filter else None) for text, agent in bench_queries(args.seed, args.queries)]


def timed(args: argparse.Namespace) -> None:
    rss0 = rss_mb()
    c0, w0 = time.process_time(), time.perf_counter()
    idx, meta = open_index(args.dir)
    search = Searcher(idx, meta["stop"], args.limit, args.count)
    open_ms = (time.process_time() - c0) * 1e3, (time.perf_counter() - w0) * 1e3
    queries = query_texts(args)
    for text, agent in queries:
        search(text, agent)
    walls, cpus, hits = [], [], []
    for text, agent in queries:
        c0, w0 = time.process_time(), time.perf_counter()
        rows, scores = search(text, agent)
        walls.append((time.perf_counter() - w0) * 1e3)
        cpus.append((time.process_time() - c0) * 1e3)
        hits.append((np.array(rows, dtype=np.int64), np.array(scores, dtype=np.float64)))
    one = sum(len(s) > 0 and s.max() - s.min() <= 1e-6 * s.max() for _, s in hits)
    print(f"{search.searcher.num_docs:,} docs, {search.searcher.num_segments} segments, mode {args.mode}, filter "
          f"{'agent' if args.filter else 'none'}, k {args.limit}, count {args.count}: wall p50 {np.percentile(walls, 50):.2f} "
          f"p99 {np.percentile(walls, 99):.2f} ms, CPU p50 {np.percentile(cpus, 50):.2f} p99 {np.percentile(cpus, 99):.2f} ms; "
          f"open {open_ms[0]:.0f} CPU / {open_ms[1]:.0f} wall ms; RSS {rss0:.0f} -> {rss_mb():.0f} MB (peak {peak_mb():.0f}); "
          f"hits per query {np.mean([len(r) for r, _ in hits]):.1f}; queries whose hits share one score {one} of {len(hits)}",
          flush=True)
    if args.out:
        k = args.limit
        np.savez(args.out, walls=np.array(walls), cpus=np.array(cpus),
                 rows=np.array([np.pad(r, (0, k - len(r)), constant_values=-1) for r, _ in hits]),
                 scores=np.array([np.pad(s, (0, k - len(s)), constant_values=np.nan) for _, s in hits]))


def compare(args: argparse.Namespace) -> None:
    import fts_scale
    import lance

    idx, meta = open_index(args.dir)
    ds = lance.dataset(os.path.join(args.table, "t.lance"))
    if ds.count_rows() != meta["rows"]:
        sys.exit(f"{args.table} has {ds.count_rows():,} rows, the index {meta['rows']:,}: build the index of all of them")
    # a row address -> its position (what the index's "row" holds): fts_scale writes the table once, no deletions
    frags = sorted(ds.get_fragments(), key=lambda f: f.fragment_id)
    first = dict(zip([f.fragment_id for f in frags], np.cumsum([0] + [f.count_rows() for f in frags[:-1]]).tolist()))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "lance.npz")
        print("LanceDB (fts_scale.py time): ", end="", flush=True)
        fts_scale.timed(argparse.Namespace(dir=args.table, seed=args.seed, queries=args.queries, limit=args.limit,
                                           cache_mb=1024, filter=args.filter, allow=0.0, out=out))
        lance_hits = np.load(out)
    search = Searcher(idx, meta["stop"], args.limit)
    same_scores = same_ids = tie_only = 0
    rel, bad = [], []
    for q, ((text, agent), la, ls) in enumerate(zip(query_texts(args), lance_hits["addrs"], lance_hits["scores"])):
        lr = np.array([first[a >> 32] + (a & 0xFFFFFFFF) for a in la[la >= 0].tolist()], dtype=np.int64)
        ls = ls[la >= 0]
        tr, ts = (np.array(x) for x in search(text, agent))
        ok = len(ls) == len(ts) and bool(np.allclose(np.sort(ls), np.sort(ts), rtol=1e-4, atol=0))
        same_scores += ok
        same_ids += set(lr.tolist()) == set(tr.tolist())
        if ok and len(ls):
            rel.append(float(np.max(np.abs(np.sort(ls) - np.sort(ts)) / np.sort(ls))))
            last = ls.min() * (1 + 1e-4)  # the ids may differ among the rows of the lowest kept score only
            tie_only += set(lr[ls > last].tolist()) == set(tr[ts > last].tolist())
        elif not ok:
            bad.append(q)
            if len(bad) <= 3:
                print(f"  q{q} {text!r}: LanceDB {np.round(np.sort(ls)[::-1][:4], 5)}, tantivy "
                      f"{np.round(np.sort(ts)[::-1][:4], 5)}", flush=True)
    print(f"{len(lance_hits['scores'])} queries, k {args.limit}, filter {'agent' if args.filter else 'none'}: "
          f"{same_scores} with the same top-k score multisets (rtol 1e-4), max relative difference "
          f"{max(rel, default=float('nan')):.1e}; same id sets {same_ids}; ids differ only among equal scores "
          f"{tie_only} of {same_scores}; differing queries {bad[:20]}", flush=True)


def upkeep(args: argparse.Namespace) -> None:
    import lance

    idx, meta = open_index(args.dir)
    path = os.path.join(args.dir, "tantivy")
    n0, seg0 = idx.searcher().num_docs, idx.searcher().num_segments
    # the appended texts: the table's first rows but the last (whose row is forgotten below; its "#row" token is
    # its own: tickets are 1000-99998)
    src = lance.dataset(meta["table"]).take(list(range(min(200_000, meta["rows"] - 1))), columns=["text", "agent_id"])
    texts, agents = src.column("text").to_pylist(), src.column("agent_id").to_pylist()
    w = idx.writer(heap_size=args.heap_mb << 20, num_threads=1)
    state = {"row": NEW_ROWS, "pos": 0}

    def add(n: int) -> None:
        for _ in range(n):
            p = state["pos"] % len(texts)
            add_doc(w, texts[p], state["row"], agents[p])
            state["row"] += 1
            state["pos"] += 1

    def timed_ms(f: Any) -> tuple[float, float]:
        c0, w0 = time.process_time(), time.perf_counter()
        f()
        return (time.process_time() - c0) * 1e3, (time.perf_counter() - w0) * 1e3

    def med(x: list[float]) -> str:
        return f"p50 {np.median(x):.1f} max {np.max(x):.1f}"

    def grep(word: str) -> list[str]:
        return subprocess.run(["grep", "-rl", word, path], capture_output=True, text=True).stdout.split()

    def terms(prefix: str) -> list[tuple[str, int]]:
        idx.reload()
        return [t for t in idx.searcher().terms_with_prefix("text", prefix) if t[0] == prefix]

    # 0. forgetting is a tombstone: a built segment's row, then a fresh one (committed with 999 others, so that its
    # segment keeps live documents: a segment whose documents are all deleted is dropped at once)
    built, token = meta["rows"] - 1, str(meta["rows"] - 1)
    before = terms(token)
    w.delete_documents_by_query(row_query(idx, built))
    w.commit()
    print(f"forget row {built} (a built segment): its token {token!r} in the term dictionary before {before}, after "
          f"the delete + commit {terms(token)}", flush=True)
    secret = "zqxsecretword"
    add_doc(w, f"remember {secret} please", NEW_ROWS - 1, "x-0")
    add(999)
    w.commit()
    w.delete_documents_by_query(row_query(idx, NEW_ROWS - 1))
    w.commit()
    print(f"forget a fresh row holding {secret!r}: files holding it (grep) {grep(secret)}, term dictionary "
          f"{terms(secret)}", flush=True)
    # 1. appends
    cpu, wall, cpu_c, wall_c = [], [], [], []
    for _ in range(20):
        c, wl = timed_ms(lambda: add(1000))
        cc, wc = timed_ms(w.commit)
        cpu.append(c + cc), wall.append(wl + wc), cpu_c.append(cc), wall_c.append(wc)
    print(f"append 1,000 + commit: CPU ms {med(cpu)} (the commit {med(cpu_c)}), wall ms {med(wall)} (the commit "
          f"{med(wall_c)})", flush=True)
    # 2. forget one row + commit
    victims = np.linspace(0, meta["rows"] - 2, 20).astype(int).tolist()
    cpu, wall = [], []
    for v in victims:
        def forget(v: int = v) -> None:
            w.delete_documents_by_query(row_query(idx, v))
            w.commit()
        c, wl = timed_ms(forget)
        cpu.append(c), wall.append(wl)
    idx.reload()
    s = idx.searcher()
    gone = sum(s.search(row_query(idx, v), 1, count=True).count == 0 for v in victims)
    print(f"forget one row (delete_documents_by_query) + commit: CPU ms {med(cpu)}, wall ms {med(wall)}; gone for a "
          f"reloaded searcher {gone} of {len(victims)}; docs {s.num_docs:,} (were {n0:,}, + 21,000 - 22)", flush=True)
    # 3. --bulk x 1,000 appends in 1,000-document commits, merges included
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(args.bulk):
        add(1000)
        w.commit()
    c_bulk, w_bulk = time.process_time() - c0, time.perf_counter() - w0
    # 4. a reader in another process: it opens the index, then this process commits 1,000 more
    rd = subprocess.Popen([sys.executable, __file__, "reader", args.dir], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True)
    try:
        opened = rd.stdout.readline().strip()
        add(1000)
        w.commit()
        rd.stdin.write(f"{time.time()}\n")
        rd.stdin.flush()
        seen = rd.stdout.read().strip()
        rd.wait(timeout=60)
    finally:
        if rd.poll() is None:
            rd.kill()
            rd.wait()
    c1 = time.process_time()
    w.wait_merging_threads()
    c_wait = time.process_time() - c1
    idx.reload()
    s = idx.searcher()
    print(f"{args.bulk:,} x (1,000 appends + commit): {c_bulk:.1f} CPU-s ({args.bulk * 1000 / max(c_bulk, 1e-9):,.0f} "
          f"docs per CPU-s), {w_bulk:.1f} s wall; then wait_merging_threads {c_wait:.1f} CPU-s; segments {seg0} -> "
          f"{s.num_segments}; docs {s.num_docs:,}; RSS {rss_mb():.0f} MB", flush=True)
    print(f"reader in another process: {opened}; {seen}", flush=True)
    # wait_merging_threads() consumed the writer and released the folder's lock: a new writer can collect garbage
    w2 = open_index(args.dir)[0].writer(heap_size=64 << 20, num_threads=1)
    w2.garbage_collect_files()
    w2.wait_merging_threads()
    print(f"after the merges and garbage_collect_files: {token!r} in the term dictionary {terms(token)}; "
          f"{secret!r} in files (grep) {grep(secret)}, in the term dictionary {terms(secret)}; index "
          f"{dir_mib(path):.1f} MiB", flush=True)


def reader(args: argparse.Namespace) -> None:
    """upkeep's other process: a Manual and an OnCommit reader; waits for the writer's commit time on stdin."""
    manual, _ = open_index(args.dir)
    manual.config_reader(reload_policy="Manual")
    on_commit, _ = open_index(args.dir)
    on_commit.config_reader(reload_policy="OnCommit")  # a watcher polls meta.json
    n0 = manual.searcher().num_docs
    print(f"opened with {n0:,} docs", flush=True)
    t_commit = float(sys.stdin.readline())
    seen = None
    while time.time() - t_commit < 3 and seen is None:
        if on_commit.searcher().num_docs > n0:
            seen = f"{(time.time() - t_commit) * 1e3:.0f} ms"
        time.sleep(0.005)
    before = manual.searcher().num_docs
    c0, w0 = time.process_time(), time.perf_counter()
    manual.reload()
    c, wl = (time.process_time() - c0) * 1e3, (time.perf_counter() - w0) * 1e3
    print(f"OnCommit saw the commit after {seen or 'more than 3 s'}; Manual: {before:,} docs, reload() {c:.1f} CPU ms "
          f"{wl:.1f} wall ms, then {manual.searcher().num_docs:,} docs", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("n", type=int)
    b.add_argument("dir")
    b.add_argument("--table", required=True, help="fts_scale.py build's DIR")
    b.add_argument("--stop", choices=["nltk", "lucene"], default="nltk",
                   help="lance's stop words, or tantivy-py's 33-word English list (scores ~0.5 %% off)")
    b.add_argument("--heap-mb", type=int, default=384)
    b.add_argument("--threads", type=int, default=1)
    for name in ("time", "compare"):
        t = sub.add_parser(name)
        t.add_argument("dir")
        t.add_argument("--seed", type=int, default=20260101)
        t.add_argument("--queries", type=int, default=200)
        t.add_argument("--limit", type=int, default=50, help="k (config fulltext_pool)")
        t.add_argument("--filter", action="store_true")
        if name == "time":
            t.add_argument("--count", action="store_true")
            t.add_argument("--mode", choices=["full", "verb", "ticket", "absent"], default="full")
            t.add_argument("--out", help="an .npz of every query's rows and scores")
        else:
            t.add_argument("--table", required=True, help="fts_scale.py build's DIR, of the rows DIR indexed")
            t.set_defaults(mode="full")
    u = sub.add_parser("upkeep")
    u.add_argument("dir")
    u.add_argument("--heap-mb", type=int, default=384)
    u.add_argument("--bulk", type=int, default=200, help="thousands of documents appended in 1,000-document commits")
    r = sub.add_parser("reader")
    r.add_argument("dir")
    args = ap.parse_args()
    {"build": build, "time": timed, "compare": compare, "upkeep": upkeep, "reader": reader}[args.cmd](args)


if __name__ == "__main__":
    main()
