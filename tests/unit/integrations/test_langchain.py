"""WorldgraphChatMessageHistory against the cases of langchain-core's chat-history tests
(InMemoryChatMessageHistory: add and read back in order, the bulk and the one-message forms,
async forms, clear) with every message kind round-tripped verbatim (tool calls, ids, names,
content blocks, unicode), sessions apart, clear as a forget; and WorldgraphRetriever's
documents, filters and per-call k."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.integrations.conftest import require

require("langchain_core")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from worldgraph import InvalidInputError, WorldModel  # noqa: E402
from worldgraph.integrations.langchain import WorldgraphChatMessageHistory, WorldgraphRetriever  # noqa: E402

MESSAGES: list[BaseMessage] = [
    SystemMessage("You are terse."),
    HumanMessage("What's 6 × 7? ☃", id="m1", name="ana"),
    AIMessage("", tool_calls=[{"name": "calc", "args": {"a": 6, "b": 7}, "id": "c1"}],
              additional_kwargs={"refusal": None}),
    ToolMessage("42", tool_call_id="c1", name="calc"),
    AIMessage([{"type": "text", "text": "It is 42."}, {"type": "text", "text": "東京"}]),
    ChatMessage("a custom role", role="critic"),
    FunctionMessage("{}", name="legacy_fn"),
]


def test_round_trip_in_order(wm: WorldModel, tenant: str) -> None:
    history = WorldgraphChatMessageHistory(wm, tenant, "chat-1")
    assert history.messages == []
    history.add_messages(MESSAGES[:3])
    history.add_messages(MESSAGES[3:])
    assert history.messages == MESSAGES
    history.add_user_message("one more")
    history.add_ai_message("and a reply")
    assert [m.content for m in history.messages[-2:]] == ["one more", "and a reply"]
    roles = [e["agent_role"] for e in reversed(wm.list_episodes(tenant, session_id="chat-1").items)]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "critic", "function", "user", "assistant"]
    assert WorldgraphChatMessageHistory(wm, tenant, "chat-2").messages == []  # sessions apart
    assert WorldgraphChatMessageHistory(wm, tenant + "x", "chat-1").messages == []  # tenants apart


def test_clear_forgets(wm: WorldModel, tenant: str) -> None:
    history = WorldgraphChatMessageHistory(wm, tenant, "chat-1")
    other = WorldgraphChatMessageHistory(wm, tenant, "chat-2")
    history.add_messages(MESSAGES)
    other.add_messages([HumanMessage("kept")])
    history.clear()
    assert history.messages == [] and [m.content for m in other.messages] == ["kept"]
    assert {a["forgotten_by"] for a in wm.store.forget_log(tenant)} == {"langchain chat history clear"}
    history.clear()  # an empty session clears to empty


def test_async_forms(wm: WorldModel, tenant: str) -> None:
    history = WorldgraphChatMessageHistory(wm, tenant, "chat-a")

    async def run() -> None:
        await history.aadd_messages(MESSAGES[:2])
        await asyncio.gather(*[history.aadd_messages([HumanMessage(f"m{i}")]) for i in range(4)])
        got = await history.aget_messages()
        assert got[:2] == MESSAGES[:2] and sorted(str(m.content) for m in got[2:]) == ["m0", "m1", "m2", "m3"]
        await history.aclear()
        assert await history.aget_messages() == []

    asyncio.run(run())


def test_retriever_documents(wm: WorldModel, tenant: str) -> None:
    wm.record_experiences(tenant, [{"agent_id": "notes", "task_type": "note", "outcome": "success",
                                    "task_description": f"apple pie recipe {i}", "learnings": [f"bake {i}0 minutes"],
                                    "metadata": {"n": i}} for i in range(5)])
    retriever = WorldgraphRetriever(model=wm, tenant_id=tenant, k=3, options={"min_similarity": -1.0})
    docs = retriever.invoke("apple pie recipe 2")
    assert len(docs) == 3 and all(isinstance(d, Document) for d in docs)
    top = docs[0]
    assert top.page_content == "apple pie recipe 2\nbake 20 minutes" and top.id == top.metadata["episode_id"]
    assert top.metadata["metadata"] == {"n": 2} and "final" in top.metadata["score_breakdown"]
    assert len(retriever.invoke("apple", k=1)) == 1
    filtered = retriever.invoke("apple", options={"metadata": {"n": {"$gte": 3}}})
    assert sorted(d.metadata["metadata"]["n"] for d in filtered) == [3, 4]
    assert len(asyncio.run(retriever.ainvoke("apple", k=2))) == 2
    with pytest.raises(InvalidInputError):
        retriever.invoke("apple", options={"metadata": {"n": {"$near": 1}}})
    with pytest.raises(InvalidInputError):
        WorldgraphRetriever(model=wm, tenant_id="")
