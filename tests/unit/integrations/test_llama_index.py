"""The LlamaIndex adapters: WorldgraphRetriever (NodeWithScore, scores in order, MetadataFilters as
metadata conditions, the unsupported ones refused by name, sync and async) and
WorldgraphMemoryBlock inside LlamaIndex's Memory (messages the short-term memory flushes are
recorded as turns of the session, verbatim; a get recalls what the latest messages ask, from the
tenant or the session only; empty input gives an empty block)."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.integrations.conftest import require

require("llama_index.core")

from llama_index.core.llms import ChatMessage  # noqa: E402
from llama_index.core.memory import Memory  # noqa: E402
from llama_index.core.schema import NodeWithScore, TextNode  # noqa: E402
from llama_index.core.vector_stores.types import FilterCondition, MetadataFilter, MetadataFilters  # noqa: E402

from worldgraph import InvalidInputError, WorldModel  # noqa: E402
from worldgraph.integrations.llama_index import WorldgraphMemoryBlock, WorldgraphRetriever  # noqa: E402


def notes(wm: WorldModel, tenant: str) -> list[str]:
    return wm.record_experiences(tenant, [{"agent_id": "notes", "task_type": "note", "outcome": "success",
                                           "task_description": f"garden note {i}: water the tomatoes",
                                           "metadata": {"bed": ["north", "south"][i % 2], "n": i}} for i in range(6)])


def test_retriever(wm: WorldModel, tenant: str) -> None:
    ids = notes(wm, tenant)
    retriever = WorldgraphRetriever(wm, tenant, similarity_top_k=4, options={"min_similarity": -1.0})
    hits = retriever.retrieve("garden note 3: water the tomatoes")
    assert len(hits) == 4 and all(isinstance(h, NodeWithScore) and isinstance(h.node, TextNode) for h in hits)
    assert hits[0].node.id_ == ids[3] and hits[0].node.metadata["metadata"] == {"bed": "south", "n": 3}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    filters = MetadataFilters(filters=[MetadataFilter(key="bed", value="north"),
                                       MetadataFilter(key="n", value=2, operator=">=")])
    north = WorldgraphRetriever(wm, tenant, similarity_top_k=10, filters=filters, options={"min_similarity": -1.0})
    assert sorted(h.node.metadata["metadata"]["n"] for h in north.retrieve("tomatoes")) == [2, 4]
    inside = MetadataFilters(filters=[MetadataFilter(key="n", value=[1, 5], operator="in")])
    got = asyncio.run(WorldgraphRetriever(wm, tenant, filters=inside, options={"min_similarity": -1.0})
                      .aretrieve("tomatoes"))
    assert sorted(h.node.metadata["metadata"]["n"] for h in got) == [1, 5]
    with pytest.raises(InvalidInputError):
        WorldgraphRetriever(wm, tenant, filters=MetadataFilters(
            filters=[MetadataFilter(key="bed", value="north")], condition=FilterCondition.OR))
    with pytest.raises(InvalidInputError) as err:
        WorldgraphRetriever(wm, tenant, filters=MetadataFilters(
            filters=[MetadataFilter(key="bed", value="nor", operator="text_match")]))
    assert "text_match" in str(err.value)


def test_memory_block_in_memory(wm: WorldModel, tenant: str) -> None:
    block = WorldgraphMemoryBlock(model=wm, tenant_id=tenant, session_id="chat-1", options={"min_similarity": -1.0})
    memory = Memory.from_defaults(session_id="chat-1", token_limit=60, chat_history_token_ratio=0.5,
                                  token_flush_size=10, memory_blocks=[block])

    async def run() -> None:
        assert await block.aget([]) == ""
        for i in range(5):
            await memory.aput(ChatMessage(role="user", content=f"My cat Miso turned {i} years old ☃ " * 2))
            await memory.aput(ChatMessage(role="assistant", content=f"Happy birthday {i}!"))
        turns = wm.list_episodes(tenant, session_id="chat-1").items
        assert turns and {t["agent_role"] for t in turns} == {"user", "assistant"}
        assert all(t["metadata"]["session_id"] == "chat-1" and "blocks" in t["metadata"]["message"] for t in turns)
        text = await block.aget([ChatMessage(role="user", content="how old is my cat Miso?")])
        assert "Miso" in text and text.startswith("- [")
        other = WorldgraphMemoryBlock(model=wm, tenant_id=tenant, session_id="chat-2", session_only=True)
        assert await other.aget([ChatMessage(role="user", content="how old is my cat Miso?")]) == ""
        assert "Miso" in (await memory.aget())[0].content

    asyncio.run(run())
    with pytest.raises(InvalidInputError):
        WorldgraphMemoryBlock(model=wm, tenant_id="")
