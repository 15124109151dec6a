"""WorldgraphSession against the cases of the Agents SDK's SQLiteSession tests (add and read back,
get_items with a limit, pop_item down to empty and on an empty session, sessions apart, clear,
concurrent add_items) with every kind of item round-tripped verbatim; and worldgraph_tools: the
tools an agent gets, what they record and recall, and for whom."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.unit.integrations.conftest import require

require("agents")

from agents import FunctionTool  # noqa: E402
from agents.memory import Session  # noqa: E402
from agents.tool_context import ToolContext as SdkToolContext  # noqa: E402

from worldgraph import AsyncWorldModel, InvalidInputError, WorldModel  # noqa: E402
from worldgraph.integrations.openai_agents import TOOLS, WorldgraphSession, worldgraph_tools  # noqa: E402

ITEMS: list[Any] = [
    {"role": "user", "content": "Hello ☃ 東京"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "Hi there!", "annotations": []}],
     "id": "msg_1", "type": "message", "status": "completed"},
    {"type": "function_call", "name": "lookup", "arguments": "{\"q\": \"x\"}", "call_id": "c1", "id": "fc_1"},
    {"type": "function_call_output", "call_id": "c1", "output": "found it"},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"role": "system", "content": "be brief"},
]


def test_items_round_trip_with_limits(wm: WorldModel, tenant: str) -> None:
    session = WorldgraphSession(wm, tenant, "s1")
    assert isinstance(session, Session)

    async def run() -> None:
        assert await session.get_items() == []
        await session.add_items(ITEMS)
        assert await session.get_items() == ITEMS
        assert await session.get_items(limit=2) == ITEMS[-2:]
        assert await session.get_items(limit=4) == ITEMS[-4:]
        assert await session.get_items(limit=10) == ITEMS
        assert await session.get_items(limit=0) == []
        await session.add_items([])
        assert len(await session.get_items()) == len(ITEMS)

    asyncio.run(run())
    roles = [e["agent_role"] for e in reversed(wm.list_episodes(tenant, session_id="s1").items)]
    assert roles == ["user", "assistant", "function_call", "function_call_output", "reasoning", "system"]


def test_pop_item(wm: WorldModel, tenant: str) -> None:
    session = WorldgraphSession(AsyncWorldModel(wm), tenant, "pop")
    other = WorldgraphSession(wm, tenant, "other")

    async def run() -> None:
        assert await session.pop_item() is None
        await session.add_items(ITEMS[:3])
        await other.add_items([{"role": "user", "content": "Session 2 message"}])
        assert await session.pop_item() == ITEMS[2]
        assert await session.get_items() == ITEMS[:2]
        assert await session.pop_item() == ITEMS[1]
        assert await session.pop_item() == ITEMS[0]
        assert await session.pop_item() is None and await session.get_items() == []
        assert [i["content"] for i in await other.get_items()] == ["Session 2 message"]

    asyncio.run(run())
    assert {a["forgotten_by"] for a in wm.store.forget_log(tenant)} == {"agents session pop"}


def test_clear_and_concurrent_adds(wm: WorldModel, tenant: str) -> None:
    session = WorldgraphSession(wm, tenant, "busy")
    other = WorldgraphSession(wm, tenant, "quiet")

    async def run() -> None:
        await other.add_items([{"role": "user", "content": "stays"}])
        await asyncio.gather(*[session.add_items([{"role": "user", "content": f"m{i}"},
                                                  {"role": "assistant", "content": f"r{i}"}]) for i in range(8)])
        got = [i["content"] for i in await session.get_items()]
        assert sorted(got) == sorted([f"m{i}" for i in range(8)] + [f"r{i}" for i in range(8)])
        assert all(got.index(f"m{i}") + 1 == got.index(f"r{i}") for i in range(8))  # each call's items together
        await session.clear_session()
        assert await session.get_items() == []
        assert [i["content"] for i in await other.get_items()] == ["stays"]
        await session.clear_session()

    asyncio.run(run())
    with pytest.raises(InvalidInputError):
        asyncio.run(WorldgraphSession(wm, tenant, "bad").add_items(["not a dict"]))


def test_tools_record_and_recall_for_one_tenant_and_agent(wm: WorldModel, tenant: str) -> None:
    tools = worldgraph_tools(wm, tenant, agent_id="assistant")
    assert [t.name for t in tools] == ["recall_memories", "record_memory"]
    assert all(isinstance(t, FunctionTool) for t in tools)
    for tool in tools:  # the model fills only these: never a tenant or an agent
        assert not {"tenant_id", "agent_id", "tenant"} & set(tool.params_json_schema["properties"])
    recall, record = tools

    async def invoke(tool: FunctionTool, args: dict[str, Any]) -> Any:
        ctx = SdkToolContext(context=None, tool_name=tool.name, tool_call_id="c", tool_arguments=json.dumps(args))
        return json.loads(await tool.on_invoke_tool(ctx, json.dumps(args)))

    async def run() -> None:
        saved = await invoke(record, {"text": "The staging database password rotates on Mondays",
                                      "learnings": ["rotate creds weekly"], "outcome": "success"})
        episode = wm.get_episode(tenant, saved["remembered"])
        assert (episode["agent_id"], episode["learnings"]) == ("assistant", ["rotate creds weekly"])
        found = await invoke(recall, {"query": "when does the staging password rotate?", "limit": 3})
        assert found[0]["id"] == saved["remembered"] and found[0]["learnings"] == ["rotate creds weekly"]
        other = worldgraph_tools(wm, tenant + "-other", agent_id="assistant")[0]
        assert await invoke(other, {"query": "staging database password", "limit": 3}) == []

    asyncio.run(run())


def test_the_tool_table_is_the_extension_point(wm: WorldModel, tenant: str) -> None:
    assert worldgraph_tools(wm, tenant, include=["recall"])[0].name == "recall_memories"
    with pytest.raises(InvalidInputError) as err:
        worldgraph_tools(wm, tenant, include=["search_world"])
    assert err.value.field == "include"
    with pytest.raises(InvalidInputError):
        worldgraph_tools(wm, "", agent_id="a")
    assert sorted(TOOLS) == ["recall", "record"]
