"""An OpenAI Agents SDK agent whose conversation and long-term memory are worldgraph: a
``WorldgraphSession`` keeps each chat's items, and ``worldgraph_tools()`` let the agent record
and recall memories across chats. A local fake OpenAI-compatible server answers (no LLM, no
network): it calls ``record_memory`` when told something, ``recall_memories`` when asked, and
then replies with what the tool returned.

    pip install 'worldgraph[openai-agents]'
    python examples/openai_agents_memory.py
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

from worldgraph import WorldModel
from worldgraph.integrations.openai_agents import WorldgraphSession, worldgraph_tools


def reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The fake model: a tool call for the user's message, then the tool's answer as text."""
    last = messages[-1]
    if last["role"] == "tool":
        return {"role": "assistant", "content": f"(from memory) {last['content']}"}
    text = str(last.get("content"))
    if text.endswith("?"):
        call = {"name": "recall_memories", "arguments": json.dumps({"query": text, "limit": 1})}
    else:
        call = {"name": "record_memory", "arguments": json.dumps({"text": text, "learnings": []})}
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": f"call-{len(messages)}", "type": "function", "function": call}]}


class FakeOpenAI(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # POST /v1/chat/completions
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        message = reply(body["messages"])
        answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                  "choices": [{"index": 0, "message": message,
                               "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                  "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


async def main() -> None:
    set_tracing_disabled(True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with tempfile.TemporaryDirectory() as folder, WorldModel.open(folder) as wm:
            client = AsyncOpenAI(base_url=f"http://127.0.0.1:{server.server_port}/v1", api_key="local")
            agent = Agent(name="assistant", model=OpenAIChatCompletionsModel("fake-model", client),
                          tools=worldgraph_tools(wm, tenant_id="acme", agent_id="assistant"))
            monday = WorldgraphSession(wm, tenant_id="acme", session_id="monday")
            await Runner.run(agent, "My locker code is 4417.", session=monday)
            tuesday = WorldgraphSession(wm, tenant_id="acme", session_id="tuesday")
            result = await Runner.run(agent, "What is my locker code?", session=tuesday)
            print("agent:", result.final_output)
            items = await monday.get_items()
            print("monday's session:", [i.get("role") or i.get("type") for i in items])
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    asyncio.run(main())
