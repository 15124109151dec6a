"""Short episode ids: a tenant-scoped prefix lookup on both stores (the CLI prints 8 characters)."""

from __future__ import annotations

from tests.unit.kg.test_store_contract import add, episode, store, tenant  # noqa: F401 - fixtures
from worldgraph.kg.store import GraphStore


def test_episode_ids_with_prefix_stays_inside_the_tenant(store: GraphStore, tenant: str) -> None:  # noqa: F811
    ids = add(store, tenant, *(episode(tenant, minutes=i, episode_id=f"abcd{i:04d}-x") for i in range(3)))
    other = f"{tenant}-other"
    add(store, other, episode(other, episode_id="abcd9999-x"))
    assert store.episode_ids_with_prefix(tenant, "abcd") == sorted(ids)
    assert store.episode_ids_with_prefix(tenant, "abcd0001") == ["abcd0001-x"]
    assert store.episode_ids_with_prefix(tenant, "abcd", limit=2) == sorted(ids)[:2]
    assert store.episode_ids_with_prefix(tenant, "abcd9") == []  # another tenant's id is never seen
    assert store.episode_ids_with_prefix(other, "abcd") == ["abcd9999-x"]
