"""World questions: does an agent get the answer from its world model, and from its episodes?

    python bench/world_qa.py --seeds 101,102,103,104,105 --world-size 8 --objects 24 --quest 5 \
        --steps 120 --noise 0,0.2,0.4 --out bench/results/world_qa.json
    # other games (held out): --games path/to/a.z8,path/to/b.ulx (any TextWorld game file)

Per game (TextWorld, the ``[bench]`` extra), played and extracted exactly as
bench/world_fidelity.py does: an explorer plays ``--steps`` rounds, each round goes to
``wm.observe_round`` flagged, and the background workers extract it through a local
OpenAI-compatible server that answers with the oracle delta, corrupted by the noise model, after a
random latency. Then questions from the game's TRUE final state (``qa_oracle.questions``: where a
thing is now, what a container holds, whether a door is open / closed / locked, what an action
did in the room it was done in), each with the fact that answers it, asked three ways:

- ``search_world`` (the world model's search): does the first hit / one of the first five hold
  the answer?
- ``context`` (one prompt-ready block, ``--tokens`` 1,500): does the block hold it?
- plain episode recall over the agent's own observations (the rounds ``observe_round``
  recorded): the same three numbers, the block made of the recalled episodes in rank order.

The matching rule is ``qa_oracle``'s, one for every method (a learned record's id, or one
sentence naming the fact's ends; history does not answer a question about now). ``search_world``
and ``context`` are plugged in through ``SEARCH`` and ``CONTEXT`` (a function of the
WorldModel, tenant, environment and query): a model without those methods prints "n/a".
"graph holds" is the share of questions whose answer the learned graph holds at all.
See bench/README.md ("World questions").
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (str(ROOT), str(ROOT / "bench")):
    if p not in sys.path:
        sys.path.insert(0, p)

from fidelity_oracle import oracle_delta  # noqa: E402
from qa_oracle import KINDS, Question, answer_ids, block_holds, first_hit, questions  # noqa: E402
from world_fidelity import TENANT, Oracle, add_game_args, explore, make_game, observe, oracle_server  # noqa: E402

from worldgraph import WorldModel  # noqa: E402

Unit = tuple["str | None", str, "bool | None"]  # (id, text, current) of one hit
SearchFn = Callable[[WorldModel, str, str, str], "list[Any] | None"]
ContextFn = Callable[[WorldModel, str, str, str], "str | None"]


# ---------------------------------------------------------------------------------- the methods
def search_world(wm: WorldModel, tenant: str, env: str, query: str) -> list[Any] | None:
    """``wm.search_world``'s ranked hits, or None before the model has it."""
    method = getattr(wm, "search_world", None)
    return None if method is None else list(method(tenant, query, env_name=env, k=10))


def context(wm: WorldModel, tenant: str, env: str, query: str, tokens: int = 1500) -> str | None:
    """``wm.context``'s block, or None before the model has it."""
    method = getattr(wm, "context", None)
    return None if method is None else str(method(tenant, query, env_name=env, max_tokens=tokens))


SEARCH: SearchFn = search_world
CONTEXT: ContextFn = context


def hit_units(hits: list[Any]) -> list[Unit]:
    """(id, text, current) of each hit, whatever shape the hits have (dicts, models, objects)."""
    out: list[Unit] = []
    for h in hits:
        d = h if isinstance(h, dict) else h.model_dump() if hasattr(h, "model_dump") else vars(h)
        current = d.get("current")
        if current is None and "valid_to" in d:
            current = d["valid_to"] is None
        out.append((d.get("id"), str(d.get("text") or ""), current))
    return out


class Tokens:
    """Counts tokens with the BERT WordPiece vocabulary worldgraph ships (the embedder's own)."""

    def __init__(self) -> None:
        from tokenizers import BertWordPieceTokenizer

        vocab = ROOT / "worldgraph" / "memory" / "embedders" / "vocab" / "bert-base-uncased.txt"
        self.tok = BertWordPieceTokenizer(str(vocab), lowercase=True)

    def count(self, text: str) -> int:
        return len(self.tok.encode(text, add_special_tokens=False).ids)

    def cut(self, text: str, budget: int) -> str:
        """The whole lines of ``text`` that fit ``budget`` tokens (a block is read within its budget)."""
        out, used = [], 0
        for line in text.splitlines():
            n = self.count(line) + 1
            if used + n > budget:
                break
            out.append(line)
            used += n
        return "\n".join(out)


# ---------------------------------------------------------------------------------- one game
def play(path: Path, rounds: list[dict[str, Any]], oracle: Oracle, workers: int, data: Path,
         embedder: Any) -> WorldModel:
    """The game's rounds observed (flagged) and extracted, as in world_fidelity; the model open."""
    env = path.stem
    for r in rounds:
        oracle.clean[(env, r["round"])] = oracle_delta(r["before"], r["after"], r["action"])
    wm = WorldModel.open(data, embedder=embedder, world_workers=workers) if embedder else \
        WorldModel.open(data, world_workers=workers)
    observe(wm, env, rounds)
    return wm


