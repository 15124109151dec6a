"""A LangGraph agent whose long-term memory is worldgraph: LangMem's memory tools over a
``WorldgraphStore``, driven by LangChain's fake chat model (no LLM, no network).

    pip install 'worldgraph[langgraph]' langmem
    python examples/langgraph_agent.py

The first conversation stores a memory with LangMem's manage-memory tool; the second, a new
thread, finds it with the search tool: recalled by worldgraph, ranked as worldgraph ranks.
"""

from __future__ import annotations

import tempfile
import warnings
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.prebuilt import create_react_agent
from langmem import create_manage_memory_tool, create_search_memory_tool

from worldgraph import WorldModel
from worldgraph.integrations.langgraph import WorldgraphStore

NAMESPACE = ("memories", "{langgraph_user_id}")
# LangGraph 1.x points to langchain.agents.create_agent; LangMem's docs still show create_react_agent
warnings.filterwarnings("ignore", message="create_react_agent has been moved")


class ScriptedModel(GenericFakeChatModel):
    """LangChain's fake chat model, answering in order; tools are bound by the agent (kept as is)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def call(tool: str, args: dict[str, Any], n: int) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": tool, "args": args, "id": f"call-{n}"}])


def main() -> None:
    with tempfile.TemporaryDirectory() as folder, WorldModel.open(folder) as wm:
        store = WorldgraphStore(wm, tenant_id="acme")
        model = ScriptedModel(messages=iter([
            call("manage_memory", {"content": "The user prefers a window seat on long flights", "action": "create"}, 1),
            AIMessage("Noted: a window seat."),
            call("search_memory", {"query": "which seat does the user like?"}, 2),
            AIMessage("You like a window seat."),
        ]))
        agent = create_react_agent(model, tools=[create_manage_memory_tool(namespace=NAMESPACE),
                                                 create_search_memory_tool(namespace=NAMESPACE)], store=store)
        config: Any = {"configurable": {"langgraph_user_id": "user-1", "thread_id": "t1"}}
        agent.invoke({"messages": [("user", "Remember that I prefer a window seat.")]}, config)
        config = {"configurable": {"langgraph_user_id": "user-1", "thread_id": "t2"}}
        answer = agent.invoke({"messages": [("user", "Which seat do I like?")]}, config)
        found = [m for m in answer["messages"] if m.type == "tool"][-1]
        print("search_memory returned:", found.content)
        for item in store.search(("memories", "user-1"), query="seat on flights"):
            print(f"stored in worldgraph: {item.namespace} {item.value['content']!r} (score {item.score:.3f})")
        print("agent:", answer["messages"][-1].content)


if __name__ == "__main__":
    main()
