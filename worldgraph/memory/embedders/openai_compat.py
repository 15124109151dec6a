"""Embeddings from any OpenAI-compatible server (OpenAI, vLLM, Ollama, LM Studio, ...)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from worldgraph.config import openai_endpoint
from worldgraph.errors import EmbeddingDimensionError, InvalidInputError
from worldgraph.memory.embedders.base import EmbeddingServiceError, check_embeddings, check_texts, l2_normalise


class OpenAIEmbedder:
    """Embeddings from any OpenAI-compatible server through the ``openai`` client.

    Honours ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` (vLLM, Ollama, LM Studio, ...). When
    ``OPENAI_BASE_URL`` points at a local server and no key is set, a placeholder key is sent.
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        dimensions: int = 1536,
        client: Any = None,
        batch_size: int = 256,
    ) -> None:
        if not model:
            raise InvalidInputError("embedding_model", "must be a non-empty model name")
        if not isinstance(dimensions, int) or dimensions <= 0:
            raise InvalidInputError("embedding_dimensions", f"must be a positive integer, got {dimensions!r}")
        if batch_size <= 0:
            raise InvalidInputError("batch_size", f"must be positive, got {batch_size!r}")
        self.model = model
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.name = f"openai:{model}:{dimensions}"
        self._client = client
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make_client()
        return self._client

    @staticmethod
    def _make_client() -> Any:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - openai is a dependency
            raise InvalidInputError(
                "embedding_provider", "the openai package is not installed (pip install openai)"
            ) from exc
        kwargs: dict[str, Any] = {}
        base_url, api_key = openai_endpoint()
        if not api_key:
            if base_url:
                kwargs["api_key"] = "not-needed"  # local servers usually ignore the key
            else:
                raise EmbeddingServiceError(
                    "no OpenAI credentials: set OPENAI_API_KEY (and OPENAI_BASE_URL for an "
                    "OpenAI-compatible server), or use embedding_provider='local' / 'hashing'"
                )
        return openai.OpenAI(**kwargs)

    def _base_url(self) -> str:
        try:
            return str(self.client.base_url)
        except Exception:  # pragma: no cover
            return openai_endpoint()[0] or "https://api.openai.com/v1"

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        import openai

        extra: dict[str, Any] = {}
        if self.model.startswith("text-embedding-3"):
            extra["dimensions"] = self.dimensions
        chunks: list[np.ndarray] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [t if t.strip() else " " for t in texts[start:start + self.batch_size]]
            try:
                resp = self.client.embeddings.create(model=self.model, input=batch, **extra)
            except openai.APIConnectionError as exc:
                raise EmbeddingServiceError(
                    f"cannot reach the embedding server at {self._base_url()} ({exc}); check "
                    "OPENAI_BASE_URL (and OPENAI_API_KEY), or use embedding_provider='local' / 'hashing'"
                ) from exc
            except openai.AuthenticationError as exc:
                raise EmbeddingServiceError(
                    f"the embedding server at {self._base_url()} rejected the credentials ({exc}); "
                    "check OPENAI_API_KEY"
                ) from exc
            except openai.APIStatusError as exc:
                raise EmbeddingServiceError(
                    f"embedding request for model {self.model!r} failed at {self._base_url()}: "
                    f"HTTP {exc.status_code} {exc.message}"
                ) from exc
            data = sorted(resp.data, key=lambda d: d.index)
            if len(data) != len(batch):
                raise EmbeddingDimensionError(
                    "embedding", f"server returned {len(data)} vectors for {len(batch)} texts"
                )
            chunks.append(check_embeddings([d.embedding for d in data], len(batch), self.dimensions))
        return l2_normalise(np.concatenate(chunks, axis=0))

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.model!r}, dimensions={self.dimensions})"
