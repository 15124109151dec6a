"""Text embedders: local models (onnxruntime, numpy), OpenAI-compatible servers, a hashing fallback.

Every embedder has ``dimensions`` (int), ``name`` (str: which model built an index) and
``embed(texts) -> np.ndarray`` of shape ``(len(texts), dimensions)``, float32, L2-normalised;
a model with a query-side prefix also has ``embed_query(texts)`` (use :func:`embed_query` to
embed search queries). Any object with ``dimensions`` and ``embed`` works where an
:class:`Embedder` is expected. The implementations live in :mod:`worldgraph.memory.embedders`.
"""

from __future__ import annotations

from worldgraph.memory.embedders.base import (
    Embedder,
    EmbeddingServiceError,
    check_embeddings,
    embed_query,
    embedder_name,
    same_fallback_label,
)
from worldgraph.memory.embedders.catalog import LOCAL_MODELS, LocalModel
from worldgraph.memory.embedders.factory import index_name, make_embedder
from worldgraph.memory.embedders.hashing import HashingEmbedder
from worldgraph.memory.embedders.numpy_bert import MINILM_INSTALL_HINT, MiniLMEmbedder, minilm_available
from worldgraph.memory.embedders.onnx_runner import OnnxEmbedder
from worldgraph.memory.embedders.openai_compat import OpenAIEmbedder

__all__ = [
    "LOCAL_MODELS",
    "MINILM_INSTALL_HINT",
    "Embedder",
    "EmbeddingServiceError",
    "HashingEmbedder",
    "LocalModel",
    "MiniLMEmbedder",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "check_embeddings",
    "embed_query",
    "embedder_name",
    "index_name",
    "make_embedder",
    "minilm_available",
    "same_fallback_label",
]
