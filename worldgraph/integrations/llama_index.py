"""worldgraph for LlamaIndex (``pip install 'worldgraph[llamaindex]'``):

- ``WorldgraphRetriever``, a ``BaseRetriever``: ``recall_experiences`` as ``NodeWithScore``s
  (a ``TextNode`` per episode, its id the episode id; the score the relevance score), with
  LlamaIndex ``MetadataFilters`` turned into metadata conditions (pushed into the search).
- ``WorldgraphMemoryBlock``, a memory block for ``llama_index.core.memory.Memory``: the messages
  the short-term memory lets go of are recorded as turns of a session, and each ``get`` recalls
  what is relevant to the latest messages (the block's text for the prompt).

    from llama_index.core.memory import Memory
    from worldgraph.integrations.llama_index import WorldgraphMemoryBlock

    memory = Memory.from_defaults(session_id="chat-42", token_limit=4000, memory_blocks=[
        WorldgraphMemoryBlock(model=wm, tenant_id="acme", session_id="chat-42")])

The tenant is fixed when they are made; the async methods await ``AsyncWorldModel``.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms import ChatMessage, TextBlock
from llama_index.core.memory.memory import BaseMemoryBlock
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters
from pydantic import ConfigDict, Field, PrivateAttr

from worldgraph import AsyncWorldModel, InvalidInputError, WorldModel
from worldgraph.integrations.common import Steps, arun, bind, call, content_text, run

__all__ = ["WorldgraphMemoryBlock", "WorldgraphRetriever", "metadata_conditions"]

# LlamaIndex's operators as worldgraph's metadata conditions (memory/metadata.py)
OPERATORS = {FilterOperator.EQ: "$eq", FilterOperator.NE: "$ne", FilterOperator.GT: "$gt", FilterOperator.GTE: "$gte",
             FilterOperator.LT: "$lt", FilterOperator.LTE: "$lte", FilterOperator.IN: "$in",
             FilterOperator.NIN: "$nin"}


class WorldgraphRetriever(BaseRetriever):
    """Recall as a LlamaIndex retriever: the ``similarity_top_k`` best episodes for the query."""

    def __init__(self, model: WorldModel | AsyncWorldModel, tenant_id: str, *, similarity_top_k: int = 4,
                 agent_role: str | None = None, filters: MetadataFilters | None = None,
                 options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model, self.amodel, self.tenant_id = bind(model, tenant_id)
        self.similarity_top_k = similarity_top_k
        self.agent_role = agent_role
        self.options = dict(options or {})
        if filters is not None:
            self.options["metadata"] = {**self.options.get("metadata", {}), **metadata_conditions(filters)}

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return run(self._recall(query_bundle.query_str), self.model)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await arun(self._recall(query_bundle.query_str), self.amodel)

    def _recall(self, query: str) -> Steps[list[NodeWithScore]]:
        results = yield call("recall_experiences", self.tenant_id, self.agent_role, query, self.similarity_top_k,
                             options=self.options)
        return [NodeWithScore(node=episode_node(r), score=float(r["relevance_score"])) for r in results]


def episode_node(result: Any) -> TextNode:
    """A recalled episode as a ``TextNode``: its text, and its ids, scores and metadata."""
    text = "\n".join(p for p in (result.get("task_description"), *(result.get("learnings") or [])) if p)
    meta = {key: result.get(key) for key in ("episode_id", "agent_id", "agent_role", "session_id", "timestamp",
                                              "semantic_score", "relevance_score")}
    meta["metadata"] = result.get("metadata") or {}
    return TextNode(id_=result["episode_id"], text=text, metadata=meta,
                    excluded_embed_metadata_keys=list(meta), excluded_llm_metadata_keys=list(meta))


def metadata_conditions(filters: MetadataFilters) -> dict[str, Any]:
    """LlamaIndex filters as worldgraph's metadata conditions: AND of the supported operators
    (==, !=, >, >=, <, <=, in, nin); any other operator or condition is an InvalidInputError."""
    if filters.condition not in (None, FilterCondition.AND):
        raise InvalidInputError("filters.condition", f"only AND is supported, got {filters.condition}")
    out: dict[str, Any] = {}
    for flt in filters.filters:
        if isinstance(flt, MetadataFilters):
            for key, cond in metadata_conditions(flt).items():
                out.setdefault(key, {}).update(cond)
            continue
        if not isinstance(flt, MetadataFilter) or flt.operator not in OPERATORS:
            op = getattr(getattr(flt, "operator", None), "value", type(flt).__name__)
            raise InvalidInputError("filters", f"operator {op!r} is not supported; use one of "
                                    f"{sorted(o.value for o in OPERATORS)}")
        out.setdefault(flt.key, {})[OPERATORS[flt.operator]] = flt.value
    return out


class WorldgraphMemoryBlock(BaseMemoryBlock[str]):
    """Long-term memory for LlamaIndex's ``Memory``: puts record messages as turns of
    ``session_id``; gets recall (from the whole tenant, or ``session_only``) what is relevant to
    the latest ``context_window`` messages, as lines of text."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = Field("worldgraph_memory", description="the block's name in the memory's template")
    model: WorldModel | AsyncWorldModel = Field(description="the worldgraph model")
    tenant_id: str = Field(description="whose memories (fixed)")
    session_id: str = Field("llamaindex", description="the session messages are recorded in")
    session_only: bool = Field(False, description="recall only this session's turns")
    similarity_top_k: int = Field(3, gt=0, le=100)
    context_window: int = Field(3, gt=0, description="latest messages the query is made of")
    options: dict[str, Any] = Field(default_factory=dict, description="RecallOptions fields")
    _async: AsyncWorldModel = PrivateAttr()

    def __init__(self, **data: Any) -> None:
        bind(data.get("model"), data.get("tenant_id"))  # type: ignore[arg-type] # worldgraph's error, before pydantic's
        super().__init__(**data)

    def model_post_init(self, context: Any) -> None:
        _, self._async, _ = bind(self.model, self.tenant_id)

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        return await arun(self._recall(messages or []), self._async)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        await arun(self._record(messages), self._async)

    def _recall(self, messages: list[ChatMessage]) -> Steps[str]:
        query = " ".join(message_text(m) for m in messages[-self.context_window:]).strip()
        if not any(ch.isalnum() for ch in query):
            return ""
        options = dict(self.options)
        if self.session_only:
            options["metadata"] = {**options.get("metadata", {}), "session_id": self.session_id}
        results = yield call("recall_experiences", self.tenant_id, None, query, self.similarity_top_k, options=options)
        return "\n".join(f"- [{r['timestamp'][:10]}] {r['agent_id']}: {r['task_description']}"
                         for r in results if r.get("task_description"))

    def _record(self, messages: list[ChatMessage]) -> Steps[None]:
        turns = [{"role": m.role.value, "text": message_text(m),
                  "metadata": {"session_id": self.session_id, "message": m.model_dump(mode="json")}}
                 for m in messages]
        if turns:
            yield call("record_conversation", self.tenant_id, self.session_id, turns)


def message_text(message: ChatMessage) -> str:
    """The text blocks of a LlamaIndex message."""
    texts = [b.text for b in message.blocks if isinstance(b, TextBlock)]
    return "\n".join(texts) if texts else content_text(message.content)
