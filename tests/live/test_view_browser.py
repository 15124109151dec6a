"""What headless Chromium draws from the world-graph page (``render_view``) for a real graph (the
text adventure the demo replays; its fixtures are test_view.py's).

These tests need Debian's ``chromium``; without it they skip, except under CI=true, where they
fail (``.ci/run`` installs it)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.chromium import Browser, find_chromium, png_stats
from tests.unit.server.test_view import (  # noqa: F401 - adventure and adventure_data are fixtures
    HOSTILE_NAME,
    HOSTILE_RULE,
    adventure,
    adventure_data,
    drawn_by_default,
    hostile_graph,
)
from worldgraph.server.view import render_view


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = find_chromium()
    if not chromium:
        message = "chromium not found: apt-get install -y chromium (scripts/test.sh installs it when run as root)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    with Browser(chromium, size=(1400, 900)) as b:
        yield b


def _page(tmp_path: Path, graph: dict[str, Any], title: str = "Cottage") -> Path:
    path = tmp_path / "view.html"
    path.write_text(render_view(graph, title), encoding="utf-8")
    return path


def _dataset(b: Browser) -> dict[str, str]:
    return dict(b.eval("Object.assign({}, document.body.dataset)"))


def _screen_position(b: Browser, node_id: str) -> tuple[float, float]:
    # a leaf: its centre; a box: just inside its top-left corner (its centre may be a child)
    x, y = b.eval(f"""(() => {{
        const n = worldgraphView.cy.getElementById({json.dumps(node_id)});
        const bb = n.renderedBoundingBox({{includeLabels: false, includeOverlays: false}});
        const p = n.isParent() ? {{x: bb.x1 + 8, y: bb.y1 + 8}} : n.renderedPosition();
        const box = document.getElementById('cy').getBoundingClientRect();
        return [p.x + box.left, p.y + box.top]; }})()""")
    return float(x), float(y)


@pytest.mark.browser
def test_drawn_nodes_match_the_graph(browser: Browser, adventure: dict[str, Any], tmp_path: Path) -> None:
    page = _page(tmp_path, adventure)
    browser.open(page)
    drawn = _dataset(browser)
    default = drawn_by_default(adventure)
    assert len(default) < len(adventure["nodes"]), "'sofa dusty' is history"
    assert int(drawn["nodeCount"]) == len(default) == 19
    assert set(browser.eval("worldgraphView.cy.nodes('.entity, .state').map(n => n.id())")) == default
    transitions = [e for e in adventure["edges"] if e["relation"] == "transition" and e["valid_to"] is None]
    assert browser.eval("worldgraphView.cy.edges('.transition').map(e => e.data('label'))") \
        and sorted(browser.eval("worldgraphView.cy.edges('.transition').map(e => e.data('label'))")) \
        == sorted(e["action"] for e in transitions)
    # nesting: the brass key sits in the workbench's box, which sits in the shed's box
    key = next(n["id"] for n in adventure["nodes"] if n["name"] == "brass key")
    assert browser.eval(f"worldgraphView.cy.getElementById('{key}').ancestors().map(n => n.data('label'))") \
        == ["workbench", "shed", "garden"]

    # the closed-history toggle draws every node, as the graph's meta counts them
    browser.eval("document.getElementById('t-history').click()")
    assert int(_dataset(browser)["nodeCount"]) == len(adventure["nodes"]) == adventure["meta"]["counts"]["nodes"]
    closed_containment = sum(1 for e in adventure["edges"] if e["relation"] == "containment" and e["valid_to"])
    assert browser.eval("worldgraphView.cy.edges('.containment.closed').length") == closed_containment
    browser.eval("document.getElementById('t-scenes').click()")
    assert int(_dataset(browser)["sceneCount"]) == len(
        {e["dst_id"] for e in adventure["edges"] if e["relation"] == "episodic"})
    assert int(_dataset(browser)["nodeCount"]) == len(adventure["nodes"])  # scenes are not world nodes
    assert not [c for c in browser.console if c.startswith("exception")], browser.console


@pytest.mark.browser
def test_packed_layout_keeps_nesting_without_overlaps(browser: Browser, adventure: dict[str, Any],
                                                     tmp_path: Path) -> None:
    """The layout big graphs get (forced here on the small one): same nodes, same nesting, and no
    two siblings (boxes or leaves) overlap."""
    browser.open(_page(tmp_path, adventure), fragment="layout=pack")
    assert _dataset(browser)["layout"] == "packed boxes"
    assert int(_dataset(browser)["nodeCount"]) == len(drawn_by_default(adventure))
    overlaps = browser.eval("""(() => {
        const cy = worldgraphView.cy, bad = [];
        const groups = [cy.nodes().orphans(), ...cy.nodes().filter(n => n.isParent()).map(n => n.children())];
        for (const g of groups) {
          const boxes = g.map(n => [n.id(), n.boundingBox({includeLabels: false})]);
          for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
            const [a, b] = [boxes[i][1], boxes[j][1]];
            if (a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2) bad.push([boxes[i][0], boxes[j][0]]);
          }
        }
        return bad; })()""")
    assert overlaps == []
    key = next(n["id"] for n in adventure["nodes"] if n["name"] == "brass key")
    assert browser.eval(f"worldgraphView.cy.getElementById('{key}').ancestors().map(n => n.data('label'))") \
        == ["workbench", "shed", "garden"]


@pytest.mark.browser
def test_hovering_a_node_shows_its_rules(browser: Browser, adventure: dict[str, Any], tmp_path: Path) -> None:
    browser.open(_page(tmp_path, adventure))
    lamp = next(n["id"] for n in adventure["nodes"] if n["name"] == "lamp")
    rules = [r for r in adventure["rules"] if lamp in r["linked_node_ids"] and r["valid_to"] is None]
    assert len(rules) >= 2
    browser.mouse_move(*_screen_position(browser, lamp))
    tip = browser.eval("document.getElementById('tip').hidden ? '' : document.getElementById('tip').textContent")
    assert tip.startswith("lamp") and all(f"IF {r['condition']} THEN {r['outcome']}" in tip for r in rules)
    lit = browser.eval("[...document.querySelectorAll('#rules li.on .cond')].map(e => e.textContent)")
    assert sorted(lit) == sorted("IF" + r["condition"] for r in rules)


@pytest.mark.browser
def test_screenshot_is_a_picture(browser: Browser, adventure: dict[str, Any], tmp_path: Path) -> None:
    browser.open(_page(tmp_path, adventure))
    full = browser.screenshot(tmp_path / "view.png")
    assert full.read_bytes()[16:24] == (1400).to_bytes(4, "big") + (900).to_bytes(4, "big")  # PNG IHDR size
    # The drawing area, at half scale (a pure-Python PNG reader is slow on a full screen).
    left, top, width, height = browser.eval("(() => { const r = document.getElementById('cy')"
                                            ".getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()")
    shot = browser.screenshot(tmp_path / "graph.png", clip=(left, top, width, height), scale=0.5)
    stats = png_stats(shot)
    assert stats["non_white"] > 0.03 * stats["width"] * stats["height"], "the graph area is (nearly) blank"
    # state ellipses (amber) and several entity colours, not one tint
    amber = sum(n for px, n in stats["colours"].items() if px[0] > 230 and 150 < px[1] < 215 and px[2] < 110)
    assert amber > 50, "no state drawn"
    assert len(stats["colours"]) > 100


@pytest.mark.browser
def test_hostile_names_do_not_run(browser: Browser, adventure: dict[str, Any], tmp_path: Path) -> None:
    graph = hostile_graph(adventure)
    key = next(n["id"] for n in graph["nodes"] if n["name"] == HOSTILE_NAME)
    browser.open(_page(tmp_path, graph, title=HOSTILE_NAME), fragment=f"node={key}")
    assert browser.eval("window.pwned === undefined && document.body.dataset.pwned === undefined")
    assert browser.eval("document.querySelectorAll('img, #details script, #rules script').length") == 0
    assert int(_dataset(browser)["nodeCount"]) == len(drawn_by_default(graph))
    assert browser.eval("document.querySelector('#details h3').textContent") == HOSTILE_NAME
    assert browser.eval("document.title") == HOSTILE_NAME
    cond = browser.eval("[...document.querySelectorAll('#rules .cond')].map(e => e.textContent)")
    assert "IF" + HOSTILE_RULE in cond
    browser.mouse_move(*_screen_position(browser, key))
    assert browser.eval("document.getElementById('tip').textContent").startswith(HOSTILE_NAME)
    assert browser.eval("document.body.dataset.pwned === undefined")


@pytest.mark.browser
def test_empty_and_unknown_shapes_still_draw(browser: Browser, tmp_path: Path) -> None:
    browser.open(_page(tmp_path, {"nodes": [], "edges": [], "rules": [], "scenes": [], "meta": None}))
    assert _dataset(browser)["nodeCount"] == "0"
    # an edge to a node the graph does not hold, a containment cycle, a rule linked to nothing
    nodes = [{"id": i, "kind": "entity", "type": "box", "name": i, "valid_to": None} for i in ("a", "b")]
    edges = [{"id": "e1", "relation": "containment", "src_id": "a", "dst_id": "b", "valid_to": None},
             {"id": "e2", "relation": "containment", "src_id": "b", "dst_id": "a", "valid_to": None},
             {"id": "e3", "relation": "transition", "src_id": "a", "dst_id": "ghost", "valid_to": None}]
    rules = [{"id": "r1", "condition": "c", "outcome": "o", "linked_node_ids": ["ghost"]}]
    browser.open(_page(tmp_path, {"nodes": nodes, "edges": edges, "rules": rules, "scenes": [], "meta": None}))
    assert _dataset(browser)["nodeCount"] == "2"
    assert browser.eval("worldgraphView.cy.nodes().filter(n => n.isParent()).length") == 1
    assert not [c for c in browser.console if c.startswith("exception")], browser.console


# ---------------------------------------------------------------------- the map, routing, history
def _moves(graph: dict[str, Any]) -> set[frozenset[str]]:
    """Pairs of rooms something was in one after the other (the map layer's rule, from the data)."""
    rooms = {n["id"] for n in graph["nodes"] if n.get("type") == "room"}
    by_child: dict[str, list[dict[str, Any]]] = {}
    for e in graph["edges"]:
        if e["relation"] == "containment":
            by_child.setdefault(e["dst_id"], []).append(e)
    pairs = set()
    for edges in by_child.values():
        edges.sort(key=lambda e: str(e.get("valid_from")))
        for a, b in zip(edges, edges[1:]):
            if a["valid_to"] and a["src_id"] in rooms and b["src_id"] in rooms and a["src_id"] != b["src_id"]:
                pairs.add(frozenset((a["src_id"], b["src_id"])))
    return pairs


_CROSSINGS = """(() => {
    const cy = worldgraphView.cy, bad = [];
    const leaves = cy.nodes().filter(n => !n.isParent());
    const cross = (p, q, b) => {  // segment p-q through box b (shrunk by 2 px)
      const x1 = b.x1 + 2, x2 = b.x2 - 2, y1 = b.y1 + 2, y2 = b.y2 - 2;
      for (let i = 0; i <= 200; i++) {
        const x = p.x + (q.x - p.x) * i / 200, y = p.y + (q.y - p.y) * i / 200;
        if (x > x1 && x < x2 && y > y1 && y < y2) return true;
      }
      return false;
    };
    cy.edges().not('.episodic').forEach(e => {
      const ends = e.source().union(e.target());
      const pts = [e.sourceEndpoint(), ...(e.segmentPoints() || []), e.targetEndpoint()];
      if (!e.segmentPoints() && e.controlPoints()) return;  // a curved bundle: not a straight line
      leaves.forEach(n => {
        if (ends.contains(n) || n.ancestors().intersection(ends).nonempty()) return;
        const b = n.boundingBox({includeLabels: false, includeOverlays: false});
        for (let i = 0; i + 1 < pts.length; i++) if (cross(pts[i], pts[i + 1], b)) { bad.push([e.id(), n.id()]); break; }
      });
    });
    return bad; })()"""


@pytest.mark.browser
def test_map_layer_connects_the_rooms_moved_between(browser: Browser, adventure: dict[str, Any],
                                                    tmp_path: Path) -> None:
    browser.open(_page(tmp_path, adventure))
    expected = _moves(adventure)
    names = {n["id"]: n["name"] for n in adventure["nodes"]}
    assert {frozenset(names[i] for i in p) for p in expected} >= {
        frozenset(("kitchen", "hallway")), frozenset(("hallway", "living room"))}
    drawn = browser.eval("worldgraphView.cy.edges('.map').map(e => [e.source().id(), e.target().id(), e.data('label')])")
    assert {frozenset(d[:2]) for d in drawn} == expected
    labels = {frozenset(names[i] for i in d[:2]): d[2] for d in drawn}
    assert "go east" in labels[frozenset(("hallway", "living room"))].split(" / ")  # how it was reached
    assert int(_dataset(browser)["mapCount"]) == len(expected)
    browser.eval("document.getElementById('t-map').click()")
    assert browser.eval("worldgraphView.cy.edges('.map').length") == 0
    # exits that name a room connect it too
    g = json.loads(json.dumps(adventure))
    garden = next(n for n in g["nodes"] if n["name"] == "garden")
    garden["attributes"]["exits"] = {"north": "Kitchen"}
    browser.open(_page(tmp_path, g))
    got = browser.eval("worldgraphView.cy.edges('.map').map(e => [e.source().data('label'), e.target().data('label'),"
                       " e.data('label')])")
    assert any({a, b} == {"garden", "kitchen"} and label == "north" for a, b, label in got), got


@pytest.mark.browser
@pytest.mark.parametrize("fragment", ["", "layout=pack", ""])
def test_arrows_go_around_the_nodes_they_do_not_join(browser: Browser, adventure: dict[str, Any],
                                                    tmp_path: Path, fragment: str) -> None:
    browser.open(_page(tmp_path, adventure), fragment=fragment)
    assert browser.eval(_CROSSINGS) == []
    # a grid of states: the transition between opposite corners crosses the middle unless bent
    states = [{"id": f"s{i}", "kind": "state", "type": "door_state", "name": f"state {i}", "entity_id": "door",
               "valid_to": None} for i in range(9)]
    nodes = [{"id": "door", "kind": "entity", "type": "door", "name": "door", "valid_to": None}, *states]
    edges = [{"id": "t1", "relation": "transition", "src_id": "s0", "dst_id": "s8", "action": "jump",
              "valid_to": None}]
    browser.open(_page(tmp_path, {"nodes": nodes, "edges": edges, "rules": [], "scenes": [], "meta": None}),
                 fragment="layout=pack")
    straight = browser.eval("""(() => { const cy = worldgraphView.cy, e = cy.getElementById('e:t1');
        const p = e.source().position(), q = e.target().position();
        return cy.nodes('.state').not('#s0, #s8').filter(n => { const b = n.boundingBox();
          return [...Array(101).keys()].some(i => { const x = p.x + (q.x - p.x) * i / 100, y = p.y + (q.y - p.y) * i / 100;
            return x > b.x1 && x < b.x2 && y > b.y1 && y < b.y2; }); }).length; })()""")
    assert straight >= 1, "the straight line must cross a state for this check to mean anything"
    assert int(_dataset(browser)["routedCount"]) >= 1 and browser.eval(_CROSSINGS) == []


@pytest.mark.browser
def test_details_show_where_a_node_was_and_rules_without_evidence_show_no_count(
        browser: Browser, adventure: dict[str, Any], tmp_path: Path) -> None:
    g = json.loads(json.dumps(adventure))
    for r in g["rules"]:
        r["evidence"], r["evidence_count"] = [], 0
    player = next(n["id"] for n in g["nodes"] if n["name"] == "player")
    browser.open(_page(tmp_path, g), fragment=f"node={player}")
    where = browser.eval("[...document.querySelectorAll('#details ol.where li')].map(li => li.textContent)")
    visited = [w.split(" \u00b7 ")[0] for w in where]
    assert visited[0] == "kitchen" and visited[-1] == "shed" and "living room" in visited, where
    assert "\u2013 now" in where[-1] and "(go east)" in where[-1], where
    rules_text = browser.eval("document.getElementById('rules').textContent")
    assert "evidence 0" not in rules_text and "confidence" in rules_text


@pytest.mark.browser
def test_facts_are_arrows_labelled_with_their_predicate(browser: Browser, adventure: dict[str, Any],
                                                        tmp_path: Path) -> None:
    g = json.loads(json.dumps(adventure))
    ids = {n["name"]: n["id"] for n in g["nodes"]}
    base = {"confidence": 0.8, "evidence": ["the key fits"], "evidence_count": 1, "source_scenes": [],
            "valid_from": "2026-01-01T00:00:00.000000+00:00", "relation": "fact", "action": None}
    g["edges"] += [
        dict(base, id="f-now", src_id=ids["brass key"], dst_id=ids["front door"], predicate="unlocks",
             single_valued=False, valid_to=None),
        dict(base, id="f-old", src_id=ids["player"], dst_id=ids["front door"], predicate="stands_at",
             single_valued=True, valid_to="2026-01-02T00:00:00.000000+00:00")]
    browser.open(_page(tmp_path, g), fragment=f"node={ids['brass key']}")
    assert browser.eval("worldgraphView.cy.edges('.fact').map(e => e.data('label'))") == ["unlocks"]
    assert browser.eval("[...document.querySelectorAll('#details ul.facts li')].map(li => li.textContent)") \
        == ["brass key unlocks front door"]
    browser.eval("document.getElementById('t-history').click()")
    assert sorted(browser.eval("worldgraphView.cy.edges('.fact').map(e => e.data('label'))")) \
        == ["stands_at \u2460", "unlocks"]
    legend = browser.eval("document.getElementById('legend').textContent")
    assert "fact: subject \u2192 object, labelled with its predicate" in legend
    assert not [c for c in browser.console if c.startswith("exception")], browser.console
