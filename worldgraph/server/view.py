"""A picture of one environment's world graph: one self-contained HTML page
(``worldgraph view``, ``GET /v1/envs/{env}/view``).

The page inlines cytoscape.js and the fCoSE layout (vendored unchanged from npm in
``view_assets/``; see its NOTICE.md and ``scripts/vendor_view_js.sh``), its own script and style,
and the graph as JSON, so it opens from a file with no network. What it draws is described in
``view_assets/view.js`` (the layout of big graphs is in ``view_pack.js``).

Names, rules and evidence are text an LLM extracted from an environment someone else may
control. Three layers keep that text text: the JSON is escaped so nothing in it can end its
``<script>`` element (``<``, ``>``, ``&`` and the JS line separators become ``\\uXXXX``); the page
writes data only through ``textContent`` and canvas labels, never as HTML; and a
Content-Security-Policy runs only the page's own scripts (by hash) and allows no network at all.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
from functools import cache, lru_cache
from importlib import resources
from typing import Any

# Load order matters: fCoSE needs coseBase, which needs layoutBase; fCoSE registers itself
# with the global cytoscape it finds.
VENDORED = ("cytoscape.min.js", "layout-base.js", "cose-base.js", "cytoscape-fcose.js")
APP_SCRIPTS = ("view_pack.js", "view.js")
APP_STYLE = "view.css"

EVIDENCE_SHOWN = 3  # evidence quotes kept per record (the page shows the count of all of them)
TEXT_MAX = 300  # characters kept of one quote, trigger reason or attribute value
ATTRIBUTES_MAX = 24  # attribute keys kept per node


def render_view(graph: dict[str, Any], title: str) -> str:
    """One HTML page drawing ``graph`` (what ``WorldModel.world_graph`` returns) under ``title``."""
    scripts, _ = _scripts()
    css = _asset(APP_STYLE)
    csp = view_csp()
    safe_title = html.escape(title, quote=True)
    parts = [
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n",
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">\n",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
        "<meta name=\"generator\" content=\"worldgraph\">\n",
        f"<title>{safe_title}</title>\n<style>{css}</style>\n</head>\n<body>\n",
        _BODY.replace("{title}", safe_title),
        f"<script type=\"application/json\" id=\"wg-data\">{script_json(page_data(graph))}</script>\n",
        *(f"<script>{text}</script>\n" for text in scripts),
        "</body></html>\n",
    ]
    return "".join(parts)


def view_csp() -> str:
    """The page's Content-Security-Policy: only its own inline scripts (by hash), inline style,
    data: images; no network, no base URL, no form. ``render_view`` puts it in a ``<meta>`` (so a
    saved file keeps it); the server also sends it as a header (adding ``frame-ancestors``,
    which a ``<meta>`` policy cannot carry)."""
    _, hashes = _scripts()
    return ("default-src 'none'; " + "script-src " + " ".join(f"'{h}'" for h in hashes) + "; "
            "style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'")


def page_data(graph: dict[str, Any]) -> dict[str, Any]:
    """The part of the graph the page uses: every node, edge, rule and scene, with long text cut."""
    return {
        "nodes": [{
            "id": n["id"], "kind": n.get("kind"), "type": n.get("type") or "", "name": n.get("name") or "",
            "attributes": _clean(n.get("attributes") or {}), "confidence": _number(n.get("confidence")),
            **_evidence(n), "scenes": len(n.get("source_scenes") or []), "entity_id": n.get("entity_id"),
            "valid_from": n.get("valid_from"), "valid_to": n.get("valid_to"),
        } for n in graph.get("nodes") or []],
        "edges": [{
            "id": e["id"], "relation": e.get("relation"), "src_id": e.get("src_id"), "dst_id": e.get("dst_id"),
            "action": _text(e.get("action")), "confidence": _number(e.get("confidence")), **_evidence(e),
            # the scenes an edge was learned in: the page labels a move with its scene's action
            "scenes": [str(x) for x in (e.get("source_scenes") or [])[:EVIDENCE_SHOWN]],
            "valid_from": e.get("valid_from"), "valid_to": e.get("valid_to"),
            # a fact of any kind: what it is (the page labels the arrow with it)
            **({"predicate": _text(e.get("predicate")), "single_valued": bool(e.get("single_valued"))}
               if e.get("relation") == "fact" else {}),
        } for e in graph.get("edges") or []],
        "rules": [{
            "id": r["id"], "condition": _text(r.get("condition")), "outcome": _text(r.get("outcome")),
            "linked_node_ids": list(r.get("linked_node_ids") or []), "confidence": _number(r.get("confidence")),
            **_evidence(r), "valid_to": r.get("valid_to"),
        } for r in graph.get("rules") or []],
        "scenes": [{
            "id": s["id"], "status": s.get("status"), "round": _number(s.get("current_round")),
            "action": _text(s.get("action")), "trigger_reason": _text(s.get("trigger_reason")),
        } for s in graph.get("scenes") or []],
        "meta": _clean(graph.get("meta") or {}),
    }


def script_json(data: Any) -> str:
    """JSON that is safe as the content of a ``<script>`` element: no ``<``, ``>`` or ``&``
    anywhere (so no ``</script>`` or ``<!--``), and no U+2028 / U+2029."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    for raw, escaped in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return text


