"""The ``worldgraph`` command. Every command takes ``--json`` for machine-readable output.

Global options (before the command): ``--data DIR`` (env WORLDGRAPH_DATA, default ./data),
``--graph embedded|neo4j`` (env WORLDGRAPH_GRAPH), ``--tenant T`` (env WORLDGRAPH_TENANT,
default "default").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from worldgraph.console import emit, print_recall, print_report, progress_bar, short, table
from worldgraph.errors import WorldGraphError

Handler = Callable[[argparse.Namespace], int]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except WorldGraphError as exc:
        _error(args, exc)
        return 1
    except KeyboardInterrupt:
        return 130


def _error(args: argparse.Namespace, exc: Exception) -> None:
    if getattr(args, "json", False):
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
    print(f"error: {exc}", file=sys.stderr)


# ---------------------------------------------------------------------- helpers
def open_wm(args: argparse.Namespace, **kw: Any) -> Any:
    from worldgraph.service import WorldModel

    if getattr(args, "read_only", False):
        kw["read_only"] = True
    return WorldModel.open(args.data, graph=args.graph, **kw)


def read_json_items(path: str) -> Iterator[tuple[int, Any]]:
    """A JSON object, a JSON array, or JSON Lines, from a file or '-' (stdin); yields (line, item)."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    stripped = text.strip()
    if not stripped:
        raise WorldGraphError(f"{path}: empty input")
    try:
        whole = json.loads(stripped)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, list):
        yield from ((i + 1, item) for i, item in enumerate(whole))
        return
    if isinstance(whole, dict):
        yield 1, whole
        return
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield n, json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorldGraphError(f"{path}:{n}: not valid JSON ({exc.msg} at column {exc.colno})") from None


# ---------------------------------------------------------------------- commands
def cmd_record(args: argparse.Namespace) -> int:
    items = [item for _, item in read_json_items(args.file)]
    experiences, canvases = [], []
    for item in items:
        if isinstance(item, dict) and "experience" in item:
            experiences.append(item["experience"])
            canvases.append(item.get("canvas"))
        else:
            experiences.append(item)
            canvases.append(None)
    with open_wm(args) as wm:
        ids = wm.record_experiences(args.tenant, experiences, canvases=canvases,
                                    progress=progress_bar("embedding", not args.json and len(items) > 50))
    emit(args, {"recorded": len(ids), "episode_ids": ids},
         lambda: print("\n".join(ids) + f"\nrecorded {len(ids)} episode(s) for tenant {args.tenant!r}"))
    return 0


def cmd_record_conversation(args: argparse.Namespace) -> int:
    """FILE holds sessions ({"session_id": ..., "turns": [...]}, one or several) or bare turns
    (a JSON array or JSON Lines of {"speaker", "text", "timestamp"}) for the session --session."""
    items = [item for _, item in read_json_items(args.file)]
    if items and all(isinstance(i, dict) and "turns" in i for i in items):
        sessions = [(i.get("session_id", args.session), i["turns"]) for i in items]
    elif args.session is None:
        raise WorldGraphError(f"{args.file}: give --session SESSION_ID for a file of bare turns, or write it as "
                              '{"session_id": "...", "turns": [...]}')
    else:
        sessions = [(args.session, items)]
    ids: list[str] = []
    with open_wm(args) as wm:
        for session_id, turns in sessions:
            ids.extend(wm.record_conversation(args.tenant, session_id, turns))
    emit(args, {"recorded": len(ids), "sessions": len(sessions), "episode_ids": ids},
         lambda: print("\n".join(ids) + f"\nrecorded {len(ids)} turn(s) of {len(sessions)} session(s) "
                       f"for tenant {args.tenant!r}"))
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
    return opts


