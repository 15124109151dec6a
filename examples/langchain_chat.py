"""A LangChain chat whose history and long-term memory are worldgraph: the history of each
session is a ``WorldgraphChatMessageHistory``, and a ``WorldgraphRetriever`` recalls what was said
in any session. LangChain's fake chat model answers (no LLM, no network).

    pip install 'worldgraph[langchain]'
    python examples/langchain_chat.py
"""

from __future__ import annotations

import tempfile

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

from worldgraph import WorldModel
from worldgraph.integrations.langchain import WorldgraphChatMessageHistory, WorldgraphRetriever


def main() -> None:
    with tempfile.TemporaryDirectory() as folder, WorldModel.open(folder) as wm:
        retriever = WorldgraphRetriever(model=wm, tenant_id="acme", k=2)
        prompt = ChatPromptTemplate.from_messages([
            ("system", "Relevant memories:\n{memories}"), MessagesPlaceholder("history"), ("human", "{question}")])
        chain = prompt | GenericFakeChatModel(messages=iter([
            AIMessage("Noted: your dog is called Biscuit."), AIMessage("Your dog is Biscuit.")]))

        def chat(session_id: str, question: str) -> tuple[str, str]:
            history = WorldgraphChatMessageHistory(wm, tenant_id="acme", session_id=session_id)
            memories = "\n".join(d.page_content for d in retriever.invoke(question))
            answer = chain.invoke({"memories": memories, "history": history.messages, "question": question})
            history.add_messages([HumanMessage(question), answer])
            return memories, str(answer.content)

        chat("monday", "My dog is called Biscuit.")
        memories, answer = chat("tuesday", "What is my dog called?")
        print("recalled on tuesday:", memories.replace("\n", "; "))
        history = WorldgraphChatMessageHistory(wm, tenant_id="acme", session_id="monday").messages
        print("monday's history:", [f"{m.type}: {m.content}" for m in history])
        print("assistant:", answer)


if __name__ == "__main__":
    main()