# ---------------------------------------------------------------------- assets
@cache
def _asset(name: str) -> str:
    text = resources.files("worldgraph.server").joinpath("view_assets").joinpath(name).read_text(encoding="utf-8")
    # The HTML parser turns CR LF into LF before the browser hashes a script; hash what it will see.
    return text.replace("\r\n", "\n").replace("\r", "\n")


@lru_cache(maxsize=1)
def _scripts() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The inline scripts in page order, and their CSP hashes."""
    names = (*VENDORED, *APP_SCRIPTS)
    texts = tuple(_asset(name) for name in names)
    for name, text in zip(names, texts):
        lowered = text.lower()
        if "</script" in lowered or "<!--" in lowered:  # would end or confuse the <script> element
            raise RuntimeError(f"view_assets/{name} cannot be inlined: it contains '</script' or '<!--'")
    hashes = tuple("sha256-" + base64.b64encode(hashlib.sha256(t.encode("utf-8")).digest()).decode("ascii")
                   for t in texts)
    return texts, hashes


# ---------------------------------------------------------------------- cleaning
def _evidence(record: dict[str, Any]) -> dict[str, Any]:
    quotes = [q for q in record.get("evidence") or [] if isinstance(q, str)]
    count = record.get("evidence_count")
    return {"evidence": [_text(q) for q in quotes[:EVIDENCE_SHOWN]],
            "evidence_count": int(count) if isinstance(count, (int, float)) and math.isfinite(count) else len(quotes)}


def _text(value: Any) -> str | None:
    if value is None:
        return None
    s = str(value)
    return s if len(s) <= TEXT_MAX else s[: TEXT_MAX - 1] + "…"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def _clean(value: Any, depth: int = 0) -> Any:
    """JSON-safe and bounded: long strings cut, NaN/inf as text, deep or wide structures trimmed."""
    if isinstance(value, dict):
        items = list(value.items())[:ATTRIBUTES_MAX]
        return {str(k): (_clean(v, depth + 1) if depth < 3 else _text(json.dumps(v, default=str)))
                for k, v in items}
    if isinstance(value, (list, tuple)):
        return [_clean(v, depth + 1) if depth < 3 else _text(v) for v in list(value)[:ATTRIBUTES_MAX]]
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return _text(value)


# The page's static frame; view.js fills it. Only {title} is substituted (escaped).
_BODY = """<header id="bar">
  <h1>{title}</h1>
  <span id="meta"></span>
  <span class="spacer"></span>
  <label title="closed records: facts that stopped being true (valid_to set)"><input type="checkbox" id="t-history">
    closed history</label>
  <label title="the scenes each fact was learned in (episodic edges)"><input type="checkbox" id="t-scenes"> scenes</label>
  <label title="places connected: something moved between them, or an exit names the other"><input type="checkbox"
    id="t-map"> map</label>
  <input type="search" id="find" placeholder="find a node" list="names" aria-label="find a node by name">
  <datalist id="names"></datalist>
  <button id="fit" type="button">fit</button>
</header>
<main>
  <div id="cy" role="img" aria-label="the world graph"></div>
  <aside id="side">
    <section id="details" hidden></section>
    <section id="legend"><h2>Legend</h2></section>
    <section id="rules-box"><h2>Rules <span id="rule-count"></span></h2>
      <p class="hint">hover a node to see its rules, a rule to see its nodes</p>
      <ol id="rules"></ol></section>
  </aside>
</main>
<footer id="status"></footer>
<div id="tip" hidden></div>
"""
