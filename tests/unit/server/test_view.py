"""The world-graph page (``render_view``, ``worldgraph view``): what the HTML holds for a real graph
(the text adventure the demo replays). What headless Chromium draws from it: test_view_browser.py."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from worldgraph import WorldModel
from worldgraph.cli.main import main
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.view import page_data, render_view

ROOT = Path(__file__).resolve().parents[3]
ENV = "CottageEscape"
HOSTILE_NAME = "</script><script>window.pwned = 1; document.body.dataset.pwned = '1'</script>"
HOSTILE_RULE = "<img src=x onerror=\"document.body.dataset.pwned='2'\"><!-- \u2028 \u2029 & &amp;"


def _replayed(path: Path) -> WorldModel:
    from worldgraph.cli.replay import replay_log

    wm = WorldModel.open(path, embedder=HashingEmbedder(384))
    replay_log(wm, "t1", ENV, ROOT / "examples" / "text_adventure.jsonl", use_shipped_deltas=True)
    # A state superseded with no transition to keep it drawn: the sofa was dusty, now it is clean.
    for name in ("sofa dusty", "sofa clean"):
        wm.apply_delta("t1", ENV, {"entities": [], "edges": [], "rules": [], "states": [
            {"name": name, "type": "sofa_state", "entity_ref": "furniture:sofa"}]}, scene=f"the {name}")
    return wm


@pytest.fixture(scope="module")
def adventure_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data folder holding the replayed adventure (tenant t1); tests only read it."""
    path = tmp_path_factory.mktemp("adventure")
    _replayed(path).close()
    return path


@pytest.fixture(scope="module")
def adventure(adventure_data: Path) -> dict[str, Any]:
    with WorldModel.open(adventure_data, embedder=HashingEmbedder(384)) as wm:
        return wm.world_graph("t1", ENV)


def hostile_graph(graph: dict[str, Any]) -> dict[str, Any]:
    g = json.loads(json.dumps(graph))
    key = next(n for n in g["nodes"] if n["name"] == "brass key")
    key["name"] = HOSTILE_NAME
    key["attributes"] = {HOSTILE_NAME: HOSTILE_RULE, "nan": float("nan")}
    key["evidence"] = [HOSTILE_RULE]
    g["rules"][0]["condition"] = HOSTILE_RULE
    g["rules"][0]["outcome"] = HOSTILE_NAME
    return g


def drawn_by_default(graph: dict[str, Any]) -> set[str]:
    """Current nodes, plus the (past) states a current transition leaves or enters."""
    ids = {n["id"] for n in graph["nodes"] if n.get("valid_to") is None}
    for e in graph["edges"]:
        if e["relation"] == "transition" and e.get("valid_to") is None:
            ids |= {e["src_id"], e["dst_id"]}
    return ids


# ---------------------------------------------------------------------- the HTML itself
def _inline_scripts(page: str) -> list[str]:
    return re.findall(r"<script>(.*?)</script>", page, flags=re.S)


def test_page_is_one_file_with_no_network(adventure: dict[str, Any]) -> None:
    page = render_view(adventure, "Cottage")
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page), "no external resources"
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert csp and "default-src 'none'" in csp.group(1)
    # Each inline script runs only because the policy names its hash: recompute them.
    hashes = set(re.findall(r"'(sha256-[^']+)'", csp.group(1)))
    scripts = _inline_scripts(page)
    assert len(scripts) == 6  # cytoscape, layout-base, cose-base, fcose, the page's two
    assert hashes == {"sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() for s in scripts}


def test_hostile_text_stays_data(adventure: dict[str, Any]) -> None:
    graph = hostile_graph(adventure)
    page = render_view(graph, HOSTILE_NAME)
    # Exactly the page's own script elements: nothing in the data opened or closed one.
    assert page.count("<script") == 7 and page.count("</script>") == 7
    assert "<!--" not in page.split('id="wg-data">', 1)[1].split("</script>", 1)[0]
    assert "<title>&lt;/script&gt;&lt;script&gt;" in page
    blob = re.search(r'<script type="application/json" id="wg-data">(.*?)</script>', page, flags=re.S)
    assert blob is not None
    data = json.loads(blob.group(1))
    assert data == json.loads(json.dumps(page_data(graph)))
    names = {n["name"] for n in data["nodes"]}
    assert HOSTILE_NAME in names
    key = next(n for n in data["nodes"] if n["name"] == HOSTILE_NAME)
    assert key["attributes"]["nan"] == "nan", "NaN would make the JSON unreadable in the browser"


def test_page_data_trims_text_but_keeps_counts() -> None:
    node = {"id": "n1", "kind": "entity", "type": "item", "name": "x", "attributes": {"long": "y" * 5000},
            "confidence": 0.5, "evidence": [f"quote {i}" for i in range(10)], "evidence_count": 12,
            "source_scenes": ["s1", "s2"], "valid_to": None}
    data = page_data({"nodes": [node], "edges": [], "rules": [], "scenes": [], "meta": None})
    out = data["nodes"][0]
    assert out["evidence_count"] == 12 and len(out["evidence"]) == 3 and out["scenes"] == 2
    assert len(out["attributes"]["long"]) == 300


def test_page_data_gives_a_fact_its_predicate_and_other_edges_nothing_new() -> None:
    base = {"src_id": "a", "dst_id": "b", "confidence": 0.5, "evidence": [], "source_scenes": [], "valid_to": None}
    edges = [dict(base, id="c", relation="containment"),
             dict(base, id="f", relation="fact", predicate="p" * 400, single_valued=True)]
    out = {e["id"]: e for e in page_data({"nodes": [], "edges": edges, "rules": [], "scenes": [], "meta": None})["edges"]}
    assert "predicate" not in out["c"] and "single_valued" not in out["c"]
    assert len(out["f"]["predicate"]) == 300 and out["f"]["single_valued"] is True


# ---------------------------------------------------------------------- the command
@pytest.fixture
def cli(adventure_data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["--data", str(adventure_data), "--tenant", "t1", *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_cli_writes_the_page_and_names_known_envs(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "page" / "graph.html"
    code, stdout, _ = cli("view", "--env", ENV, "--out", str(out), "--json")
    assert code == 0
    result = json.loads(stdout)
    assert result["path"] == str(out) and result["nodes"] == 20 and result["current_nodes"] == 16
    page = out.read_text("utf-8")
    assert page.startswith("<!doctype html>") and "CottageEscape · worldgraph</title>" in page
    code, _, err = cli("view", "--env", "Atlantis", "--out", str(tmp_path / "x.html"))
    assert code == 1 and "environment 'Atlantis' not found" in err and "known environments: CottageEscape" in err
    assert not (tmp_path / "x.html").exists()
