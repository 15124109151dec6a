"""Browse and forget on both stores (issue 19): pages by a keyset cursor, agents and environments,
forgetting an episode / environment / tenant from every read path at once, tenant sealing, and
provable erasure: after forget + purge a string only the forgotten records held is in no file
under the data folder, nor in the S3 bucket of the index."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from worldgraph import InvalidInputError, NotFoundError, WorldModel
from worldgraph.memory.embeddings import HashingEmbedder

ENV = "Cellar"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def _round(n: int, observation: str, flag: bool = True) -> dict[str, Any]:
    response = f"ACTION: open crate {n}" + ("\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: crates open" if flag else "")
    return {"round": n, "action": f"open crate {n}", "before_observation": observation,
            "after_observation": "The crate opens.", "feedback": "", "admissible_commands": ["look"],
            "response": response}


DELTA = {"entities": [{"ref": "c", "name": "crate", "type": "container"}, {"ref": "b", "name": "bottle", "type": "item"}],
         "states": [],
         "edges": [{"relation": "containment", "src_ref": "c", "dst_ref": "b"},
                   {"relation": "episodic", "src_ref": "b", "dst_ref": "scene"},
                   {"relation": "fact", "predicate": "kept_for", "src_ref": "b", "dst_ref": "c", "single_valued": True}],
         "rules": [{"condition": "a crate is closed", "outcome": "opening it shows its contents", "linked_refs": ["c"]}]}


@pytest.fixture(params=["embedded", pytest.param("neo4j", marks=pytest.mark.neo4j)])
def graph_kw(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "neo4j":
        server = request.getfixturevalue("neo4j_server")
        return {"graph": "neo4j", "neo4j_uri": server["uri"], "neo4j_user": server["user"],
                "neo4j_password": server["password"]}
    return {}


@pytest.fixture
def wm(graph_kw: dict[str, Any], tmp_path: Path) -> Iterator[WorldModel]:
    model = WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64), **graph_kw)
    yield model
    model.close()


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def exp(task: str, minutes: int = 0, agent: str = "agent-a", **extra: Any) -> dict[str, Any]:
    return {"agent_id": agent, "agent_role": "Cook", "task_type": "cooking", "task_description": task,
            "outcome": "success", "timestamp": (T0 + timedelta(minutes=minutes)).isoformat(), **extra}


# ----------------------------------------------------------------------------------- browse
def test_list_episodes_pages_by_a_keyset_cursor_with_filters(wm: WorldModel, tenant: str) -> None:
    # 9 episodes, three sharing one timestamp (the id breaks the tie), two agents, one session
    ids = wm.record_experiences(tenant, [exp(f"task {i}", minutes=min(i, 6), agent="agent-a" if i % 2 else "agent-b",
                                             session_id="s-1" if i < 4 else None) for i in range(9)])
    full = wm.list_episodes(tenant, limit=100)
    assert full.next_cursor is None and len(full.items) == 9
    order = [e["id"] for e in full.items]
    keys = [(e["ts"], e["id"]) for e in full.items]
    assert keys == sorted(keys, reverse=True), "newest first, ties by id"
    pages, cursor = [], None
    while True:
        page = wm.list_episodes(tenant, limit=2, cursor=cursor)
        pages.append([e["id"] for e in page.items])
        cursor = page.next_cursor
        if cursor is None:
            break
        assert isinstance(cursor, str) and "offset" not in cursor
    assert [i for p in pages for i in p] == order and len(pages) == 5
    # an episode recorded newer than the cursor, or one forgotten before it, shifts nothing
    first = wm.list_episodes(tenant, limit=3)
    wm.record_experience(tenant, exp("newest", minutes=60, agent="agent-z"))
    wm.forget_episode(tenant, order[0])
    assert [e["id"] for e in wm.list_episodes(tenant, limit=3, cursor=first.next_cursor).items] == order[3:6]
    # filters
    agent_a = wm.list_episodes(tenant, agent_id="agent-a")
    expected = [i for i, e in zip(order, full.items) if e["agent_id"] == "agent-a" and i != order[0]]
    assert [e["id"] for e in agent_a.items] == expected and len(expected) >= 3
    session = wm.list_episodes(tenant, session_id="s-1", limit=3)
    rest = wm.list_episodes(tenant, session_id="s-1", limit=3, cursor=session.next_cursor)
    assert sorted(e["id"] for e in session.items + rest.items) == sorted(ids[:4])
    window = wm.list_episodes(tenant, since=(T0 + timedelta(minutes=2)).isoformat(),
                              until=(T0 + timedelta(minutes=4)).isoformat())
    assert sorted(e["id"] for e in window.items) == sorted(ids[2:4])
    # a cursor is opaque and tied to its filters
    with pytest.raises(InvalidInputError) as err:
        wm.list_episodes(tenant, cursor="not-a-cursor")
    assert err.value.field == "cursor"
    with pytest.raises(InvalidInputError) as err:
        wm.list_episodes(tenant, agent_id="agent-b", cursor=first.next_cursor)
    assert err.value.field == "cursor"
    with pytest.raises(InvalidInputError) as err:
        wm.list_episodes(tenant, limit=0)
    assert err.value.field == "limit"
    with pytest.raises(InvalidInputError) as err:
        wm.list_episodes(tenant, since="yesterday-ish")
    assert err.value.field == "since"


def test_list_agents_and_environments(wm: WorldModel, tenant: str) -> None:
    wm.record_experiences(tenant, [exp("a1", 0, "agent-a"), exp("a2", 5, "agent-a"), exp("b1", 1, "agent-b")])
    agents = {a["agent_id"]: a for a in wm.list_agents(tenant)}
    assert set(agents) == {"agent-a", "agent-b"}
    assert agents["agent-a"]["episodes"] == 2 and agents["agent-a"]["agent_role"] == "Cook"
    assert agents["agent-a"]["last_seen"].startswith("2026-03-01T12:05")
    assert wm.list_environments(tenant) == []
    wm.apply_delta(tenant, ENV, DELTA)
    envs = wm.list_environments(tenant)
    assert [e["env_name"] for e in envs] == [ENV]
    assert envs[0]["nodes"] == 2 and envs[0]["rules"] == 1 and envs[0]["graph_version"] >= 1
    assert envs[0]["updated_at"]
    assert wm.list_agents(tenant + "-other") == [] and wm.list_environments(tenant + "-other") == []


# ----------------------------------------------------------------------------------- forget
def test_forget_episode_is_gone_from_every_read_path(wm: WorldModel, tenant: str, tmp_path: Path) -> None:
    before, target, after = wm.record_experiences(tenant, [
        exp("turn one", 0, session_id="chat"), exp("turn two about the walnut pantry", 1, session_id="chat"),
        exp("turn three", 2, session_id="chat")])
    wm.submit_feedback(tenant, target, 0.9, notes="great pantry work")
    keep = wm.record_experience(tenant, exp("untouched walnut pantry", 3, agent="agent-c"))
    # a round with its scene packet, and world facts learned from that scene
    packet = wm.observe_round(tenant, ENV, _round(1, "A crate stands in the cellar."))
    assert packet is not None
    wm.apply_delta(tenant, ENV, DELTA, scene=packet)
    round_id = packet["episode_id"]
    assert wm.store.neighborhood(tenant, [round_id])[round_id]["scenes"]

    report = wm.forget_episode(tenant, target, forgotten_by="ops@example")
    assert report.kind == "episode" and report.removed["episodes"] == 1 and report.removed["feedback"] == 1
    with pytest.raises(NotFoundError):
        wm.get_episode(tenant, target)
    assert target not in [e["id"] for e in wm.list_episodes(tenant).items]
    assert target not in [e["id"] for e in wm.get_agent_episodes(tenant, "agent-a")]
    assert wm.readiness(tenant, "agent-a")["episodes"] == 2
    hits = wm.recall_experiences(tenant, None, "walnut pantry", limit=10, options={"min_similarity": 0.0})
    assert target not in [h["episode_id"] for h in hits] and keep in [h["episode_id"] for h in hits]
    assert wm.store.feedback_for(tenant, target) == []
    assert wm.store.neighborhood(tenant, [target]) == {}
    links = wm.store.session_neighbors(tenant, [before, after])
    assert links[before][1] == after and links[after][0] == before, "the neighbours are linked to each other"
    with pytest.raises(NotFoundError):
        wm.forget_episode(tenant, target)

    # a round: its scene packet goes, what was learned from it stays without that source
    wm.forget_episode(tenant, round_id)
    graph = wm.world_graph(tenant, ENV)
    assert graph["scenes"] == []
    assert {n["name"] for n in graph["nodes"]} == {"crate", "bottle"}
    assert [e["predicate"] for e in graph["edges"] if e["relation"] == "fact"] == ["kept_for"]
    for rec in graph["nodes"] + graph["rules"] + graph["edges"]:
        assert packet["id"] not in (rec.get("source_scenes") or [])
    assert graph["meta"]["counts"]["scenes"] == 0
    out = wm.export(tenant, ENV, tmp_path / "export")
    assert packet["id"] not in "".join(p.read_text() for p in out.iterdir())
    if wm.store.name == "neo4j":
        rows = wm.cypher(tenant, "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.id AS id")
        assert target not in {r["id"] for r in rows} and round_id not in {r["id"] for r in rows}
        rows = wm.cypher(tenant, "MATCH (s:Scene {tenant_id: $tenant_id}) RETURN s.id AS id")
        assert rows == []
    # the audit: who forgot which id and when, never the content
    log = wm.store.forget_log(tenant)
    assert [(a["kind"], a["target_id"], a["forgotten_by"]) for a in log][:1] == [("episode", target, "ops@example")]
    assert "walnut" not in json.dumps(log) and "pantry" not in json.dumps(log)


def test_tenants_are_sealed(wm: WorldModel, tenant: str) -> None:
    eid = wm.record_experience(tenant, exp("sealed"))
    wm.apply_delta(tenant, ENV, DELTA)
    other = tenant + "-b"
    wm.record_experience(other, exp("theirs"))
    with pytest.raises(NotFoundError):
        wm.forget_episode(other, eid)
    with pytest.raises(NotFoundError):
        wm.get_episode(other, eid)
    with pytest.raises(NotFoundError):
        wm.forget_environment(other, ENV)
    assert eid not in [e["id"] for e in wm.list_episodes(other).items]
    wm.forget_tenant(other)
    assert wm.get_episode(tenant, eid)["id"] == eid and wm.world_graph(tenant, ENV)["nodes"]


def test_forget_environment_and_tenant(wm: WorldModel, tenant: str) -> None:
    packet = wm.observe_round(tenant, ENV, _round(1, "A crate."))
    assert packet is not None
    wm.apply_delta(tenant, ENV, DELTA, scene=packet)
    wm.apply_delta(tenant, "Attic", DELTA)
    report = wm.forget_environment(tenant, ENV)
    assert report.removed["nodes"] == 2 and report.removed["scenes"] == 1
    assert [e["env_name"] for e in wm.list_environments(tenant)] == ["Attic"]
    with pytest.raises(NotFoundError):  # a forgotten environment is an unknown one
        wm.world_graph(tenant, ENV)
    with pytest.raises(NotFoundError):
        wm.forget_environment(tenant, ENV)
    assert wm.get_episode(tenant, packet["episode_id"])  # the round's episode stays
    from worldgraph.server.keys import ApiKeys

    keys = ApiKeys(wm.store)
    key, _ = keys.create(tenant)
    assert keys.tenant_of(key) == tenant
    report = wm.forget_tenant(tenant, forgotten_by="admin")
    assert report.removed["episodes"] == 1 and report.removed["api_keys"] == 1
    assert keys.tenant_of(key) is None and keys.list(tenant) == []
    assert wm.list_episodes(tenant).items == [] and wm.list_environments(tenant) == []
    assert wm.stats(tenant)["episodes"] == 0 and wm.stats(tenant)["nodes"] == 0
    assert [a["kind"] for a in wm.store.forget_log(tenant)] == ["environment", "tenant"]


# ----------------------------------------------------------------------------------- erasure
def files_holding(root: Path, needle: str) -> list[str]:
    """Every file under ``root`` whose bytes contain ``needle`` (UTF-8)."""
    raw = needle.encode()
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and raw in p.read_bytes())


def _erasure_fixture(wm: WorldModel, tenant: str) -> tuple[str, str, list[str]]:
    secret = f"zq{uuid.uuid4().hex[:12]}x"  # one token: the full-text index keeps it as is
    kept = f"kp{uuid.uuid4().hex[:12]}x"
    gone = wm.record_experiences(tenant, [exp(f"pay invoice {secret}", 1, session_id="s"),
                                          exp(f"kept invoice {kept}", 2, session_id="s")])
    wm.submit_feedback(tenant, gone[0], 0.2, notes=f"notes {secret}")
    packet = wm.observe_round(tenant, ENV, _round(3, f"The crate is marked {secret}."))
    assert packet is not None
    wm.apply_delta(tenant, ENV, DELTA, scene=packet)
    wm.index.ensure_indexes(vector=False)  # the full-text index holds the term too
    return secret, kept, [gone[0], packet["episode_id"]]


def test_forget_and_purge_leave_the_text_in_no_file(tmp_path: Path, tenant: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from worldgraph.kg.embedded.cypher import opener as opener_module

    monkeypatch.setattr(opener_module, "SAVE_MIN_ROWS", 0)  # a small tenant's projection is saved too
    data = tmp_path / "data"
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        secret, kept, ids = _erasure_fixture(wm, tenant)
        # a Cypher query saves the tenant's projection (its records) beside the SQLite file
        assert wm.cypher(tenant, "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n")[0]["n"] > 0
        assert any("-cypher" in str(f) for f in files_holding(data, secret)), "the projection holds the text"
        for eid in ids:
            wm.forget_episode(tenant, eid)
        stats = wm.purge()
        assert stats["forgets_purged"] == 2
        assert files_holding(data, secret) == []
        assert files_holding(data, kept), "what was not forgotten stays"
        assert [h["episode_id"] for h in wm.recall_experiences(tenant, None, f"kept invoice {kept}",
                                                               options={"min_similarity": 0.0})][:1]
        assert all(a["purged_at"] for a in wm.store.forget_log(tenant))
        # a tenant: its table goes whole
        wm.forget_tenant(tenant)
        wm.purge()
        assert files_holding(data, kept) == []


def test_background_purge_and_an_interrupted_forget(tmp_path: Path, tenant: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    with WorldModel.open(data, embedder=HashingEmbedder(64), purge_after_seconds=3600) as wm:
        secret, _, ids = _erasure_fixture(wm, tenant)

        def index_down(episode_ids: Any) -> None:
            raise OSError("index unreachable")
        monkeypatch.setattr(wm.index, "delete", index_down)
        wm.forget_episode(tenant, ids[0])  # the store forgot it; its index row is left
        monkeypatch.undo()
        assert ids[0] not in [h["episode_id"] for h in wm.recall_experiences(
            tenant, None, f"pay invoice {secret}", options={"min_similarity": 0.0})]
        wm.forget_episode(tenant, ids[1])
    # the process stopped before its purge ran: the next one to open the folder purges by itself
    with WorldModel.open(data, embedder=HashingEmbedder(64), purge_after_seconds=0) as wm:
        wm.lifecycle.purger.wait(60)
        deadline = time.monotonic() + 60
        while wm.store.forget_log(unpurged=True) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert wm.store.forget_log(unpurged=True) == []
    assert files_holding(data, secret) == []


def _bucket_objects(s3: dict[str, Any]) -> dict[str, bytes]:
    import boto3

    client = boto3.client("s3", endpoint_url=s3["server"].url, aws_access_key_id="test",
                          aws_secret_access_key="test", region_name="us-east-1")
    out: dict[str, bytes] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=s3["bucket"]):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = client.get_object(Bucket=s3["bucket"], Key=obj["Key"])["Body"].read()
    return out


def test_erasure_on_the_s3_index(tmp_path: Path, tenant: str, s3_env: dict[str, Any]) -> None:
    data = tmp_path / "data"
    with WorldModel.open(data, embedder=HashingEmbedder(64), lancedb_path=s3_env["uri"]) as wm:
        secret, kept, ids = _erasure_fixture(wm, tenant)
        wm.index.wait_for_maintenance()

        def holding(needle: str) -> list[str]:
            return sorted(k for k, v in _bucket_objects(s3_env).items() if needle.encode() in v)
        assert holding(secret), "the test must see the text in the bucket before it is forgotten"
        for eid in ids:
            wm.forget_episode(tenant, eid)
        wm.purge()
        assert holding(secret) == []
        assert files_holding(data, secret) == []
        assert holding(kept)
        wm.forget_tenant(tenant)
        wm.purge()
        assert holding(kept) == []


# ----------------------------------------------------------------------------------- crash
_KILLED_FORGETTER = """
import sys
from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder
wm = WorldModel.open(sys.argv[1], embedder=HashingEmbedder(64))
print("ready", flush=True)
for eid in sys.argv[3:]:
    wm.forget_episode(sys.argv[2], eid)
