"""The world-graph page at size: how long headless Chromium takes to draw ``worldgraph view``'s page.

    python bench/bench_view.py --sizes 250,500,1000,2000 --repeats 3 --out bench/results/view.json

Per size N (world nodes, entities + states) it grows one environment through ``apply_delta`` on
the embedded store (rooms in areas, furniture, items, doors and lamps with states and transitions,
moved items and a rule per room; see ``grow_world``), renders the page with ``render_view`` and
opens it in one headless Chromium (driven over the DevTools pipe, ``tests/support/chromium.py``)
``--repeats`` times per layout. Columns (medians over the repeats):

- ``render``: ``render_view(graph, title)`` in Python (JSON + inlining); ``page``: its size.
- ``draw``: inside the page, from the first element added to the last rule listed: elements,
  layout, fit (which styles and measures every element), the rules panel (``data-layout-ms``;
  ``phases`` splits it).
- ``ready``: wall time from navigation until the page sets ``data-ready="1"`` (parse, scripts,
  draw); ``blank page ready`` is the same for an empty page, in the same run.
- ``cpu``: CPU time of the renderer's main thread by then (DevTools ``ThreadTime`` of the fresh
  renderer process each navigation gets): what the page costs, whatever else the machine runs.

Needs Debian's ``chromium`` (``apt-get install -y chromium``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.chromium import Browser, find_chromium  # noqa: E402
from worldgraph import WorldModel  # noqa: E402
from worldgraph.memory.embeddings import HashingEmbedder  # noqa: E402
from worldgraph.server.view import render_view  # noqa: E402

NODES_PER_ROOM = 17  # room, 3 furniture, 6 items, door, lamp; 3 door states, 2 lamp states
ROOMS_PER_AREA = 20
ROOMS_PER_DELTA = 15  # keeps a delta under max_delta_items (500)


def grow_world(wm: WorldModel, tenant: str, env: str, nodes: int) -> None:
    """About ``nodes`` world nodes, with nesting four deep, transitions and closed history."""
    rooms = max(1, round(nodes / NODES_PER_ROOM))
    for start in range(0, rooms, ROOMS_PER_DELTA):
        ks = range(start, min(rooms, start + ROOMS_PER_DELTA))
        wm.apply_delta(tenant, env, _first_visit(ks), scene=f"first visit of rooms {ks[0]}-{ks[-1]}")
        wm.apply_delta(tenant, env, _second_visit(ks), scene=f"second visit of rooms {ks[0]}-{ks[-1]}")
        wm.apply_delta(tenant, env, _third_visit(ks), scene=f"third visit of rooms {ks[0]}-{ks[-1]}")


def _first_visit(ks: range) -> dict[str, Any]:
    ents: list[dict[str, Any]] = []
    states: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    rules: list[dict[str, Any]] = []
    for k in ks:
        area = f"area:wing {k // ROOMS_PER_AREA}"
        if k % ROOMS_PER_AREA == 0 or k == ks[0]:
            ents.append({"ref": area, "name": f"wing {k // ROOMS_PER_AREA}", "type": "area", "confidence": 0.9})
        room, door, lamp = f"room:room {k}", f"door:door {k}", f"light:lamp {k}"
        ents += [{"ref": room, "name": f"room {k}", "type": "room", "evidence": f"You enter room {k}."},
                 {"ref": door, "name": f"door {k}", "type": "door", "confidence": 0.8},
                 {"ref": lamp, "name": f"lamp {k}", "type": "light", "confidence": 0.7}]
        edges += [{"relation": "containment", "src_ref": area, "dst_ref": room},
                  {"relation": "containment", "src_ref": room, "dst_ref": door},
                  {"relation": "containment", "src_ref": room, "dst_ref": lamp},
                  {"relation": "episodic", "src_ref": room, "dst_ref": "scene"}]
        for j in range(3):
            shelf = f"furniture:shelf {k}.{j}"
            ents.append({"ref": shelf, "name": f"shelf {k}.{j}", "type": "furniture"})
            edges.append({"relation": "containment", "src_ref": room, "dst_ref": shelf})
            for m in range(2):
                item = f"item:book {k}.{j}.{m}"
                ents.append({"ref": item, "name": f"book {k}.{j}.{m}", "type": "item",
                             "confidence": 0.5 + 0.1 * m + 0.1 * j})
                edges.append({"relation": "containment", "src_ref": shelf, "dst_ref": item})
        states += [{"ref": f"ds{k}", "name": f"door {k} locked", "type": "door_state", "entity_ref": door},
                   {"ref": f"ls{k}", "name": f"lamp {k} off", "type": "light_state", "entity_ref": lamp}]
        rules.append({"condition": f"door {k} is locked", "outcome": f"leaving room {k} north fails",
                      "linked_refs": [door, room], "confidence": 0.8, "evidence": "The door will not open."})
    return {"entities": ents, "states": states, "edges": edges, "rules": rules}


def _second_visit(ks: range) -> dict[str, Any]:
    states: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    for k in ks:
        states += [{"ref": f"du{k}", "name": f"door {k} unlocked", "type": "door_state", "entity_ref": f"door:door {k}"},
                   {"ref": f"lo{k}", "name": f"lamp {k} on", "type": "light_state", "entity_ref": f"light:lamp {k}"}]
        edges += [{"relation": "transition", "src_ref": f"door_state:door {k} locked", "dst_ref": f"du{k}",
                   "action": f"unlock door {k} with the key"},
                  {"relation": "transition", "src_ref": f"light_state:lamp {k} off", "dst_ref": f"lo{k}",
                   "action": f"turn on lamp {k}"},
                  {"relation": "containment", "src_ref": f"furniture:shelf {k}.1", "dst_ref": f"item:book {k}.0.0"}]
    return {"entities": [], "states": states, "edges": edges, "rules": []}


def _third_visit(ks: range) -> dict[str, Any]:
    states = [{"ref": f"do{k}", "name": f"door {k} open", "type": "door_state", "entity_ref": f"door:door {k}"}
              for k in ks]
    edges = [{"relation": "transition", "src_ref": f"door_state:door {k} unlocked", "dst_ref": f"do{k}",
              "action": f"open door {k}"} for k in ks]
    return {"entities": [], "states": states, "edges": edges, "rules": []}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="250,500,1000,2000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--layouts", default="auto", help="comma list of auto, fcose, pack")
    ap.add_argument("--screenshot", default=None, help="PNG of the largest page (auto layout)")
    ap.add_argument("--out", default=None, help="JSON results")
    args = ap.parse_args()
    chromium = find_chromium()
    if not chromium:
        raise SystemExit("chromium not found: apt-get install -y chromium")
    sizes = [int(s) for s in args.sizes.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="wg-bench-view-") as tmp, Browser(chromium, timeout=300) as browser:
        blank_page = Path(tmp) / "blank.html"
        blank_page.write_text("<!doctype html><title>blank</title><body data-ready=1>", encoding="utf-8")
        blank_runs = [_open_measured(browser, blank_page) for _ in range(args.repeats)]
        blank = {"ready_s": _median([r["wall"] for r in blank_runs]), "cpu_s": _median([r["cpu"] for r in blank_runs])}
        for size in sizes:
            with WorldModel.open(Path(tmp) / f"data{size}", embedder=HashingEmbedder(384)) as wm:
                grow_world(wm, "bench", "Big", size)
                graph = wm.world_graph("bench", "Big")
            renders = [_timed(lambda: render_view(graph, f"Big ({size})")) for _ in range(args.repeats)]
            page = Path(tmp) / f"view{size}.html"
            page.write_text(renders[0][1], encoding="utf-8")
            for layout in args.layouts.split(","):
                fragment = "" if layout == "auto" else f"layout={layout}"
                runs = [_open_measured(browser, page, fragment) for _ in range(args.repeats)]
                data = runs[-1]["data"]
                row = {"nodes": len(graph["nodes"]), "edges": len(graph["edges"]),
                       "drawn_nodes": int(data["nodeCount"]), "drawn_edges": int(data["edgeCount"]),
                       "layout": data["layout"] + ("" if layout == "auto" else f" (forced {layout})"),
                       "render_ms": _median([r[0] * 1000 for r in renders]),
                       "page_kb": len(renders[0][1].encode("utf-8")) / 1024,
                       "draw_ms": _median([float(r["data"]["layoutMs"]) for r in runs]),
                       "ready_s": _median([r["wall"] for r in runs]), "cpu_s": _median([r["cpu"] for r in runs]),
                       "blank": blank, "phases": data.get("phasesMs", "")}
                rows.append(row)
                print(_fmt(row), flush=True)
            if args.screenshot and size == max(sizes):
                browser.open(page)
                browser.screenshot(Path(args.screenshot))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0


def _open_measured(browser: Browser, page: Path, fragment: str = "") -> dict[str, Any]:
    """Wall time from navigation to the page's data-ready, and the CPU time of the renderer's main
    thread by then (DevTools ThreadTime; each navigation here gets a fresh renderer process, so
    this is the page's whole cost: parse, scripts, draw), whatever else the machine runs."""
    wall = browser.open(page, fragment)
    browser.call("Performance.enable", session=True)
    metrics = browser.call("Performance.getMetrics", session=True)["metrics"]
    return {"wall": wall, "cpu": float(next(m["value"] for m in metrics if m["name"] == "ThreadTime")),
            "data": browser.eval("Object.assign({}, document.body.dataset)")}


def _timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def _fmt(r: dict[str, Any]) -> str:
    return (f"nodes {r['nodes']:>5} edges {r['edges']:>5} | drawn {r['drawn_nodes']:>5} nodes {r['drawn_edges']:>5} "
            f"edges | {r['layout']:<28} | render {r['render_ms']:6.1f} ms | page {r['page_kb']:5.0f} KB | "
            f"draw {r['draw_ms']:6.0f} ms | ready {r['ready_s']:5.2f} s | cpu {r['cpu_s']:5.2f} s "
            f"| blank page: ready {r['blank']['ready_s']:.2f} s, cpu {r['blank']['cpu_s']:.2f} s | {r['phases']}")


if __name__ == "__main__":
    raise SystemExit(main())
