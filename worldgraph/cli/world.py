"""World-graph commands: run, delta apply, world show / retry, export, view, import, cypher,
search-world and context."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from worldgraph.cli.common import check_input_file, open_wm, read_json_items, require_env
from worldgraph.cli.console import emit, print_report, progress_bar, short, table

Add = Callable[..., argparse.ArgumentParser]


def add_world_commands(sub: Any, add: Add) -> None:
    sp = add("run", cmd_run, "replay an agent log (one round per line) through observe_round")
    sp.add_argument("log", help="JSON Lines, one agent round a line")
    sp.add_argument("--env", required=True, help="the environment whose world graph the rounds grow")
    sp.add_argument("--offline", action="store_true", default=None,
                    help="merge the deltas shipped in the log instead of calling the LLM "
                         "(the default when no OPENAI_API_KEY / OPENAI_BASE_URL is set)")

    group = sub.add_parser("delta", help="graph deltas").add_subparsers(title="delta commands")
    sp = add("apply", cmd_delta_apply, "merge a delta file (JSON or JSONL) without an LLM", parent=group)
    sp.add_argument("file", help="one delta (JSON) or several (a JSON array or JSON Lines); '-' reads stdin")
    sp.add_argument("--env", required=True, help="the environment to merge into")

    group = sub.add_parser("world", help="the world graph").add_subparsers(title="world commands")
    sp = add("show", cmd_world_show, "summary and rules of one environment", parent=group)
    sp.add_argument("--env", required=True, help="the environment to show")
    sp.add_argument("--max-items", type=int, default=40, help="how many nodes and facts at most (default 40)")
    sp = add("retry", cmd_world_retry, "re-run pending and failed scene packets", parent=group)
    sp.add_argument("--env", default=None, help="only this environment's packets (default all)")
    sp.add_argument("--stale-minutes", type=float, default=10.0,
                    help="also re-run packets left 'running' this long by a process that died (default 10)")

    sp = add("export", cmd_export, "write the canonical snapshot of an environment")
    sp.add_argument("--env", required=True, help="the environment to export")
    sp.add_argument("--out", required=True,
                    help="folder to write under: the files go to OUT/<tenant>/<app>/world_model_graph/<env>/")

    sp = add("view", cmd_view, "write one self-contained HTML page drawing an environment's world graph")
    sp.add_argument("--env", required=True, help="the environment to draw")
    sp.add_argument("--out", default=None, help="the HTML file (default <env>.html)")

    sp = add("import", cmd_import, "load a snapshot written by export (replaces that environment's graph)")
    sp.add_argument("dir", help="the folder given to `export --out`, or the snapshot folder itself")
    sp.add_argument("--env", default=None, help="which environment, when DIR holds several snapshots")

    sp = add("context", cmd_context, "one prompt-ready block of what the agent knows for QUERY: current facts and "
             "rules first, then past episodes, every line citing its id")
    sp.add_argument("query", help="what the agent is about to do, or asks, in words")
    sp.add_argument("--role", default=None, help="only past episodes of this agent role (e.g. Finance)")
    sp.add_argument("--env", default=None, help="only this environment's facts and rules (default every one)")
    sp.add_argument("--max-tokens", dest="max_tokens", type=int, default=1500,
                    help="the block's budget in tokens (default 1500)")

    sp = add("search-world", cmd_search_world, "search the world model by meaning: entities, states, facts and "
             "rules, each current or closed, with the facts around it")
    sp.add_argument("query", help="what to look for, in words (e.g. 'where is the brass key?')")
    sp.add_argument("--env", default=None, help="only this environment (default every one)")
    sp.add_argument("-k", "--limit", dest="k", type=int, default=10, help="how many records at most (default 10)")
    sp.add_argument("--as-of", dest="as_of", default=None,
                    help="a past moment (ISO 8601, e.g. 2026-12-05T08:00:00Z): what held then ranks first")

    sp = add("cypher", cmd_cypher, "read-only, tenant-scoped Cypher (either store); $tenant_id is bound")
    sp.add_argument("query", help="the Cypher query ($tenant_id is bound to --tenant)")
    sp.add_argument("--param", action="append", help="key=value (JSON values allowed; repeatable)")


def cmd_run(args: argparse.Namespace) -> int:
    from worldgraph.cli.replay import quiet_extraction_log, reason_lines, replay_log

    quiet_extraction_log(args.verbose)
    check_input_file(args.log)
    with open_wm(args, create=True) as wm:
        summary = replay_log(wm, args.tenant, args.env, args.log, use_shipped_deltas=args.offline,
                             progress=progress_bar("rounds", not args.json))
    emit(args, summary, lambda: print("\n".join([
        f"{summary['rounds']} rounds, {summary['flagged']} flagged, {summary['merged']} merged, "
        f"{summary['pending']} pending, {summary['failed']} failed", *reason_lines(summary)])))
    return 0


def cmd_delta_apply(args: argparse.Namespace) -> int:
    items = list(read_json_items(args.file))
    with open_wm(args, create=True) as wm:
        reports = []
        show = progress_bar("deltas", not args.json and len(items) > 20)
        for n, (line, delta) in enumerate(items, 1):
            reason = f"delta apply {args.file}" + (f":{line}" if line > 1 else "")
            reports.append(wm.apply_delta(args.tenant, args.env, delta, scene=reason).to_dict())
            show(n, len(items))

    def text() -> None:
        for r in reports:
            print_report(r)

    emit(args, reports, text)
    return 0


def cmd_world_show(args: argparse.Namespace) -> int:
    from worldgraph.world.summary import render_summary, summarize_graph

    with open_wm(args) as wm:
        require_env(wm, args.tenant, args.env)
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
        if args.env is not None:
            require_env(wm, args.tenant, args.env)
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
        require_env(wm, args.tenant, args.env)
        path = wm.export(args.tenant, args.env, args.out, progress=progress_bar("export", not args.json))
    emit(args, {"path": str(path)}, lambda: print(f"exported {args.env} of tenant {args.tenant!r} to {path}"))
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from worldgraph.cli.view import run_view

    return run_view(args)


def cmd_import(args: argparse.Namespace) -> int:
    with open_wm(args, create=True) as wm:
        result = wm.import_snapshot(args.tenant, args.dir, args.env, progress=progress_bar("import", not args.json))

    def text() -> None:
        c = result["counts"]
        print(f"imported {result['env_name']} into tenant {result['tenant_id']!r}: {c['nodes']} nodes, "
              f"{c['edges']} edges, {c['rules']} rules, {c['scenes']} scenes")

    emit(args, result, text)
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


def cmd_context(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        ctx = wm.context(args.tenant, args.query, args.role, args.env, args.max_tokens)
    emit(args, ctx.model_dump(), lambda: print(ctx.text))
    return 0


def cmd_search_world(args: argparse.Namespace) -> int:
    from worldgraph.server.hits_text import hits_text

    with open_wm(args) as wm:
        hits = wm.search_world(args.tenant, args.query, args.env, args.k, args.as_of)
    emit(args, [h.model_dump() for h in hits], lambda: print(hits_text(hits, args.query)))
    return 0
