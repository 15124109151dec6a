"""WorldgraphStore against the cases LangGraph's own stores are tested for (InMemoryStore's and
SqliteStore's suites): batch order and each op kind, get / put / update / delete, search by
namespace prefix, filters (operators, several, nested and dotted), limit and offset paging,
searches with a query (ranking, an update re-embeds, index=False), edge-case queries,
list_namespaces (prefix, suffix, wildcards, depth, paging, empty), invalid namespaces, unicode and
large values, the async forms, concurrency; and worldgraph's own rules: the tenant is fixed, a
put over a key forgets the old value (gone from every file after purge), the loop never blocks."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.unit.integrations.conftest import require

require("langgraph")

from langgraph.store.base import (  # noqa: E402
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from worldgraph import AsyncWorldModel, InvalidInputError, WorldModel  # noqa: E402
from worldgraph.integrations.langgraph import WorldgraphStore  # noqa: E402
from worldgraph.memory.embeddings import HashingEmbedder  # noqa: E402


@pytest.fixture
def store(wm: WorldModel, tenant: str) -> WorldgraphStore:
    return WorldgraphStore(wm, tenant)


# ------------------------------------------------------------------ batch
def test_batch_order(store: WorldgraphStore) -> None:
    store.put(("test", "foo"), "key1", {"data": "value1"})
    store.put(("test", "bar"), "key2", {"data": "value2"})
    results = store.batch([
        GetOp(("test", "foo"), "key1"),
        PutOp(("test", "bar"), "key2", {"data": "value2"}),
        SearchOp(("test",), filter={"data": "value1"}, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        GetOp(("test",), "key3"),
    ])
    assert len(results) == 5
    assert isinstance(results[0], Item) and results[0].value == {"data": "value1"}
    assert results[0].key == "key1" and results[0].namespace == ("test", "foo")
    assert results[1] is None
    assert [i.key for i in results[2]] == ["key1"]
    assert ("test", "foo") in results[3] and ("test", "bar") in results[3]
    assert results[4] is None
    reordered = store.batch([
        SearchOp(("test",), filter=None, limit=5, offset=0),
        GetOp(("test", "bar"), "key2"),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=5, offset=0),
        PutOp(("test",), "key3", {"data": "value3"}),
        GetOp(("test", "foo"), "key1"),
    ])
    assert len(reordered[0]) == 2 and reordered[1].value == {"data": "value2"}
    assert reordered[3] is None and reordered[4].value == {"data": "value1"}
    assert store.get(("test",), "key3").value == {"data": "value3"}  # type: ignore[union-attr]


def test_batch_get_put_search_list_ops(store: WorldgraphStore) -> None:
    assert store.batch([PutOp(("test",), "key1", {"data": "value1"}), PutOp(("test",), "key2", {"data": "value2"}),
                        PutOp(("test",), "key3", None)]) == [None, None, None]
    got = store.batch([GetOp(("test",), "key1"), GetOp(("test",), "key2"), GetOp(("test",), "key3")])
    assert [g.key if g else None for g in got] == ["key1", "key2", None]
    for ns, key, value in [(("test", "foo"), "k1", {"data": "v1", "tag": "a"}), (("test", "bar"), "k2", {"tag": "a"}),
                           (("test", "baz"), "k3", {"tag": "b"})]:
        store.put(ns, key, value)
    found = store.batch([SearchOp(("test",), filter={"tag": "a"}, limit=10, offset=0),
                         SearchOp(("test",), filter=None, limit=2, offset=0),
                         SearchOp(("test", "foo"), filter=None, limit=10, offset=0)])
    assert sorted(i.key for i in found[0]) == ["k1", "k2"]
    assert len(found[1]) == 2
    assert [i.namespace for i in found[2]] == [("test", "foo")]
    listed = store.batch([ListNamespacesOp(None, None, 10, 0), ListNamespacesOp(None, 1, 10, 0),
                          ListNamespacesOp((MatchCondition("suffix", ("foo",)),), None, 10, 0)])
    assert len(listed[0]) == 4 and listed[1] == [("test",)] and listed[2] == [("test", "foo")]


def test_the_last_put_of_a_key_in_a_batch_wins(store: WorldgraphStore) -> None:
    store.batch([PutOp(("test",), "key", {"value": 1}), PutOp(("test",), "key", {"value": 2})])
    assert store.get(("test",), "key").value == {"value": 2}  # type: ignore[union-attr]
    assert len(store.search(("test",))) == 1


# ------------------------------------------------------------------ items
def test_basic_store_ops(store: WorldgraphStore) -> None:
    ns = ("test", "documents")
    store.put(ns, "doc1", {"title": "Test Document", "content": "Hello, World!"})
    item = store.get(ns, "doc1")
    assert item is not None and item.namespace == ns and item.key == "doc1"
    assert item.value == {"title": "Test Document", "content": "Hello, World!"}
    time.sleep(0.01)
    store.put(ns, "doc1", {"title": "Updated Document", "content": "Hello, Updated!"})
    updated = store.get(ns, "doc1")
    assert updated is not None and updated.value == {"title": "Updated Document", "content": "Hello, Updated!"}
    assert updated.updated_at > item.updated_at
    assert store.get(("test", "other_documents"), "doc1") is None
    store.delete(ns, "doc1")
    assert store.get(ns, "doc1") is None
    store.delete(ns, "doc1")  # deleting what is gone is done


def test_unicode_keys_values_and_large_values(store: WorldgraphStore) -> None:
    value = {"text": "Zürich ☃ 東京 🚀", "nested": {"emoji": ["🙂", "é"], "n": 1.5}, "none": None, "flag": True}
    store.put(("users", "ünï"), "ключ", value)
    assert store.get(("users", "ünï"), "ключ").value == value  # type: ignore[union-attr]
    assert [i.key for i in store.search(("users",), query="Zürich 東京")] == ["ключ"]
    big = {"chunks": [f"{i} " + "lorem ipsum " * 5_000 for i in range(6)]}  # ~360 kB of text
    store.put(("docs",), "big", big)
    assert store.get(("docs",), "big").value == big  # type: ignore[union-attr]
    assert store.search(("docs",), query="lorem ipsum")[0].key == "big"
    with pytest.raises(InvalidInputError) as err:  # past the model's limits: a worldgraph error naming it
        store.put(("docs",), "huge", {"text": "x" * 70_000})
    assert "max_text_bytes" in str(err.value)


def test_invalid_namespaces(store: WorldgraphStore) -> None:
    doc = {"foo": "bar"}
    for ns in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):  # LangGraph's own check, before the store
            store.put(ns, "foo", doc)
    store.put(("foo", "langgraph", "foo"), "bar", doc)
    assert store.get(("foo", "langgraph", "foo"), "bar").value == doc  # type: ignore[union-attr]
    assert store.search(("foo", "langgraph", "foo"))[0].value == doc
    store.batch([PutOp(("langgraph", "foo"), "bar", doc)])  # past the public put, as InMemoryStore allows
    assert store.get(("langgraph", "foo"), "bar").value == doc  # type: ignore[union-attr]
    for ns in [(), ("a.b",), ("",)]:  # what the store cannot keep is a worldgraph error naming the field
        with pytest.raises(InvalidInputError) as err:
            store.batch([PutOp(ns, "k", doc)])
        assert err.value.field == "namespace"


# ------------------------------------------------------------------ search without a query
def test_search_namespace_filter_and_paging(store: WorldgraphStore) -> None:
    data = [(("test", "docs"), "doc1", {"title": "First Doc", "author": "Alice", "tags": ["important"]}),
            (("test", "docs"), "doc2", {"title": "Second Doc", "author": "Bob", "tags": ["draft"]}),
            (("test", "images"), "img1", {"title": "Image 1", "author": "Alice", "tags": ["final"]})]
    for ns, key, value in data:
        store.put(ns, key, value)
    assert len(store.search(("test",))) == 3
    assert {i.namespace for i in store.search(("test", "docs"))} == {("test", "docs")}
    assert sorted(i.key for i in store.search(("test",), filter={"author": "Alice"})) == ["doc1", "img1"]
    assert [i.key for i in store.search(("test",), filter={"tags": ["draft"]})] == ["doc2"]
    assert len(store.search(("test",), limit=2)) == 2
    assert len(store.search(("test",), offset=2)) == 1
    # newest first, and pages that tile the whole
    assert [i.key for i in store.search(("test",))] == ["img1", "doc2", "doc1"]
    pages = [store.search(("test",), limit=1, offset=n)[0].key for n in range(3)]
    assert pages == ["img1", "doc2", "doc1"]
    assert store.search(("nothing",)) == [] and store.search(("test",), limit=0) == []
    assert len(store.search(())) == 3  # the empty prefix: the whole store


def test_filters_operators_nested_and_dotted(store: WorldgraphStore) -> None:
    for key, value in [("doc1", {"text": "red apple", "color": "red", "score": 4.5, "user": {"level": 2}}),
                       ("doc2", {"text": "red car", "color": "red", "score": 3.0, "user": {"level": 1}}),
                       ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
                       ("doc4", {"text": "blue car", "color": "blue", "score": 3.5})]:
        store.put(("test",), key, value)

    def keys(**kw: Any) -> list[str]:
        return sorted(i.key for i in store.search(("test",), **kw))

    assert keys(filter={"score": {"$gt": 3.2}}) == ["doc1", "doc3", "doc4"]
    assert keys(filter={"score": {"$gte": 4.0}, "color": "green"}) == ["doc3"]
    assert keys(filter={"score": {"$lt": 4.0}, "color": {"$ne": "blue"}}) == ["doc2"]
    assert keys(filter={"score": {"$lte": 3.0}}) == ["doc2"]
    assert keys(filter={"color": {"$eq": "red"}}) == ["doc1", "doc2"]
    assert keys(filter={"user": {"level": 2}}) == ["doc1"]
    assert keys(filter={"user.level": {"$gte": 1}}) == ["doc1", "doc2"]
    with pytest.raises(InvalidInputError):
        store.search(("test",), filter={"score": {"$between": [1, 2]}})


# ------------------------------------------------------------------ search with a query
def test_search_with_query_ranks_and_filters(store: WorldgraphStore) -> None:
    for key, value in [("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
                       ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
                       ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
                       ("doc4", {"text": "blue car", "color": "blue", "score": 3.5})]:
        store.put(("test",), key, value)
    results = store.search(("test",), query="apple", filter={"color": "red"})
    assert [r.key for r in results] == ["doc1", "doc2"] and results[0].score > results[1].score
    assert [r.key for r in store.search(("test",), query="car", filter={"color": "red"})][0] == "doc2"
    assert [r.key for r in store.search(("test",), query="blue car", filter={"score": {"$gt": 3.2}})][0] == "doc4"
    assert [r.key for r in store.search(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})] \
        == ["doc3"]


def test_an_update_re_embeds_and_index_false_is_not_searched(store: WorldgraphStore) -> None:
    store.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    store.put(("test",), "doc2", {"text": "something about dogs"})
    store.put(("test",), "doc3", {"text": "text about birds"})
    first = store.search(("test",), query="Zany Xerxes")
    assert first[0].key == "doc1"
    store.put(("test",), "doc1", {"text": "new text about dogs"})
    after = {r.key: r.score for r in store.search(("test",), query="Zany Xerxes")}
    assert after["doc1"] < first[0].score
    store.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    assert "doc4" not in [r.key for r in store.search(("test",), query="new text about dogs", limit=3)]
    assert store.get(("test",), "doc4") is not None  # kept, only not searched by meaning
    store.put(("test",), "doc5", {"title": "cats", "body": "ignored words"}, index=["title"])
    assert store.search(("test",), query="cats", limit=1)[0].key == "doc5"


def test_search_with_query_pages(store: WorldgraphStore) -> None:
    for i in range(5):
        store.put(("test",), f"doc{i}", {"text": f"test document number {i}"})
    page1 = store.search(("test",), query="test", limit=2)
    page2 = store.search(("test",), query="test", limit=2, offset=2)
    page3 = store.search(("test",), query="test", limit=2, offset=4)
    assert len(page1) == len(page2) == 2 and len(page3) == 1
    assert len({r.key for r in page1 + page2 + page3}) == 5
    assert [r.key for r in store.search(("test",), query="test", limit=10)] == [r.key for r in page1 + page2 + page3]
    with pytest.raises(InvalidInputError):
        store.search(("test",), query="test", limit=10, offset=995)


@pytest.mark.parametrize("query", ["", None, "test " * 100, "test!@#$%^&*()", "!!!"])
def test_search_edge_case_queries(store: WorldgraphStore, query: str | None) -> None:
    store.put(("test",), "doc1", {"text": "test document"})
    assert len(store.search(("test",), query=query)) == 1


# ------------------------------------------------------------------ list_namespaces
NAMESPACES = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f"),
              ("b", "a", "f"), ("users", "123"), ("users", "456", "settings"), ("admin", "users", "789")]


def test_list_namespaces(store: WorldgraphStore) -> None:
    assert store.list_namespaces() == []
    store.batch([PutOp(ns, f"id_{i}", {"data": f"value_{i:02d}"}) for i, ns in enumerate(NAMESPACES)])
    assert sorted(store.list_namespaces()) == sorted(NAMESPACES)
    assert sorted(store.list_namespaces(prefix=("a", "b"))) == [("a", "b", "c"), ("a", "b", "d", "e"),
                                                                 ("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(store.list_namespaces(suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert sorted(store.list_namespaces(prefix=("a",), suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert store.list_namespaces(prefix=("a", "b"), limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert store.list_namespaces(prefix=("a", "b"), offset=2) == [("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(store.list_namespaces(prefix=("a", "*", "f"))) == [("a", "b", "f"), ("a", "c", "f")]
    assert sorted(store.list_namespaces(suffix=("*", "f"))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("nonexistent",)) == []
    assert store.list_namespaces(prefix=("users", "123")) == [("users", "123")]
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
    assert sorted(store.list_namespaces(max_depth=2)) == [("a", "b"), ("a", "c"), ("admin", "users"), ("b", "a"),
                                                          ("users", "123"), ("users", "456")]


def test_list_namespaces_pages(store: WorldgraphStore) -> None:
    store.batch([PutOp(("namespace", f"sub_{i:02d}"), f"id_{i:02d}", {"data": i}) for i in range(20)])
    for offset in (0, 5, 15):
        assert store.list_namespaces(prefix=("namespace",), limit=5, offset=offset) == \
            [("namespace", f"sub_{i:02d}") for i in range(offset, offset + 5)]


# ------------------------------------------------------------------ worldgraph's rules
def test_the_tenant_is_fixed(wm: WorldModel) -> None:
    a, b = WorldgraphStore(wm, "tenant-a"), WorldgraphStore(wm, "tenant-b")
    a.put(("memories", "u1"), "k", {"text": "alpha secret"})
    assert b.get(("memories", "u1"), "k") is None
    assert b.search(("memories",), query="alpha secret") == [] and b.list_namespaces() == []
    with pytest.raises(InvalidInputError):
        WorldgraphStore(wm, "")
    # two roles in one tenant are two stores
    other = WorldgraphStore(wm, "tenant-a", agent_role="notes")
    assert other.list_namespaces() == [] and other.get(("memories", "u1"), "k") is None


def test_a_put_over_a_key_forgets_the_old_value(tmp_path: Path) -> None:
    secret = f"zq{uuid.uuid4().hex[:10]}x"
    data = tmp_path / "data"
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        store = WorldgraphStore(wm, "acme")
        store.put(("memories", "u1"), "k", {"text": f"the code is {secret}"})
        store.put(("memories", "u1"), "gone", {"text": f"also {secret}"})
        wm.index.ensure_indexes(vector=False)
        store.put(("memories", "u1"), "k", {"text": "the code changed"})
        store.delete(("memories", "u1"), "gone")
        assert [r.value for r in store.search(("memories",), query=secret)] == [{"text": "the code changed"}]
        kinds = sorted(a["forgotten_by"] for a in wm.store.forget_log("acme"))
        assert kinds == ["langgraph store delete", "replaced by record_experience"]
        wm.purge()
    assert [p for p in data.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()] == []


class SlowEmbedder(HashingEmbedder):
    """Embeds after a pause: a blocked event loop would stall for it."""

    def embed(self, texts: list[str]) -> np.ndarray:
        time.sleep(0.3)
        return super().embed(texts)


def test_async_methods_never_block_the_loop(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path / "d", embedder=SlowEmbedder(64)) as wm:
        store = WorldgraphStore(AsyncWorldModel(wm), "acme")

        async def run() -> int:
            ticks = 0

            async def heartbeat() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            beat = asyncio.create_task(heartbeat())
            await store.aput(("m",), "k", {"text": "slow to embed"})
            assert [r.key for r in await store.asearch(("m",), query="slow")] == ["k"]
            beat.cancel()
            return ticks

        assert asyncio.run(run()) >= 20  # >= 0.6 s of embedding, the loop ticking through it


def test_async_forms_and_concurrency(store: WorldgraphStore) -> None:
    docs = [(f"doc{i}", {"text": f"{c} {item}", "color": c, "score": s, "index": i})
            for i, (c, item, s) in enumerate(zip(["red", "blue", "green", "yellow", "purple"] * 4,
                                                 ["apple", "car", "house", "book", "phone"] * 4,
                                                 [3.0, 3.5, 4.0, 4.5, 5.0] * 4))]

    async def run() -> None:
        await asyncio.gather(*[store.aput(("test",), k, v) for k, v in docs])
        await asyncio.gather(*[store.adelete(("test",), k) for k, _ in docs[:5]])
        assert len(await store.asearch(("test",), limit=50)) == 15
        assert (await store.aget(("test",), "doc5")).value == docs[5][1]  # type: ignore[union-attr]
        assert await store.aget(("test",), "doc0") is None
        queries = [("apple", {"color": "red"}), ("car", {"score": {"$lte": 3.5}}), ("house", {"index": {"$gt": 10}})]
        found = await asyncio.gather(*[store.asearch(("test",), query=q, filter=f) for q, f in queries])
        assert all(r.value["color"] == "red" for r in found[0]) and found[0]
        assert all(r.value["score"] <= 3.5 for r in found[1]) and found[1]
        assert all(r.value["index"] > 10 for r in found[2]) and found[2]
        assert await store.alist_namespaces() == [("test",)]
        results = await store.abatch([GetOp(("test",), "doc6"), SearchOp(("test",), {"color": "blue"}, 10, 0)])
        assert results[0].value["index"] == 6 and {r.value["color"] for r in results[1]} == {"blue"}

    asyncio.run(run())
