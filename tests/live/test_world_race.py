"""Several processes merging one environment lose no update (merges of one environment are
ordered by round: docs/architecture.md, "Merge rules"), on both stores; and answers that arrive
late and out of order end in the in-order graph."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.fake_openai import FakeOpenAI, Reply
from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder

ROOT = Path(__file__).resolve().parents[2]
PROCESSES, MERGES = 4, 25


@pytest.mark.parametrize("graph", ["embedded", pytest.param("neo4j", marks=pytest.mark.neo4j)])
def test_four_processes_merging_one_environment_lose_no_update(graph: str, tmp_path: Path,
                                                                request: pytest.FixtureRequest) -> None:
    env_vars = dict(os.environ, PYTHONPATH=str(ROOT))
    if graph == "neo4j":
        server = request.getfixturevalue("neo4j_server")
        env_vars.update(NEO4J_URI=server["uri"], NEO4J_USER=server["user"], NEO4J_PASSWORD=server["password"])
    tenant, env = f"race-{uuid.uuid4().hex[:10]}", "race-env"
    data = tmp_path / "data"
    WorldModel.open(data, graph=graph, embedder=HashingEmbedder(64)).close()  # schema created once, up front
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "support" / "world_race_worker.py"), str(data), graph,
                               tenant, env, str(w), str(MERGES)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=env_vars, text=True) for w in range(PROCESSES)]
    versions: list[int] = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-2000:]
        versions += json.loads(out.strip().splitlines()[-1])
    with WorldModel.open(data, graph=graph, embedder=HashingEmbedder(64)) as wm:
        g = wm.world_graph(tenant, env)
    total = PROCESSES * MERGES
    assert len(versions) == total
    assert sorted(versions) == list(range(1, total + 1))  # every merge saw the one before it
    assert g["meta"]["graph_version"] == total
    key = next(n for n in g["nodes"] if n["name"] == "brass key")
    assert key["evidence_count"] == total and len(key["source_scenes"]) == total
    current = [e for e in g["edges"] if e["relation"] == "containment" and e["dst_id"] == key["id"]
               and e["valid_to"] is None]
    assert len(current) == 1, "the key is in exactly one room"
    assert g["meta"]["counts"]["scenes"] == total


def _timeline_delta(rnd: int) -> dict:
    """Round ``rnd`` of a small world: the key moves between the table, the player and the
    rooms; the door opens on round 3 and closes on round 6; the apple is eaten on round 5."""
    holder = [("furniture", "table"), ("character", "player"), ("room", "hall"), ("character", "player"),
              ("furniture", "table"), ("room", "kitchen"), ("character", "player"), ("room", "hall")][rnd % 8]
    door = "front door open" if 3 <= rnd < 6 else "front door closed"
    d = {"entities": [{"ref": "h", "name": holder[1], "type": holder[0]}, {"ref": "k", "name": "brass key", "type": "item"},
                      {"ref": "d", "name": "front door", "type": "door"}],
         "states": [{"ref": "s", "name": door, "type": "door_state", "entity_ref": "d"}],
         "edges": [{"relation": "containment", "src_ref": "h", "dst_ref": "k"}], "rules": []}
    if rnd < 5:
        d["entities"] += [{"ref": "a", "name": "apple", "type": "food"}, {"ref": "t", "name": "table", "type": "furniture"}]
        d["edges"].append({"relation": "containment", "src_ref": "t", "dst_ref": "a"})
    elif rnd == 5:
        d["entities"].append({"name": "apple", "type": "food", "retract": True})
    return d


def _canonical(g: dict) -> dict:
    names = {n["id"]: n["name"] for n in g["nodes"]}
    return {
        "nodes": sorted((n["name"], n["valid_to"] is None) for n in g["nodes"]),
        "runs": sorted((n["name"], n["valid_from"], n["valid_to"]) for n in g["nodes"] if n["kind"] == "state"),
        "edges": sorted((e["relation"], names[e["src_id"]], names[e["dst_id"]], e["valid_from"], e["valid_to"] or "")
                        for e in g["edges"] if e["relation"] == "containment"),
    }


def _by_round(g: dict) -> dict:
    """``_canonical`` with each time replaced by the rank of its scene's round (r0, r1, ...)."""
    times = sorted({s["created_at"] for s in g["scenes"]})
    rank = {t: f"r{i}" for i, t in enumerate(times)}
    c = _canonical(g)
    c["runs"] = [(n, rank.get(a, a), rank.get(b, b)) for n, a, b in c["runs"]]
    c["edges"] = [(rel, s, d, rank.get(a, a), rank.get(b, b)) for rel, s, d, a, b in c["edges"]]
    return c


def test_answers_arriving_late_and_out_of_order_end_in_the_in_order_graph(tmp_path: Path) -> None:
    rounds = 9
    # the answer for round r arrives after (rounds - r) * 0.15 s: the last round's first
    deltas = {f"round {r}": _timeline_delta(r) for r in range(rounds)}

    def answer(body: dict) -> Reply:
        scene = json.dumps(body["messages"][-1]["content"])
        r = next(r for r in range(rounds) if f'\\"current_round\\": {r},' in scene)
        return Reply(content=json.dumps(deltas[f"round {r}"]), delay=(rounds - r) * 0.15)

    graphs = []
    for mode in ("in order", "late and out of order"):
        with FakeOpenAI() as server:
            server.responder = answer
            os.environ.update(server.env())
            try:
                wm = WorldModel.open(tmp_path / mode, embedder=HashingEmbedder(64), world_workers=rounds)
                with wm:
                    packets = []
                    for r in range(rounds):
                        packets.append(wm.observe_round("t1", "house", {
                            "round": r, "action": f"act {r}", "after_observation": f"seen {r}",
                            "response": "FLAG_CURIOSITY: yes\nCURIOSITY_REASON: new"}))
                        time.sleep(0.01)
                        if mode == "in order":
                            assert wm.update_world(packets[-1]).ok  # waits for the background worker
                    assert wm.wait_for_updates(60)
                    reports = [wm.update_world(p) for p in packets]  # each returns its merge's report
                    assert all(r.ok and r.graph_version for r in reports), [r.error for r in reports]
                    graph = wm.world_graph("t1", "house")
            finally:
                for key in server.env():
                    os.environ.pop(key, None)
        graphs.append(graph)
        assert graph["meta"]["graph_version"] == rounds
    in_order, shuffled = graphs
    merged_at = {s["current_round"]: s["updated_at"] for s in shuffled["scenes"]}
    assert merged_at[rounds - 1] < merged_at[0], "the answers did arrive out of order"
    # the scenes' times differ between the two runs: compare the runs by round order instead
    by_round = _by_round
    assert by_round(shuffled) == by_round(in_order)
    key_now = [e for e in by_round(shuffled)["edges"] if e[2] == "brass key" and e[4] == ""]
    assert [e[1] for e in key_now] == ["table"]  # round 8's holder
    assert ("apple", False) in by_round(shuffled)["nodes"]
