"""Scene leases (worldgraph.kg.lease), one contract on both stores: a claim is atomic and stamps a
lease; only the holder renews or releases it; an expired lease may be taken over; a merge fenced by
a lost lease writes nothing."""

from __future__ import annotations

import pytest

from tests.unit.kg.test_store_contract import ENV, race, scene, store, tenant  # noqa: F401 - fixtures
from worldgraph.errors import LeaseLostError
from worldgraph.kg.records import GraphView, MergePlan
from worldgraph.kg.store import GraphStore


def at(second: int) -> str:
    return f"2026-01-05T12:00:{second:02d}.000000+00:00"


def test_claim_renew_release_and_take_over(store: GraphStore, tenant: str) -> None:  # noqa: F811
    store.upsert_scene(scene(tenant, "sc"))
    held = store.claim_scene_lease(tenant, "sc", "w1", until=at(30), now=at(0))
    assert held is not None and held["status"] == "running" and held["lease_owner"] == "w1"
    assert store.get_scene(tenant, "sc") == held
    assert store.claim_scene_lease(tenant, "sc", "w2", until=at(40), now=at(10)) is None  # live lease
    assert store.renew_scene_lease(tenant, "sc", "w2", until=at(45), now=at(15)) is False  # not the holder
    assert store.renew_scene_lease(tenant, "sc", "w1", until=at(50), now=at(20)) is True
    assert store.get_scene(tenant, "sc")["lease_until"] == at(50)
    assert store.claim_scene_lease(tenant, "sc", "w2", until=at(59), now=at(40)) is None  # renewed: still live
    taken = store.claim_scene_lease(tenant, "sc", "w2", until=at(59), now=at(51))  # expired: taken over
    assert taken is not None and taken["lease_owner"] == "w2"
    assert store.renew_scene_lease(tenant, "sc", "w1", until=at(58), now=at(52)) is False  # w1 lost it
    assert store.release_scene_lease(tenant, "sc", "w1", "pending", "x", now=at(53)) is False
    assert store.release_scene_lease(tenant, "sc", "w2", "pending", "LLM down", now=at(54)) is True
    back = store.get_scene(tenant, "sc")
    assert back["status"] == "pending" and back["error"] == "LLM down" and "lease_owner" not in back
    assert store.claim_scene_lease(tenant, "missing", "w3", until=at(59), now=at(55)) is None
    assert store.claim_scene_lease(tenant + "-b", "sc", "w3", until=at(59), now=at(55)) is None  # another tenant's
    store.upsert_scene(dict(back, status="merged"))
    assert store.claim_scene_lease(tenant, "sc", "w3", until=at(59), now=at(56)) is None  # merged: never again


def test_a_scene_is_leased_once_under_concurrency(store: GraphStore, tenant: str) -> None:  # noqa: F811
    store.upsert_scene(scene(tenant, "sc-race"))
    results, errors = race(8, lambda: store.claim_scene_lease(tenant, "sc-race", f"w{id(object())}", at(30), at(0)))
    assert errors == [] and sum(1 for r in results if r is not None) == 1


def test_a_merge_fenced_by_a_lost_lease_writes_nothing(store: GraphStore, tenant: str) -> None:  # noqa: F811
    store.upsert_scene(scene(tenant, "sc"))
    assert store.claim_scene_lease(tenant, "sc", "w1", until=at(10), now=at(0)) is not None
    assert store.claim_scene_lease(tenant, "sc", "w2", until=at(40), now=at(20)) is not None  # w1's ran out

    def planner(view: GraphView) -> MergePlan:
        merged = dict(scene(tenant, "sc"), status="merged")
        return MergePlan(tenant_id=tenant, env_name=ENV, scene=merged,  # type: ignore[arg-type]
                         meta={"env_name": ENV, "graph_version": int((view.meta or {}).get("graph_version") or 0) + 1})
    with pytest.raises(LeaseLostError):
        store.merge(tenant, ENV, [], [], planner, fence=("sc", "w1"))
    assert store.get_scene(tenant, "sc")["lease_owner"] == "w2" and store.world_graph(tenant, ENV)["meta"] is None
    meta = store.merge(tenant, ENV, [], [], planner, fence=("sc", "w2"))
    assert meta is not None and meta["graph_version"] == 1
    assert store.get_scene(tenant, "sc")["status"] == "merged"