"""


def test_kill_during_forgets_leaves_each_episode_whole_or_gone(tmp_path: Path, tenant: str) -> None:
    data = tmp_path / "data"
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        ids = wm.record_experiences(tenant, [exp(f"crash {i}", i, session_id="s") for i in range(60)])
        for eid in ids:
            wm.submit_feedback(tenant, eid, 0.1, notes="n")
    root = str(Path(__file__).resolve().parents[3])
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_FORGETTER, str(data), tenant, *ids],
                            stdout=subprocess.PIPE, env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(0.3)
    finally:
        proc.kill()
        proc.wait(10)
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        present = wm.store.get_episodes(tenant, ids)
        for eid in ids:
            assert bool(wm.store.feedback_for(tenant, eid)) == (eid in present)
        chain = [e["id"] for e in wm.list_episodes(tenant, session_id="s", limit=100).items][::-1]
        links = wm.store.session_neighbors(tenant, chain)
        for a, b in zip(chain, chain[1:]):
            assert links[a][1] == b and links[b][0] == a
        forgotten = {a["target_id"] for a in wm.store.forget_log(tenant)}
        assert forgotten == set(ids) - set(present)
        for eid in ids:  # a re-run completes it
            if eid in present:
                wm.forget_episode(tenant, eid)
        assert wm.list_episodes(tenant).items == []


_RECORDER = """
import sys
from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder
wm = WorldModel.open(sys.argv[1], embedder=HashingEmbedder(64), purge_after_seconds=3600)
for b in range(int(sys.argv[3])):
    ids = wm.record_experiences(sys.argv[2], [{"agent_id": "rec", "task_type": "t", "outcome": "success",
                                               "task_description": f"recorded {b} {i}"} for i in range(10)])
    print(" ".join(ids), flush=True)
