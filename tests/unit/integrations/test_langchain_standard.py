"""LangChain's standard retriever suite (langchain-tests' RetrieversIntegrationTests), run
unchanged against WorldgraphRetriever on a model holding a few memories. langchain-tests has no
chat-history suite; test_langchain.py mirrors langchain-core's own chat-history tests."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from typing import Any

from tests.unit.integrations.conftest import require

require("langchain_tests")

from langchain_core.retrievers import BaseRetriever  # noqa: E402
from langchain_tests.integration_tests import RetrieversIntegrationTests  # noqa: E402

from worldgraph import WorldModel  # noqa: E402
from worldgraph.integrations.langchain import WorldgraphRetriever  # noqa: E402
from worldgraph.memory.embeddings import HashingEmbedder  # noqa: E402

_MODEL: WorldModel | None = None


def model() -> WorldModel:
    """One model for the suite (its fixtures build a retriever per test), closed at exit."""
    global _MODEL
    if _MODEL is None:
        folder = tempfile.mkdtemp(prefix="wg-lc-standard-")
        _MODEL = WorldModel.open(folder, embedder=HashingEmbedder(128))
        _MODEL.record_experiences("acme", [
            {"agent_id": "notes", "task_type": "note", "outcome": "success", "task_description": text}
            for text in ["the weather in Paris is rainy", "the weather in Rome is sunny", "weather report for Oslo",
                         "the capital of France is Paris", "bananas are yellow"]])
        atexit.register(lambda: (_MODEL.close() if _MODEL else None, shutil.rmtree(folder, ignore_errors=True)))
    return _MODEL


class TestWorldgraphRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return WorldgraphRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"model": model(), "tenant_id": "acme", "options": {"min_similarity": -1.0}}

    @property
    def retriever_query_example(self) -> str:
        return "what is the weather like?"
