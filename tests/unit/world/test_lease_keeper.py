"""The lease keeper (worldgraph.world.lease_keeper) on a real Neo4j: a merge that holds one packet's
lock does not starve the renewals of the process's other packets.

Neo4j only: there a renewal locks one scene, and a merge holds its scene's lock to the commit. The
embedded store has one writer at a time (SQLite), so every write, a claim included, waits for a
merge there: nobody can take a packet over meanwhile."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.unit.kg.test_store_contract import ENV, scene
from worldgraph.clock import now_iso
from worldgraph.kg.neo4j.store import Neo4jGraphStore
from worldgraph.kg.records import GraphView, MergePlan
from worldgraph.world.lease_keeper import LeaseKeeper

LEASE = 0.9


@pytest.fixture
def store(neo4j_server: dict[str, str]) -> Iterator[Neo4jGraphStore]:
    s = Neo4jGraphStore(neo4j_server["uri"], neo4j_server["user"], neo4j_server["password"])
    yield s
    s.close()


@pytest.mark.neo4j
def test_a_slow_merge_of_one_packet_leaves_the_other_leases_renewed(store: Neo4jGraphStore) -> None:
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    keeper = LeaseKeeper(store, LEASE)
    for sid, owner in (("sc-a", "w-a"), ("sc-b", "w-b")):
        store.upsert_scene(scene(tenant, sid))  # type: ignore[arg-type]
        assert store.claim_scene_lease(tenant, sid, owner, keeper.until(), now_iso()) is not None
    merging = threading.Event()

    def planner(view: GraphView) -> MergePlan:
        merging.set()  # inside sc-a's fenced merge: its lock is held until the commit, 4 leases on
        time.sleep(4 * LEASE)
        return MergePlan(tenant_id=tenant, env_name=ENV, scene=dict(scene(tenant, "sc-a"), status="merged"),  # type: ignore[arg-type]
                         meta={"env_name": ENV, "graph_version": 1})

    with keeper.hold(tenant, "sc-a", "w-a"), keeper.hold(tenant, "sc-b", "w-b") as b:
        merge = threading.Thread(target=store.merge, args=(tenant, ENV, [], [], planner), kwargs={"fence": ("sc-a", "w-a")})
        merge.start()
        assert merging.wait(30)
        taken = None  # another worker looking for packets meanwhile
        while merge.is_alive() and taken is None:
            taken = store.claim_scene_lease(tenant, "sc-b", "another", keeper.until(), now_iso())
            time.sleep(0.1)
        merge.join(60)
    assert taken is None and not b.lost, "sc-b's holder was alive: its lease must have been renewed"
    assert store.get_scene(tenant, "sc-a")["status"] == "merged"  # type: ignore[index]
    assert store.get_scene(tenant, "sc-b")["lease_owner"] == "w-b"  # type: ignore[index,typeddict-item]
