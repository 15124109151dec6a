"""worldgraph for the OpenAI Agents SDK (``pip install 'worldgraph[openai-agents]'``):

- ``WorldgraphSession``, the SDK's ``Session`` protocol (``get_items(limit)``, ``add_items``,
  ``pop_item``, ``clear_session``) over one conversation session: each item is a turn (its role,
  or its type for tool calls and their outputs; its text, empty for a call), the item itself kept
  verbatim in the turn's metadata and read back in order; ``pop_item`` and ``clear_session``
  forget.
- ``worldgraph_tools(model, tenant_id, agent_id=...)``: function tools the agent calls to recall
  its memories and record new ones, for its one tenant and agent (a tool's arguments, which the
  model writes, never name them).

    from agents import Agent, Runner
    from worldgraph.integrations.openai_agents import WorldgraphSession, worldgraph_tools

    session = WorldgraphSession(wm, tenant_id="acme", session_id="chat-42")
    agent = Agent(name="assistant", tools=worldgraph_tools(wm, tenant_id="acme", agent_id="assistant"))
    await Runner.run(agent, "Where did I park?", session=session)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agents import FunctionTool, function_tool

from worldgraph import AsyncWorldModel, InvalidInputError, NotFoundError, WorldModel
from worldgraph.integrations.common import Steps, arun, bind, call, content_text, forget_turns, session_turns

__all__ = ["DEFAULT_TOOLS", "TOOLS", "ToolContext", "WorldgraphSession", "item_turn", "worldgraph_tools"]


class WorldgraphSession:
    """A conversation session of the Agents SDK kept in worldgraph (see the module docstring)."""

    session_settings: Any = None

    def __init__(self, model: WorldModel | AsyncWorldModel, tenant_id: str, session_id: str) -> None:
        _, self.model, self.tenant_id = bind(model, tenant_id)
        self.session_id = session_id
        self._lock = asyncio.Lock()  # this object's writes, in their order

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The session's items, oldest first; ``limit``: only the latest that many."""
        turns = await arun(session_turns(self.tenant_id, self.session_id, limit), self.model)
        return [t["metadata"]["item"] for t in turns if "item" in (t.get("metadata") or {})]

    async def add_items(self, items: list[Any]) -> None:
        turns = [item_turn(item) for item in items]
        if turns:
            async with self._lock:
                await self.model.record_conversation(self.tenant_id, self.session_id, turns)

    async def pop_item(self) -> Any | None:
        """Forget the newest item and return it; None when the session is empty."""
        async with self._lock:
            return await arun(self._pop(), self.model)

    async def clear_session(self) -> None:
        async with self._lock:
            await arun(forget_turns(self.tenant_id, self.session_id, "agents session clear"), self.model)

    def _pop(self) -> Steps[Any | None]:
        while True:
            newest = yield from session_turns(self.tenant_id, self.session_id, 1)
            if not newest:
                return None
            try:
                yield call("forget_episode", self.tenant_id, newest[0]["id"], forgotten_by="agents session pop")
            except NotFoundError:
                continue  # another process took it first: the next newest
            return (newest[0].get("metadata") or {}).get("item")


def item_turn(item: Any) -> dict[str, Any]:
    """An input item of the SDK as a turn: a message's role and text; a tool call, its output or a
    reasoning item by its type (text: the output, or nothing); the item verbatim in the metadata."""
    if not isinstance(item, dict):
        raise InvalidInputError("items", f"an item must be a dict (a response input item), got {type(item).__name__}")
    role = item.get("role") or item.get("type") or "item"
    text = content_text(item.get("content")) if "content" in item else content_text(item.get("output"))
    return {"role": str(role), "text": text, "metadata": {"item": item}}


# ------------------------------------------------------------------ tools
@dataclass(frozen=True)
class ToolContext:
    """What a tool acts for, fixed when the tools are made: the model, the tenant, the agent."""

    model: AsyncWorldModel
    tenant_id: str
    agent_id: str
    agent_role: str | None


def _recall_tool(ctx: ToolContext) -> FunctionTool:
    async def recall_memories(query: str, limit: int = 5) -> str:
        """Recall what you remember that is relevant, best first: past runs, notes and conversations.

        Args:
            query: what you want to remember, in plain words.
            limit: how many memories at most (1-20).
        """
        results = await ctx.model.recall_experiences(ctx.tenant_id, None, query, max(1, min(int(limit), 20)))
        return json.dumps([{"id": r["episode_id"], "text": r["task_description"], "learnings": r.get("learnings") or [],
                            "when": r["timestamp"], "who": r["agent_id"], "score": r["relevance_score"]}
                           for r in results], ensure_ascii=False)

    return function_tool(recall_memories)


def _record_tool(ctx: ToolContext) -> FunctionTool:
    async def record_memory(text: str, learnings: list[str], outcome: Literal["success", "failure"] = "success") -> str:
        """Remember something for later: what happened or what you were told, and what to learn from it.

        Args:
            text: what to remember, in one or two sentences.
            learnings: short lessons for next time (may be empty).
            outcome: whether what you remember went well.
        """
        episode_id = await ctx.model.record_experience(ctx.tenant_id, {
            "agent_id": ctx.agent_id, "agent_role": ctx.agent_role or "", "task_type": "memory",
            "task_description": text, "learnings": learnings, "outcome": outcome})
        return json.dumps({"remembered": episode_id})

    return function_tool(record_memory)


# The tools worldgraph_tools can make, by name. A new tool (the world search, once the model has
# one) is a builder here: a function of the ToolContext returning a FunctionTool.
TOOLS: dict[str, Callable[[ToolContext], FunctionTool]] = {"recall": _recall_tool, "record": _record_tool}
DEFAULT_TOOLS = ("recall", "record")


def worldgraph_tools(model: WorldModel | AsyncWorldModel, tenant_id: str, *, agent_id: str = "agent",
                     agent_role: str | None = None, include: Sequence[str] = DEFAULT_TOOLS) -> list[FunctionTool]:
    """Function tools over one tenant's memory, for one agent (what it records is its own):
    ``recall`` (``recall_memories``) and ``record`` (``record_memory``), or those of ``include``
    (names of ``TOOLS``)."""
    _, aio, tenant = bind(model, tenant_id)
    if not isinstance(agent_id, str) or not agent_id:
        raise InvalidInputError("agent_id", "must be a non-empty string")
    unknown = [name for name in include if name not in TOOLS]
    if unknown:
        raise InvalidInputError("include", f"unknown tool(s) {unknown}; known: {sorted(TOOLS)}")
    ctx = ToolContext(aio, tenant, agent_id, agent_role)
    return [TOOLS[name](ctx) for name in include]
