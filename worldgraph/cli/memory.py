"""Episode commands: record, record-conversation, recall, feedback, episodes, readiness, reindex, stats."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from worldgraph.cli.common import check_data_dir, json_option, open_wm, read_json_items
from worldgraph.cli.console import emit, note, print_context, print_recall, progress_bar, short
from worldgraph.cli.samples import split_samples, store_ratings
from worldgraph.errors import InvalidInputError

Add = Callable[..., argparse.ArgumentParser]
# record-conversation: sessions recorded side by side, sharing embedding batches
SESSION_THREADS = 8


def add_memory_commands(add: Add) -> None:
    sp = add("record", cmd_record, "record experiences from a JSON/JSONL file ('-' for stdin); items may be "
             "{experience, canvas, days_ago, feedback} as in examples/experiences.jsonl")
    sp.add_argument("file", help="a JSON object, a JSON array or JSON Lines; '-' reads stdin")
    sp.add_argument("--replace", action="store_true",
                    help="an episode_id already recorded is replaced (that episode forgotten): an upsert")

    sp = add("record-conversation", cmd_record_conversation,
             "record a transcript turn by turn: {'session_id', 'turns': [...]} or bare turns with --session")
    sp.add_argument("file", help="sessions ({'session_id', 'turns'}) or bare turns, as JSON or JSON Lines; '-' reads stdin")
    sp.add_argument("--session", default=None, help="session id for a file of bare turns")

    sp = add("recall", cmd_recall, "recall past experiences by meaning")
    sp.add_argument("query", help="what the agent is about to do, in words")
    sp.add_argument("--role", default=None, help="agent role filter (e.g. Finance)")
    sp.add_argument("--limit", type=int, default=5, help="how many results at most (default 5)")
    sp.add_argument("--canvas", action="append", help="canvas id filter (repeatable)")
    sp.add_argument("--agent-id", dest="agent_id", default=None, help="only this agent's episodes")
    sp.add_argument("--since", default=None, help="ISO date/time")
    sp.add_argument("--until", default=None, help="ISO date/time")
    sp.add_argument("--now", default=None, help="ISO date/time that 'last week', 'yesterday' ... are read against")
    sp.add_argument("--success-only", action="store_true", help="only episodes whose outcome was a success")
    sp.add_argument("--metadata", default=None,
                    help='conditions on the metadata, as JSON: \'{"user": "u1"}\' or \'{"score": {"$gt": 3}}\'')
    sp.add_argument("--min-similarity", type=float, default=None,
                    help="cosine floor in [-1, 1] (default: the configured one, 0.3 with hybrid recall, 0.2 "
                         "when the query names some of the memories' speakers, 0.6 vector-only)")
    sp.add_argument("--min-feedback", dest="min_feedback_score", type=float, default=None,
                    help="min normalised average feedback in [0, 1]")
    sp.add_argument("--feedback-category", default=None, help="count only feedback of this category")
    sp.add_argument("--canvas-context", action="store_true", help="include canvas snapshot and actions")
    sp.add_argument("--neighborhood", action="store_true",
                    help="include canvas, feedback, scenes, world nodes, rules and the adjacent episodes of the "
                         "session")
    sp.add_argument("--vector-only", action="store_true", help="no full-text candidates")
    sp.add_argument("--explain", action="store_true", help="show how each score was made")

    sp = add("feedback", cmd_feedback, "rate an episode in [-1, 1] (its id, or a unique start of it)")
    sp.add_argument("episode_id", help="the episode's id, or a unique start of it (at least 4 characters)")
    sp.add_argument("score", type=float, help="from -1 (bad) to 1 (good)")
    sp.add_argument("--notes", help="free text kept with the rating")
    sp.add_argument("--category", help="what the rating is about (e.g. accuracy)")
    sp.add_argument("--by", default=None, help="who rates it (default anonymous)")

    sp = add("readiness", cmd_readiness, "graduation exam over an agent's last episodes")
    sp.add_argument("agent_id", help="the agent to examine")
    sp.add_argument("--window", type=int, default=30, help="how many of its newest episodes (default 30)")

    sp = add("reindex", cmd_reindex, "rebuild the LanceDB index (all tenants) from the graph store")
    sp.add_argument("--pending", action="store_true", help="only episodes whose indexing is pending or failed")

    add("stats", cmd_stats, "counts for a tenant")


def cmd_record(args: argparse.Namespace) -> int:
    samples = split_samples(list(read_json_items(args.file)), args.file)
    n = len(samples.experiences)
    with open_wm(args, create=True, progress=progress_bar("indexing", not args.json)) as wm:
        note(args, f"recording {n} experience(s) from {args.file}")
        ids = wm.record_experiences(args.tenant, samples.experiences, canvases=samples.canvases,
                                    progress=progress_bar("embedding", not args.json and n > 50), replace=args.replace)
        rated = store_ratings(wm, args.tenant, ids, samples)
    emit(args, {"recorded": len(ids), "episode_ids": ids, "ratings": rated},
         lambda: print(f"recorded {len(ids)} episode(s) for tenant {args.tenant!r}"
                       + (f", with {rated} rating(s)" if rated else "")
                       + (f": {ids[0]}" if len(ids) == 1 else " (`--json` lists their ids)" if ids else "")))
    return 0


def cmd_record_conversation(args: argparse.Namespace) -> int:
    """FILE holds sessions ({"session_id": ..., "turns": [...]}, one or several) or bare turns
    (a JSON array or JSON Lines of {"speaker", "text", "timestamp"}) for the session --session.

    Sessions are recorded side by side (``SESSION_THREADS`` at a time), so their turns share the
    embedder's batches (see memory/embedders/coalesce.py); items of one session id stay in file
    order, one after the other (each links to the turn before it)."""
    items = [item for _, item in read_json_items(args.file)]
    if items and all(isinstance(i, dict) and "turns" in i for i in items):
        sessions = [(i.get("session_id", args.session), i["turns"]) for i in items]
    elif args.session is None:
        raise InvalidInputError("--session", f"{args.file}: give --session SESSION_ID for a file of bare turns, "
                                'or write it as {"session_id": "...", "turns": [...]}')
    else:
        sessions = [(args.session, items)]
    total = sum(len(t) if isinstance(t, list) else 0 for _, t in sessions)
    show = progress_bar("turns", not args.json and total > 50)
    done = [0] * len(sessions)  # turns embedded so far, per item
    results: list[list[str] | None] = [None] * len(sessions)
    lock = threading.Lock()
    by_session: dict[Any, list[int]] = {}
    for n, (session_id, _) in enumerate(sessions):
        by_session.setdefault(session_id if isinstance(session_id, str) else repr(session_id), []).append(n)

    with open_wm(args, create=True) as wm:
        def record(positions: list[int]) -> None:
            for n in positions:
                def step(d: int, _total: int, n: int = n) -> None:
                    with lock:
                        done[n] = d
                        show(sum(done), total)

                session_id, turns = sessions[n]
                results[n] = wm.record_conversation(args.tenant, session_id, turns, progress=step)
                step(len(results[n] or []), 0)

        with ThreadPoolExecutor(max_workers=min(SESSION_THREADS, len(by_session)) or 1) as pool:
            futures = [pool.submit(record, positions) for positions in by_session.values()]
            errors = [f.exception() for f in futures]
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            recorded = [str(sessions[n][0]) for n, r in enumerate(results) if r is not None]
            if recorded and not args.json:  # under --json stderr holds only the error object
                print(f"note: {len(recorded)} of {len(sessions)} session item(s) were recorded despite the error "
                      f"({short(', '.join(recorded), 200)}); re-run only the others", file=sys.stderr)
            raise failed
    ids = [i for r in results for i in (r or [])]
    emit(args, {"recorded": len(ids), "sessions": len(sessions), "episode_ids": ids},
         lambda: print(f"recorded {len(ids)} turn(s) of {len(sessions)} session(s) for tenant {args.tenant!r}"
                       + (" (`--json` lists their episode ids)" if ids else "")))
    return 0


def _recall_options(args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {"limit": args.limit, "success_only": args.success_only,
                            "include_canvas_context": args.canvas_context,
                            "include_neighborhood": args.neighborhood, "hybrid": not args.vector_only}
    if args.canvas:
        opts["canvas_ids"] = args.canvas
    if args.since or args.until:
        opts["date_range"] = {"start": args.since, "end": args.until}
    for key in ("min_similarity", "min_feedback_score", "feedback_category", "agent_id", "now"):
        if getattr(args, key) is not None:
            opts[key] = getattr(args, key)
    if args.metadata is not None:
        opts["metadata"] = json_option(args.metadata, "--metadata")
    return opts


def cmd_recall(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        results = wm.recall_experiences(args.tenant, args.role, args.query, args.limit, _recall_options(args))

    def text() -> None:
        if not results:
            print("no experiences matched (try --min-similarity 0.3, fewer filters, or check `worldgraph stats`)")
            return
        print_recall(results, explain=args.explain)
        if args.canvas_context or args.neighborhood:
            print_context(results)

    emit(args, results, text)
    return 0


def cmd_feedback(args: argparse.Namespace) -> int:
    def submit(episode_id: str) -> Any:
        return wm.submit_feedback(args.tenant, episode_id, args.score, notes=args.notes, category=args.category,
                                  created_by=args.by)

    with open_wm(args) as wm:
        fb = submit(args.episode_id)  # the id or a unique start of it: WorldModel resolves it
    episode_id = fb["episode_id"]
    emit(args, fb, lambda: print(f"feedback {fb['id']} stored; episode {episode_id} now averages "
                                 f"{fb['average']:.3f} (normalised) over {fb['count']} rating(s)"))
    return 0


def cmd_readiness(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        r = wm.readiness(args.tenant, args.agent_id, args.window)

    def text() -> None:
        for k in ("episodes", "zero_intervention_ratio", "constitutional_compliance", "mean_confidence",
                  "success_rate"):
            mark = "FAIL" if k in r["failing"] else "ok"
            print(f"{k:28} {r[k]!s:>10}  (min {r['thresholds'][k]})  {mark}")
        print(f"{'ready':28} {r['ready']!s:>10}")

    emit(args, r, text)
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    if args.pending:
        with open_wm(args) as wm:
            n = wm.retry_indexing(progress=progress_bar("re-indexing", not args.json))
    else:
        # A full rebuild also recovers from a changed embedder (another model or dimension),
        # which the index refuses to open with otherwise.
        note(args, f"rebuilding the index of {args.data} from the graph store (every episode is embedded again)")
        with open_wm(args, rebuild_index=True, progress=progress_bar("re-indexing", not args.json)) as wm:
            n = wm.index.count()
    emit(args, {"indexed": n}, lambda: print(f"indexed {n} episode(s)"))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from worldgraph.facade import store_only

    check_data_dir(args.data, args.graph != "embedded")
    # the store alone answers (no index or embedder to load); else the whole model
    s = store_only.stats(args.data, args.graph, args.tenant)
    if s is None:
        with open_wm(args) as wm:
            s = wm.stats(args.tenant)
    emit(args, s, lambda: print("\n".join(f"{k:20} {v}" for k, v in s.items())))
    return 0
