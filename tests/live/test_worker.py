"""`worldgraph worker` processes on the durable packet queue, on both stores: N workers merge every
packet exactly once and end in the in-order graph; a worker killed mid-packet (kill -9) has its
packet taken over within seconds; a slow but live worker keeps its packet; SIGTERM hands a packet
back. The LLM is tests/support/fake_openai.py (a real local HTTP server) with random latency."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.live.test_world_race import _by_round, _timeline_delta
from tests.support.fake_openai import FakeOpenAI, Reply
from worldgraph import WorldModel

ROOT = Path(__file__).resolve().parents[2]
FLAG = "FLAG_CURIOSITY: yes\nCURIOSITY_REASON: something new"
STORES = ["embedded", pytest.param("neo4j", marks=pytest.mark.neo4j)]


class World:
    """The test's side: a fake LLM answering round r with round r's delta, a tenant on one store,
    and the environment of the worker processes."""

    def __init__(self, graph: str, tmp_path: Path, request: pytest.FixtureRequest, lease: float = 3.0) -> None:
        self.graph, self.data = graph, tmp_path / "data"
        self.tenant = f"wk-{uuid.uuid4().hex[:10]}"
        self.llm = FakeOpenAI().start()
        self.delays: dict[int, list[float]] = {}  # round -> delays of its next requests (then random)
        self.rng = random.Random(7)
        self.asked: dict[int, int] = {}
        self._lock = threading.Lock()
        self.llm.responder = self._answer
        self.env = dict(os.environ, PYTHONPATH=str(ROOT), **self.llm.env(), WORLDGRAPH_EMBEDDING_PROVIDER="hashing",
                        WORLDGRAPH_WORKER_LEASE_SECONDS=str(lease), WORLDGRAPH_SHUTDOWN_TIMEOUT_SECONDS="1")
        if graph == "neo4j":
            server = request.getfixturevalue("neo4j_server")
            self.env.update(NEO4J_URI=server["uri"], NEO4J_USER=server["user"], NEO4J_PASSWORD=server["password"])
        os.environ.update(self.llm.env())

    def _answer(self, body: dict[str, Any]) -> Reply:
        scene = json.dumps(body["messages"][-1]["content"])
        r = next(r for r in range(100) if f'\\"current_round\\": {r},' in scene)
        with self._lock:
            self.asked[r] = self.asked.get(r, 0) + 1
            queued = self.delays.get(r) or []
            delay = queued.pop(0) if queued else self.rng.uniform(0.05, 0.6)
        return Reply(content=json.dumps(_timeline_delta(r)), delay=delay)

    def open(self, **kw: Any) -> WorldModel:
        return WorldModel.open(self.data, graph=self.graph, embedding_provider="hashing", **kw)

    def observe(self, env: str, rounds: range) -> list[str]:
        """Rounds flagged for the world model, left pending for the workers."""
        with self.open(world_background_updates=False) as wm:
            ids = []
            for r in rounds:
                packet = wm.observe_round(self.tenant, env, {"round": r, "action": f"act {r}",
                                                            "after_observation": f"seen {r}", "response": FLAG})
                ids.append(packet["id"])
                time.sleep(0.002)  # distinct round times
            assert wm.wait_for_updates(5)
            assert {wm.store.get_scene(self.tenant, i)["status"] for i in ids} == {"pending"}, \
                "world_background_updates=False leaves every packet to the workers"
        return ids

    def worker(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "worldgraph.cli", "--data", str(self.data), "--graph",
                                 self.graph, "worker", "--json", "--tenant", self.tenant, "--poll-seconds", "0.2",
                                 *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def scenes(self, env: str) -> dict[str, dict[str, Any]]:
        with self.open() as wm:
            return {s["id"]: s for s in wm.store.list_scenes(self.tenant, env)}

    def close(self) -> None:
        for key in self.llm.env():
            os.environ.pop(key, None)
        self.llm.stop()


@pytest.fixture
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    made: list[World] = []

    def make(graph: str, **kw: Any) -> World:
        made.append(World(graph, tmp_path, request, **kw))
        return made[-1]
    yield make
    for w in made:
        w.close()


def _started(proc: subprocess.Popen[str]) -> None:
    """Wait for the worker's start line (printed once its SIGTERM handler is installed)."""
    assert proc.stderr is not None
    line = " "
    while line and "worldgraph worker on" not in line:
        line = proc.stderr.readline()
    assert line, f"the worker exited before it started (exit {proc.wait()})"


