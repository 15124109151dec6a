"""``worldgraph view --env E [--out FILE]``: write the world-graph page of one environment."""

from __future__ import annotations

import argparse
from pathlib import Path


def run_view(args: argparse.Namespace) -> int:
    from worldgraph.cli.common import open_wm, require_env
    from worldgraph.cli.console import emit
    from worldgraph.server.view import render_view

    with open_wm(args) as wm:
        require_env(wm, args.tenant, args.env)
        graph = wm.world_graph(args.tenant, args.env)
    out = Path(args.out or f"{args.env}.html")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_view(graph, f"{args.env} · worldgraph"), encoding="utf-8")
    current = sum(1 for n in graph["nodes"] if n.get("valid_to") is None)
    result = {"path": str(out), "env": args.env, "nodes": len(graph["nodes"]), "current_nodes": current,
              "edges": len(graph["edges"]), "rules": len(graph["rules"]), "bytes": out.stat().st_size}
    emit(args, result, lambda: print(
        f"{out}: {result['nodes']} nodes ({current} current), {result['edges']} edges, {result['rules']} rules; "
        "open it in a browser (works offline)"))
    return 0
