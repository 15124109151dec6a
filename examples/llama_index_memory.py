"""A LlamaIndex chat engine whose long-term memory is worldgraph: a ``WorldgraphMemoryBlock`` in
LlamaIndex's ``Memory`` records the messages the short-term memory lets go of, and brings back
what is relevant to the latest ones; a ``WorldgraphRetriever`` searches them. LlamaIndex's
``MockLLM`` answers (no LLM, no network).

    pip install 'worldgraph[llamaindex]'
    python examples/llama_index_memory.py
"""

from __future__ import annotations

import tempfile

from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.memory import Memory

from worldgraph import WorldModel
from worldgraph.integrations.llama_index import WorldgraphMemoryBlock, WorldgraphRetriever


def main() -> None:
    with tempfile.TemporaryDirectory() as folder, WorldModel.open(folder) as wm:
        block = WorldgraphMemoryBlock(model=wm, tenant_id="acme", session_id="chat-1")
        # a small short-term memory: older messages move to the worldgraph block soon
        memory = Memory.from_defaults(session_id="chat-1", token_limit=120, chat_history_token_ratio=0.3,
                                      token_flush_size=20, memory_blocks=[block])
        engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=8), memory=memory)
        for said in ["My sister Ana lives in Lisbon and teaches maths.",
                     "I am training for the Porto half marathon in May.",
                     "Remind me to buy running shoes.",
                     "Which city does Ana live in?"]:
            engine.chat(said)
        print("recorded turns:", len(wm.list_episodes("acme", session_id="chat-1").items))
        context = memory.get()[0].content or ""
        print("memory block:", context[context.find("<worldgraph_memory>"):][:300])
        for hit in WorldgraphRetriever(wm, tenant_id="acme", similarity_top_k=1).retrieve("where does my sister live"):
            print(f"retrieved: {hit.node.get_content()!r} (score {hit.score:.3f})")


if __name__ == "__main__":
    main()