def _stats(proc: subprocess.Popen[str], timeout: float = 180) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("graph", STORES)
def test_three_workers_merge_every_packet_exactly_once_into_the_in_order_graph(graph: str, world: Any) -> None:
    w = world(graph)
    rounds = 12
    ids = {env: w.observe(env, range(rounds)) for env in ("house", "garden")}
    procs = [w.worker("--once", "--concurrency", "2") for _ in range(3)]
    stats = [_stats(p) for p in procs]
    merged = [sid for s in stats for sid in s["merged"]]
    all_ids = ids["house"] + ids["garden"]
    assert sorted(merged) == sorted(all_ids), f"every packet merged, none twice: {stats}"
    assert not any(s["lost"] or s["failed"] or s["deferred"] for s in stats)
    assert sum(1 for s in stats if s["merged"]) >= 2, "the work was shared between processes"
    assert all(w.asked[r] == 2 for r in range(rounds)), "one extraction per packet (2 envs per round)"
    with w.open() as wm:
        in_order = {}
        for r in range(rounds):  # the same deltas merged one by one, in round order
            in_order[r] = wm.apply_delta(w.tenant, "in-order", _timeline_delta(r),
                                         scene={"trigger_reason": "new", "current_round": r})
        expected = _by_round(wm.world_graph(w.tenant, "in-order"))
        for env in ("house", "garden"):
            g = wm.world_graph(w.tenant, env)
            assert {s["status"] for s in g["scenes"]} == {"merged"}
            assert not any("lease_owner" in s for s in g["scenes"]), "a merged scene keeps no lease"
            reports = [wm.store.get_scene_report(w.tenant, sid) for sid in ids[env]]
            assert all(r is not None and r["ok"] for r in reports)
            changed = sum(1 for r in reports if not r.get("skipped"))
            assert g["meta"]["graph_version"] == changed == rounds  # one bump per non-empty merge
            assert _by_round(g) == expected, f"{env} ends as the in-order graph"
    versions = sorted(v for s in stats for v in s["graph_versions"])
    assert versions == sorted(list(range(1, rounds + 1)) * 2)


@pytest.mark.parametrize("graph", STORES)
def test_a_worker_killed_mid_packet_has_it_taken_over_within_seconds(graph: str, world: Any) -> None:
    w = world(graph, lease=2.0)
    ids = w.observe("house", range(5))
    w.delays[2] = [120.0]  # the first extraction of round 2 hangs: its worker is killed meanwhile
    victim = w.worker()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and w.scenes("house")[ids[2]]["status"] != "running":
        time.sleep(0.1)
    held = w.scenes("house")[ids[2]]
    assert held["status"] == "running" and f":{victim.pid}:" in held["lease_owner"]
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    killed_at = time.monotonic()
    rescuer = w.worker()
    while time.monotonic() < killed_at + 60 and w.scenes("house")[ids[2]]["status"] != "merged":
        time.sleep(0.1)
    took = time.monotonic() - killed_at
    print(f"\n{graph}: the killed worker's packet was merged by another {took:.1f} s after kill -9 (lease 2 s)")
    while time.monotonic() < killed_at + 60 and any(s["status"] != "merged" for s in w.scenes("house").values()):
        time.sleep(0.1)
    rescuer.send_signal(signal.SIGTERM)
    stats = _stats(rescuer)
    scenes = w.scenes("house")
    assert {s["status"] for s in scenes.values()} == {"merged"}, "no packet lost"
    assert took < 20, f"the dead worker's packet was taken over after {took:.1f} s (lease 2 s)"
    assert ids[2] in stats["merged"]
    with w.open() as wm:
        assert wm.world_graph(w.tenant, "house")["meta"]["graph_version"] == 5  # each packet merged once
    assert w.asked[2] == 2  # the killed worker's extraction and the rescuer's


@pytest.mark.parametrize("graph", STORES)
def test_a_slow_live_worker_keeps_its_packet_and_sigterm_hands_one_back(graph: str, world: Any) -> None:
    w = world(graph, lease=1.5)
    ids = w.observe("house", range(3))
    w.delays[0] = [5.0]  # over three leases: the lease must be renewed, not taken over
    first = w.worker()
    while w.scenes("house")[ids[0]]["status"] != "running":
        time.sleep(0.05)
    second = w.worker()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(s["status"] != "merged" for s in w.scenes("house").values()):
        time.sleep(0.1)
    _started(second)  # a SIGTERM before its handler is installed would kill it (-15), not stop it
    for p in (first, second):
        p.send_signal(signal.SIGTERM)
    a, b = _stats(first), _stats(second)
    assert ids[0] in a["merged"] and ids[0] not in b["merged"] and not a["lost"] and not b["lost"]
    assert w.asked[0] == 1, "the slow packet was extracted once"
    assert sorted(a["merged"] + b["merged"]) == sorted(ids)

    # SIGTERM while a packet is being extracted: it is released back to pending, then merged by another
    more = w.observe("house", range(3, 4))
    w.delays[3] = [60.0]
    stopping = w.worker()
    while w.scenes("house")[more[0]]["status"] != "running":
        time.sleep(0.05)
    stopping.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    stats = _stats(stopping, timeout=30)
    assert time.monotonic() - t0 < 15 and stats["released"] == more
    assert w.scenes("house")[more[0]]["status"] == "pending"
    done = _stats(w.worker("--once"))
    assert done["merged"] == more
    with w.open() as wm:
        assert wm.world_graph(w.tenant, "house")["meta"]["graph_version"] == 4
