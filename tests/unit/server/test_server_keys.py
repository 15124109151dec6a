"""API keys on both stores: created once, stored only as a hash, checked in constant time,
revoked for every process sharing the store."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.kg.test_store_contract import _open
from worldgraph.errors import InvalidInputError, NotFoundError
from worldgraph.kg.embedded.store import EmbeddedGraphStore
from worldgraph.kg.store import GraphStore
from worldgraph.server.keys import ApiKeys, hash_key


@pytest.fixture(params=["embedded", pytest.param("neo4j", marks=pytest.mark.neo4j)])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def stores(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[GraphStore, GraphStore]]:
    """Two connections to one store, like two server processes."""
    a, b = _open(kind, tmp_path, request), _open(kind, tmp_path, request)
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def test_create_check_list_revoke_across_connections(stores: tuple[GraphStore, GraphStore], tenant: str) -> None:
    one, two = ApiKeys(stores[0]), ApiKeys(stores[1])
    key, record = one.create(tenant, "ci runner")
    assert key.startswith(f"wg_{record['id']}_") and len(key) == 3 + 16 + 1 + 43
    assert record == {"id": record["id"], "tenant_id": tenant, "name": "ci runner",
                      "created_at": record["created_at"], "revoked_at": None,
                      "scopes": ["read", "write"]}  # a key made without --scope reads and writes
    assert two.tenant_of(key) == tenant  # the other "process" sees the new key
    other_key, _ = one.create(tenant)
    assert key != other_key and two.tenant_of(other_key) == tenant

    listed = two.list(tenant)
    assert [r["id"] for r in listed] == [record["id"], other_key.split("_")[1]]
    assert all("key_hash" not in r for r in listed)
    assert record["id"] in {r["id"] for r in two.list()}  # all tenants

    revoked = two.revoke(record["id"])
    assert revoked["revoked_at"] is not None
    assert one.tenant_of(key) is None  # refused at once by the first "process": no cache
    assert one.tenant_of(other_key) == tenant
    assert one.revoke(record["id"])["revoked_at"] == revoked["revoked_at"]  # idempotent, first time kept


def test_only_a_valid_key_names_a_tenant(stores: tuple[GraphStore, GraphStore], tenant: str) -> None:
    keys = ApiKeys(stores[0])
    key, record = keys.create(tenant)
    secret = key.split("_", 2)[2]  # wg_<id>_<secret>: the secret may hold "_" itself
    tampered = key[:-1] + ("A" if key[-1] != "A" else "B")
    assert keys.tenant_of(tampered) is None  # right id, wrong secret
    assert keys.tenant_of(f"wg_{'0' * 16}_{secret}") is None  # unknown id
    for junk in ("", "wg_", key + "x", key.upper(), f"Bearer {key}", secret):
        assert keys.tenant_of(junk) is None
    stored = stores[0].get_api_key(record["id"])
    assert stored is not None and stored["key_hash"] == hash_key(key) and key not in str(stored)


def test_bad_input_and_unknown_ids(stores: tuple[GraphStore, GraphStore]) -> None:
    keys = ApiKeys(stores[0])
    with pytest.raises(InvalidInputError) as bad:
        keys.create("no spaces allowed")
    assert bad.value.field == "tenant"
    with pytest.raises(InvalidInputError):
        keys.revoke("not-a-key-id")
    with pytest.raises(NotFoundError):
        keys.revoke("0123456789abcdef")


def test_embedded_file_holds_no_key(tmp_path: Path) -> None:
    store = EmbeddedGraphStore(tmp_path / "worldgraph.db")
    key, _ = ApiKeys(store).create("acme")
    store.close()
    with sqlite3.connect(tmp_path / "worldgraph.db") as conn:
        dump = "\n".join(conn.iterdump())
    assert hash_key(key) in dump and key.split("_", 2)[2] not in dump  # wg_<id>_<secret>: the secret may hold "_" itself