wm.close()
"""


def test_forgetting_and_purging_while_another_process_records_loses_none(tmp_path: Path, tenant: str) -> None:
    data = tmp_path / "data"
    with WorldModel.open(data, embedder=HashingEmbedder(64), purge_after_seconds=3600) as wm:
        victims = wm.record_experiences(tenant, [exp(f"victim {i}", i) for i in range(30)])
        root = str(Path(__file__).resolve().parents[3])
        proc = subprocess.Popen([sys.executable, "-c", _RECORDER, str(data), tenant, "15"], stdout=subprocess.PIPE,
                                text=True, env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"})
        try:
            for i, eid in enumerate(victims):
                wm.forget_episode(tenant, eid)
                if i % 10 == 9:
                    wm.purge()
            out, _ = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        assert proc.returncode == 0
        wm.purge()
        recorded = out.split()
        assert len(recorded) == 150
        assert set(wm.store.get_episodes(tenant, recorded)) == set(recorded)
        assert wm.store.get_episodes(tenant, victims) == {}
        assert wm.index.count(tenant) == 150, "every recorded episode keeps its index row"
        hits = wm.recall_experiences(tenant, None, "recorded 14 9", limit=5, options={"min_similarity": 0.0})
        assert hits and all(h["episode_id"] in recorded for h in hits)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_feedback_filters_kept_words_go_with_the_forget_in_every_process(
        tmp_path: Path, tenant: str, where: str, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A big table's feedback-filtered recall keeps the terms of the rated episodes in process
    (memory/index/passing_text.py): a forget drops the forgotten one's at once in the process that
    forgets, and in another process at its next recall; a purge drops the tenant's."""
    from worldgraph.config import WorldGraphConfig
    from worldgraph.memory.index import search
    from worldgraph.memory.index.schema import table_name

    monkeypatch.setattr(search, "WIDE_TEXT_FETCH", 0)  # a third of 31 rows pass: in process, not LanceDB's checked

    kw: dict[str, Any] = {"embedder": HashingEmbedder(64), "config": WorldGraphConfig(mirror_min_rows=1)}
    if where == "s3":
        kw["lancedb_path"] = request.getfixturevalue("s3_env")["uri"]
    marker = f"Zq{uuid.uuid4().hex[:10]}x"
    first, second = WorldModel.open(tmp_path / "data", **kw), WorldModel.open(tmp_path / "data", **kw)
    try:
        ids = first.record_experiences(tenant, [exp(f"braise the leeks {i}", minutes=i) for i in range(30)]
                                       + [exp(f"braise the leeks {marker}", minutes=31)])
        for eid in ids[::3] + [ids[-1]]:
            first.submit_feedback(tenant, eid, 0.9)
        opts = {"min_similarity": -1.0, "min_feedback_score": 0.6}

        def holds(wm: WorldModel) -> bool:
            texts = wm.index._texts.held(table_name(tenant))
            return texts is not None and marker.lower() in texts.vocab

        for wm in (first, second):
            assert ids[-1] in {r["episode_id"] for r in wm.recall_experiences(tenant, None, marker, 20, opts)}
            assert holds(wm) and wm.index.mirror_stats(tenant) is not None  # through the mirror, in process
        first.forget_episode(tenant, ids[-1])
        assert not holds(first)  # at once, before any search
        got = second.recall_experiences(tenant, None, f"braise {marker}", 20, opts)
        assert got and ids[-1] not in {r["episode_id"] for r in got}
        assert not holds(second)  # its next recall saw the delete and dropped the words
        assert second.index._texts.held(table_name(tenant)) is not None  # the others' are still kept
        first.forget_tenant(tenant)
        first.purge()
        assert first.index._texts.held(table_name(tenant)) is None
    finally:
        first.close()
        second.close()
