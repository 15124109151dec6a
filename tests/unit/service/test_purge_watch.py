"""Every process lets go of what a purge removed (facade/generations.py), on both stores: a purge
bumps the purged tenants' generations in the store; another process sees them move within a
second (and before its next query) and drops what it holds of them: the index table's in-process
copy and handle, its sentence vectors, the Cypher projection, the rounds of its history whose
episodes are gone. (tests/live/test_purge_release.py checks the open files of a running server.)"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from tests.unit.service.test_forget import graph_kw  # noqa: F401 - the fixture: both stores
from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder


def test_another_process_lets_go_within_a_second(tmp_path: Path, graph_kw: dict[str, Any]) -> None:
    tenant, bystander = f"t-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    run = {"agent_id": "a", "task_type": "t", "outcome": "success"}
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64), **graph_kw) as holder:
        ids = holder.record_experiences(tenant, [{**run, "task_description": f"walnut pantry {i}"} for i in range(5)])
        holder.record_experience(bystander, {**run, "task_description": "walnut pantry"})
        for t in (tenant, bystander):
            assert holder.recall_experiences(t, None, "walnut pantry", options={"min_similarity": 0.0})
            assert holder.index.in_process(t), "a small table is searched from this process's copy"
        holder.observe_round(tenant, "Cellar", {"round": 1, "action": "look", "response": "look"})
        assert holder.world.history.episode_ids(tenant)
        released = holder.purges.released
        # another process (its own folder for the index when the store is a server's)
        other_path = tmp_path / ("data" if not graph_kw else "other")
        with WorldModel.open(other_path, embedder=HashingEmbedder(64), **graph_kw) as purger:
            purger.forget_episode(tenant, ids[0])
            round_id = [e["id"] for e in purger.list_episodes(tenant).items if e["task_type"] == "environment_round"]
            purger.forget_episode(tenant, round_id[0])
            purger.purge()
        deadline = time.monotonic() + 1.5
        while holder.purges.released == released and time.monotonic() < deadline:
            time.sleep(0.05)
        # (with Neo4j, the purge also finishes other tests' unpurged forgets: their tenants move too)
        assert holder.purges.released >= released + 1, "the purged tenant, within a second"
        assert not holder.index.in_process(tenant), "its table's copy was dropped"
        assert holder.index.in_process(bystander), "another tenant's stays"
        assert holder.world.history.episode_ids(tenant) == [], "the forgotten round left the history"
        assert holder.purges.check() == [], "nothing new"
        hits = holder.recall_experiences(tenant, None, "walnut pantry 0", options={"min_similarity": 0.0})
        assert ids[0] not in [h["episode_id"] for h in hits] and len(hits) == 4


def test_a_query_checks_first(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64)) as holder:
        holder.purges.stop()  # no background tick: the query's own check must do it
        eid = holder.record_experience("t", {"agent_id": "a", "task_type": "t", "outcome": "success",
                                             "task_description": "walnut"})
        assert holder.cypher("t", "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n") == [{"n": 1}]
        with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64)) as purger:
            purger.forget_episode("t", eid)
            purger.purge()
        assert holder.purges.released == 0
        assert holder.cypher("t", "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n") == [{"n": 0}]
        assert holder.purges.released == 1