def cmd_recall(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        results = wm.recall_experiences(args.tenant, args.role, args.query, args.limit, _recall_options(args))

    def text() -> None:
        if not results:
            print("no experiences matched (try --min-similarity 0.3, fewer filters, or check `worldgraph stats`)")
            return
        print_recall(results, explain=args.explain)

    emit(args, results, text)
    return 0


def cmd_feedback(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        fb = wm.submit_feedback(args.tenant, args.episode_id, args.score, notes=args.notes, category=args.category,
                                created_by=args.by)
    emit(args, fb, lambda: print(f"feedback {fb['id']} stored; episode {args.episode_id} now averages "
                                 f"{fb['average']:.3f} (normalised) over {fb['count']} rating(s)"))
    return 0


def cmd_episodes(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        eps = wm.get_agent_episodes(args.tenant, args.agent_id, args.limit)
    emit(args, eps, lambda: table(
        [[e["timestamp"][:19], e["outcome"], f"{e['confidence_score']:.2f}", short(e["task_description"]), e["id"]]
         for e in eps], ["timestamp", "outcome", "conf", "task", "episode_id"]))
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
        with open_wm(args, rebuild_index=True) as wm:
            n = wm.index.count()
    emit(args, {"indexed": n}, lambda: print(f"indexed {n} episode(s)"))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        s = wm.stats(args.tenant)
    emit(args, s, lambda: print("\n".join(f"{k:16} {v}" for k, v in s.items())))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from worldgraph.replay import replay_log

    with open_wm(args) as wm:
        summary = replay_log(wm, args.tenant, args.env, args.log, use_shipped_deltas=args.offline,
                             progress=progress_bar("rounds", not args.json))
    emit(args, summary, lambda: print(
        f"{summary['rounds']} rounds, {summary['flagged']} flagged, {summary['merged']} merged, "
        f"{summary['pending']} pending, {summary['failed']} failed"))
    return 0


def cmd_delta_apply(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        reports = []
        for line, delta in read_json_items(args.file):
            reason = f"delta apply {args.file}" + (f":{line}" if line > 1 else "")
            reports.append(wm.apply_delta(args.tenant, args.env, delta, scene=reason).to_dict())
    def text() -> None:
        for r in reports:
            print_report(r)

    emit(args, reports, text)
    return 0


def cmd_world_show(args: argparse.Namespace) -> int:
    from worldgraph.kg.summary import render_summary, summarize_graph

    with open_wm(args) as wm:
        graph = wm.world_graph(args.tenant, args.env)
    summary = summarize_graph(graph, None, args.max_items)
    data = {"meta": graph["meta"], "summary": summary, "rules": graph["rules"]}

    def text() -> None:
        meta = graph["meta"] or {}
        print(f"{args.env}: version {meta.get('graph_version', 0)}, updated {meta.get('updated_at', '-')}, "
              f"counts {meta.get('counts', {})}")
        print(f"last trigger: {meta.get('last_trigger_reason') or '-'}\n")
        print(render_summary(summary))
        current = [r for r in graph["rules"] if r.get("valid_to") is None]
        if current:
            print("\nrules (condition -> outcome, confidence, evidence count):")
            for r in sorted(current, key=lambda r: (-r.get("evidence_count", 0), r["id"])):
                print(f"  IF {r['condition']} THEN {r['outcome']}  ({r['confidence']:.2f}, "
                      f"{r.get('evidence_count', 0)})")

    emit(args, data, text)
    return 0


def cmd_world_retry(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        reports = [r.to_dict() for r in wm.retry_updates(args.tenant, args.env, args.stale_minutes * 60)]
    def text() -> None:
        print(f"retried {len(reports)} packet(s): {sum(1 for r in reports if r['ok'])} merged, "
              f"{sum(1 for r in reports if not r['ok'])} not merged")
        for r in reports:
            if not r["ok"]:
                print(f"  {r['scene_id']}: {r['error']}")

    emit(args, reports, text)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        path = wm.export(args.tenant, args.env, args.out)
    emit(args, {"path": str(path)}, lambda: print(path))
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from worldgraph.server.view_cmd import run_view

    return run_view(args)


def cmd_import(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        result = wm.import_snapshot(args.tenant, args.dir)
    emit(args, result, lambda: print(f"imported {result['env_name']}: {result['counts']}"))
    return 0


def cmd_cypher(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {}
    for p in args.param or []:
        key, _, value = p.partition("=")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    with open_wm(args) as wm:
        rows = wm.cypher(args.tenant, args.query, params)

    def text() -> None:
        if not rows:
            print("(no rows)")
            return
        headers = list(rows[0].keys())
        table([[short(json.dumps(r.get(h), default=str, ensure_ascii=False), 50) for h in headers] for r in rows],
               headers)

    emit(args, rows, text)
    return 0


def cmd_neo4j(args: argparse.Namespace) -> int:
    from worldgraph import neo4j_local

    if args.action == "start":
        uri = neo4j_local.start(port=args.port, data_dir=args.neo4j_data)
        emit(args, {"uri": uri}, lambda: print(f"Neo4j is running at {uri}\n  export NEO4J_URI={uri}"))
    elif args.action == "stop":
        neo4j_local.stop()
        emit(args, {"stopped": True}, lambda: print("stopped"))
    else:
        st = neo4j_local.status()
        emit(args, st, lambda: print("\n".join(f"{k:10} {v}" for k, v in st.items())))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from worldgraph.demo import run_demo

    return run_demo(args)


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="worldgraph", description="World model and long-term memory for LLM agents.")
    p.add_argument("--data", default=os.environ.get("WORLDGRAPH_DATA", "./data"), help="data directory (default ./data)")
    p.add_argument("--graph", default=os.environ.get("WORLDGRAPH_GRAPH", "embedded"), choices=["embedded", "neo4j"],
                   help="graph store: embedded (no server) or neo4j (NEO4J_URI)")
    p.add_argument("--tenant", default=os.environ.get("WORLDGRAPH_TENANT", "default"))
    p.add_argument("--read-only", dest="read_only", action="store_true",
                   help="open the data directory without writing anything (a backup, a snapshot); writes fail")
    json_parent = argparse.ArgumentParser(add_help=False)
    json_parent.add_argument("--json", action="store_true", help="machine-readable output")
    sub = p.add_subparsers(title="commands")

    def add(name: str, handler: Handler, help_: str, parent: Any = sub) -> argparse.ArgumentParser:
        sp = parent.add_parser(name, help=help_, description=help_, parents=[json_parent])
        sp.set_defaults(handler=handler)
        return sp

    sp = add("record", cmd_record, "record experiences from a JSON/JSONL file ('-' for stdin)")
    sp.add_argument("file")

    sp = add("record-conversation", cmd_record_conversation,
             "record a transcript turn by turn: {'session_id', 'turns': [...]} or bare turns with --session")
    sp.add_argument("file")
    sp.add_argument("--session", default=None, help="session id for a file of bare turns")

    sp = add("recall", cmd_recall, "recall past experiences by meaning")
    sp.add_argument("query")
    sp.add_argument("--role", default=None, help="agent role filter (e.g. Finance)")
    sp.add_argument("--limit", type=int, default=5)
    sp.add_argument("--canvas", action="append", help="canvas id filter (repeatable)")
    sp.add_argument("--agent-id", dest="agent_id", default=None)
    sp.add_argument("--since", default=None, help="ISO date/time")
    sp.add_argument("--until", default=None, help="ISO date/time")
    sp.add_argument("--now", default=None, help="ISO date/time that 'last week', 'yesterday' ... are read against")
    sp.add_argument("--success-only", action="store_true")
    sp.add_argument("--min-similarity", type=float, default=None)
    sp.add_argument("--min-feedback", dest="min_feedback_score", type=float, default=None,
                    help="min normalised average feedback in [0, 1]")
    sp.add_argument("--feedback-category", default=None)
    sp.add_argument("--canvas-context", action="store_true", help="include canvas snapshot and actions")
    sp.add_argument("--neighborhood", action="store_true",
                    help="include canvas, feedback, scenes, world nodes, rules and the adjacent episodes of the session")
    sp.add_argument("--vector-only", action="store_true", help="no full-text candidates")
    sp.add_argument("--explain", action="store_true", help="show how each score was made")

    sp = add("feedback", cmd_feedback, "rate an episode in [-1, 1]")
    sp.add_argument("episode_id")
    sp.add_argument("score", type=float)
    sp.add_argument("--notes")
    sp.add_argument("--category")
    sp.add_argument("--by", default=None)

    sp = add("episodes", cmd_episodes, "an agent's newest episodes")
    sp.add_argument("agent_id")
    sp.add_argument("--limit", type=int, default=30)

    sp = add("readiness", cmd_readiness, "graduation exam over an agent's last episodes")
    sp.add_argument("agent_id")
    sp.add_argument("--window", type=int, default=30)

    sp = add("reindex", cmd_reindex, "rebuild the LanceDB index (all tenants) from the graph store")
    sp.add_argument("--pending", action="store_true", help="only episodes whose indexing is pending or failed")

    add("stats", cmd_stats, "counts for a tenant")

    sp = add("demo", cmd_demo, "the main job: record sample experiences, rate, recall; grow and export a world graph")
    sp.add_argument("--out", default=None, help="export folder (default <data>/export)")
    sp.add_argument("--fresh", action="store_true", help="delete the demo tenant's data first")

    sp = add("run", cmd_run, "replay an agent log (one round per line) through observe_round")
    sp.add_argument("log")
    sp.add_argument("--env", required=True)
    sp.add_argument("--offline", action="store_true", default=None,
                    help="merge the deltas shipped in the log instead of calling the LLM "
                         "(the default when no OPENAI_API_KEY / OPENAI_BASE_URL is set)")

    group = sub.add_parser("delta", help="graph deltas").add_subparsers(title="delta commands")
    sp2 = add("apply", cmd_delta_apply, "merge a delta file (JSON or JSONL) without an LLM", parent=group)
    sp2.add_argument("file")
    sp2.add_argument("--env", required=True)

    group = sub.add_parser("world", help="the world graph").add_subparsers(title="world commands")
    sp2 = add("show", cmd_world_show, "summary and rules of one environment", parent=group)
    sp2.add_argument("--env", required=True)
    sp2.add_argument("--max-items", type=int, default=40)
    sp2 = add("retry", cmd_world_retry, "re-run pending and failed scene packets", parent=group)
    sp2.add_argument("--env", default=None)
    sp2.add_argument("--stale-minutes", type=float, default=10.0,
                     help="also re-run packets left 'running' this long by a process that died (default 10)")

    sp = add("export", cmd_export, "write the canonical snapshot of an environment")
    sp.add_argument("--env", required=True)
    sp.add_argument("--out", required=True)

    sp = add("view", cmd_view, "write one self-contained HTML page drawing an environment's world graph")
    sp.add_argument("--env", required=True)
    sp.add_argument("--out", default=None, help="the HTML file (default <env>.html)")

    sp = add("import", cmd_import, "load a snapshot folder written by export")
    sp.add_argument("dir")

    sp = add("cypher", cmd_cypher, "read-only, tenant-scoped Cypher (Neo4j store); $tenant_id is bound")
    sp.add_argument("query")
    sp.add_argument("--param", action="append", help="key=value (JSON values allowed)")

    sp = add("neo4j", cmd_neo4j, "manage the local Neo4j (Java + Maven, no Docker)")
    sp.add_argument("action", choices=["start", "stop", "status"])
    sp.add_argument("--port", type=int, default=7687)
    sp.add_argument("--neo4j-data", default=None, help="database directory")

    from worldgraph.server.commands import add_server_commands  # serve, mcp, keys

    add_server_commands(sub, add)
    from worldgraph.worker_cli import add_worker_command  # worker

    add_worker_command(add)
    return p


if __name__ == "__main__":
    raise SystemExit(main())
