"""Placeholder until the "view" branch merges: its render_view (the drawn graph, vendored JS)
replaces this module whole. Same signature: a graph from ``WorldModel.world_graph`` in, one
self-contained HTML page out."""

from __future__ import annotations

from html import escape
from typing import Any


def render_view(graph: dict[str, Any], title: str) -> str:
    """A plain HTML page listing the graph's nodes and edges."""
    names = {n["id"]: n.get("name", n["id"]) for n in graph.get("nodes", [])}
    nodes = "".join(
        f"<tr><td>{escape(str(n.get('kind', '')))}</td><td>{escape(str(n.get('type', '')))}</td>"
        f"<td>{escape(str(n.get('name', '')))}</td><td>{'closed' if n.get('valid_to') else 'current'}</td></tr>"
        for n in graph.get("nodes", []))
    edges = "".join(
        f"<tr><td>{escape(str(names.get(e.get('src_id'), e.get('src_id'))))}</td>"
        f"<td>{escape(str(e.get('relation', '')))}{escape(' (' + e['action'] + ')') if e.get('action') else ''}</td>"
        f"<td>{escape(str(names.get(e.get('dst_id'), e.get('dst_id'))))}</td>"
        f"<td>{'closed' if e.get('valid_to') else 'current'}</td></tr>"
        for e in graph.get("edges", []))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title></head><body>"
            f"<h1>{escape(title)}</h1><h2>Nodes</h2><table><tr><th>kind</th><th>type</th><th>name</th><th></th></tr>"
            f"{nodes}</table><h2>Edges</h2><table><tr><th>from</th><th>relation</th><th>to</th><th></th></tr>"
            f"{edges}</table></body></html>")