def ask(wm: WorldModel, env: str, qs: list[Question], tokens: Tokens, budget: int,
        recall_limit: int) -> list[dict[str, Any]]:
    """Every question asked of the three methods; one result row per question."""
    graph = wm.world_graph(TENANT, env)
    texts = episode_texts(wm)
    rows = []
    for q in qs:
        ids = answer_ids(graph, q)
        row: dict[str, Any] = {"kind": q.kind, "moved": q.moved, "question": q.text, "answer": q.answer,
                               "graph_holds": bool(ids)}
        hits = SEARCH(wm, TENANT, env, q.text)
        if hits is not None:
            units = hit_units(hits)
            row["search_hit1"], row["search_hit5"] = first_hit(q, ids, units, 1), first_hit(q, ids, units, 5)
        block = CONTEXT(wm, TENANT, env, q.text)
        if block is not None:
            row["context"] = block_holds(q, ids, tokens.cut(block, budget))
        recalled = wm.recall_experiences(TENANT, None, q.text, limit=recall_limit, options={"min_similarity": -1.0})
        units = [(r["episode_id"], texts.get(r["episode_id"], ""), None) for r in recalled]
        row["episodes_hit1"], row["episodes_hit5"] = first_hit(q, ids, units, 1), first_hit(q, ids, units, 5)
        lines = "\n".join(f"[{i}] {t}" for i, t, _ in units)
        row["episodes_block"] = block_holds(q, ids, tokens.cut(lines, budget))
        rows.append(row)
    return rows


def episode_texts(wm: WorldModel) -> dict[str, str]:
    """What each recorded round holds of the agent's observations, one line each: its task (the
    round and action), the observation before it, and the observation after it when kept."""
    out: dict[str, str] = {}
    cursor = None
    while True:
        page = wm.list_episodes(TENANT, limit=500, cursor=cursor)
        for e in page.items:
            parts = [e.get("task_description"), e.get("input_summary"), e.get("error_message")]
            out[e["episode_id"]] = " ".join(" ".join(str(p).split()) for p in parts if p)
        cursor = page.next_cursor
        if not cursor:
            return out


# ---------------------------------------------------------------------------------- the table
METRICS = [("graph_holds", "graph holds"), ("search_hit1", "search_world hit@1"),
           ("search_hit5", "search_world hit@5"), ("context", "context (block)"),
           ("episodes_hit1", "episodes hit@1"), ("episodes_hit5", "episodes hit@5"),
           ("episodes_block", "episodes (block)")]


def table(title: str, rows: list[dict[str, Any]], budget: int) -> str:
    head = [h.replace("(block)", f"({budget:,} tokens)") for _, h in METRICS]
    out = [f"\n{title}", "| questions | n | " + " | ".join(head) + " |", "|---" * (len(METRICS) + 2) + "|"]
    for kind in ("where", "where (moved)", *KINDS[1:], "all"):
        mine = [r for r in rows if kind in ("all", r["kind"]) or (kind == "where (moved)" and r.get("moved"))]
        if not mine:
            continue
        cells = []
        for key, _ in METRICS:
            have = [r[key] for r in mine if key in r]
            cells.append("n/a" if not have else f"{sum(have) / len(have):.3f}")
        out.append(f"| {kind} | {len(mine)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_game_args(ap)
    ap.add_argument("--games", default="", help="comma-separated TextWorld game files to play instead of --seeds")
    ap.add_argument("--tokens", type=int, default=1500, help="the block budget (context and the episode block)")
    ap.add_argument("--recall-limit", type=int, default=40, help="episodes recalled per question")
    ap.add_argument("--embedder", choices=("default", "hashing"), default="default",
                    help="default: the local MiniLM (what an agent gets); hashing: fast, for a quick look")
    ap.add_argument("--out", type=Path, default=None, help="write every question and result as JSON")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wg-qa-"))
    tokens = Tokens()
    embedder = None
    if args.embedder == "hashing":
        from worldgraph.memory.embeddings import HashingEmbedder
        embedder = HashingEmbedder(384)
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        # (game file, the explorer's seed): a seed's game is explored as world_fidelity explores it
        given = [(Path(g), Path(g).name) for g in args.games.split(",") if g]
        made = [(make_game(int(s), args.world_size, args.objects, args.quest, tmp), int(s))
                for s in args.seeds.split(",")] if not given else []
        games = [(p, explore(p, args.steps, random.Random(seed))) for p, seed in given + made]
        for share in (float(x) for x in args.noise.split(",")):
            rows = results.setdefault(f"{share:.0%}", [])
            with oracle_server(share, args.latency) as oracle:
                for path, rounds in games:
                    started = time.perf_counter()
                    wm = play(path, rounds, oracle, args.workers, tmp / f"data-{share}-{path.stem}", embedder)
                    try:
                        qs = questions(rounds)
                        game_rows = ask(wm, path.stem, qs, tokens, args.tokens, args.recall_limit)
                    finally:
                        wm.close()
                    for r in game_rows:
                        r["game"] = path.stem
                    rows += game_rows
                    print(f"{path.stem} at {share:.0%}: {len(rounds)} rounds, {len(qs)} questions "
                          f"({time.perf_counter() - started:.1f} s)", file=sys.stderr)
            print(table(f"noise {share:.0%} ({len(games)} games)", rows, args.tokens))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results},
                                       indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
