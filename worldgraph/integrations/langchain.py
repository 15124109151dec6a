"""worldgraph for LangChain (``pip install 'worldgraph[langchain]'``):

- ``WorldgraphRetriever``, a ``BaseRetriever``: ``recall_experiences`` as ``Document``s, the
  score breakdown and the ids in their metadata; ``k`` and the recall options (filters, metadata
  conditions) are fields, and ``k`` may be given per call (``retriever.invoke(query, k=3)``).
- ``WorldgraphChatMessageHistory``, a ``BaseChatMessageHistory`` over one conversation session:
  each message is a turn (its role, its text, the whole message kept verbatim in the turn's
  metadata), read back in order; ``clear`` forgets the session's turns.

    from worldgraph import WorldModel
    from worldgraph.integrations.langchain import WorldgraphChatMessageHistory, WorldgraphRetriever

    wm = WorldModel.open("./data")
    retriever = WorldgraphRetriever(model=wm, tenant_id="acme", k=4)
    history = WorldgraphChatMessageHistory(wm, tenant_id="acme", session_id="chat-42")

The tenant is fixed when they are made; async methods await ``AsyncWorldModel``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr

from worldgraph import AsyncWorldModel, WorldModel
from worldgraph.integrations.common import (
    Steps,
    arun,
    bind,
    call,
    content_text,
    forget_turns,
    run,
    session_turns,
)

__all__ = ["WorldgraphChatMessageHistory", "WorldgraphRetriever", "message_turn", "recall_document"]

# LangChain's message types as the roles frameworks name them
ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "function"}


class WorldgraphRetriever(BaseRetriever):
    """Recall as a LangChain retriever: ``k`` results of ``recall_experiences(tenant_id,
    agent_role, query, k, options)``, best first, each a ``Document`` whose ``page_content`` is
    the episode's text and whose ``metadata`` has ``episode_id``, ``relevance_score``,
    ``semantic_score``, ``score_breakdown``, ``agent_id``, ``session_id``, ``timestamp`` and the
    episode's own ``metadata``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: WorldModel | AsyncWorldModel = Field(description="the worldgraph model to recall from")
    tenant_id: str = Field(description="whose memories (fixed: no query can reach another tenant)")
    k: int = Field(4, gt=0, le=1000, description="how many documents")
    agent_role: str | None = Field(None, description="only episodes of this role")
    options: dict[str, Any] = Field(default_factory=dict, description="RecallOptions fields: filters "
                                    "(metadata, agent_id, date_range, success_only, ...), min_similarity, ...")
    _sync: WorldModel = PrivateAttr()
    _async: AsyncWorldModel = PrivateAttr()

    def __init__(self, **data: Any) -> None:
        bind(data.get("model"), data.get("tenant_id"))  # type: ignore[arg-type] # worldgraph's error, before pydantic's
        super().__init__(**data)

    def model_post_init(self, context: Any) -> None:
        self._sync, self._async, _ = bind(self.model, self.tenant_id)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None, **kwargs: Any) -> list[Document]:
        return run(self._recall(query, k, kwargs), self._sync)

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       k: int | None = None, **kwargs: Any) -> list[Document]:
        return await arun(self._recall(query, k, kwargs), self._async)

    def _recall(self, query: str, k: int | None, extra: dict[str, Any]) -> Steps[list[Document]]:
        options = {**self.options, **extra.pop("options", {})}
        results = yield call("recall_experiences", self.tenant_id, self.agent_role, query, k or self.k,
                             options={**options, "limit": k or self.k})
        return [recall_document(r) for r in results]


def recall_document(result: Any) -> Document:
    """A recall result as a ``Document`` (its text; scores, ids and the episode's metadata)."""
    text = "\n".join(p for p in (result.get("task_description"), *(result.get("learnings") or [])) if p)
    meta = {key: result.get(key) for key in ("episode_id", "relevance_score", "semantic_score", "score_breakdown",
                                              "agent_id", "agent_role", "session_id", "timestamp", "task_type",
                                              "outcome", "metadata")}
    return Document(page_content=text, metadata=meta, id=result.get("episode_id"))


class WorldgraphChatMessageHistory(BaseChatMessageHistory):
    """The messages of one conversation session, kept as worldgraph turns (so they are recalled
    like any memory, and forgotten like any).

    Args:
        model: a ``WorldModel`` or an ``AsyncWorldModel``.
        tenant_id: whose session (fixed).
        session_id: the conversation (1-200 printable characters).
    """

    def __init__(self, model: WorldModel | AsyncWorldModel, tenant_id: str, session_id: str) -> None:
        self.model, self.amodel, self.tenant_id = bind(model, tenant_id)
        self.session_id = session_id

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        return run(self._messages(), self.model)

    async def aget_messages(self) -> list[BaseMessage]:
        return await arun(self._messages(), self.amodel)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        run(self._add(messages), self.model)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await arun(self._add(messages), self.amodel)

    def clear(self) -> None:
        run(forget_turns(self.tenant_id, self.session_id, "langchain chat history clear"), self.model)

    async def aclear(self) -> None:
        await arun(forget_turns(self.tenant_id, self.session_id, "langchain chat history clear"), self.amodel)

    def _messages(self) -> Steps[list[BaseMessage]]:
        turns = yield from session_turns(self.tenant_id, self.session_id)
        return messages_from_dict([t["metadata"]["message"] for t in turns if "message" in (t.get("metadata") or {})])

    def _add(self, messages: Sequence[BaseMessage]) -> Steps[None]:
        turns = [message_turn(m) for m in messages]
        if turns:
            yield call("record_conversation", self.tenant_id, self.session_id, turns)


def message_turn(message: BaseMessage) -> dict[str, Any]:
    """A LangChain message as a conversation turn: its role, its name (or role) as the speaker,
    its text (empty for a tool call), and the whole message in the turn's metadata."""
    role = getattr(message, "role", None) if message.type == "chat" else ROLES.get(message.type, message.type)
    role = str(role or message.type)
    return {"role": role, "speaker": message.name or role, "text": content_text(message.content),
            "metadata": {"message": message_to_dict(message)}}
