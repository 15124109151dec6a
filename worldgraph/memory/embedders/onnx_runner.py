"""Sentence-embedding models exported to ONNX, run by onnxruntime on the CPU.

The tokenizer is a ``tokenizers`` WordPiece/BPE tokenizer (``tokenizer.json``, or a BERT
``vocab.txt``); pooling is the model card's (mean over the attention mask, or the [CLS] token);
vectors are L2-normalised. Models that want a query-side prefix (e5: ``query: `` / ``passage: ``)
take it as ``query_prefix`` / ``document_prefix``: ``embed`` adds the document prefix,
``embed_query`` the query prefix.

Threads: one onnxruntime session per (model, threads) per process, shared by every embedder
object. A run uses ``threads`` intra-op threads (1 by default) that never spin; a call with
several batches runs them side by side on ``workers`` Python threads (one per core by default;
onnxruntime releases the GIL). So a single query (what recall embeds) runs on one core without
waking or spinning a thread pool, and recording still uses every core: on a small, shared
machine spinning pool threads steal the cores that other work needs (bench/README.md measures
the variants with and without two CPU-burning processes beside them).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from worldgraph.errors import InvalidInputError
from worldgraph.memory.embedders.base import check_batch_size, check_embeddings, check_texts, l2_normalise

ONNX_INSTALL_HINT = "pip install onnxruntime tokenizers"

_LOADED: dict[tuple[Any, ...], Any] = {}  # sessions and tokenizers, shared by every embedder
_LOADED_LOCK = threading.Lock()


def default_workers() -> int:
    """Batches embedded side by side when the config does not say: one per core (at most 4)."""
    return max(1, min(4, os.cpu_count() or 1))


def load_session(model_path: str | Path, threads: int, spinning: bool = False) -> Any:
    """The process-wide onnxruntime session for ``model_path`` with ``threads`` intra-op threads
    (``spinning``: let idle workers busy-wait, onnxruntime's default; off here, see above)."""
    path = str(Path(model_path).resolve())

    def make() -> Any:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise InvalidInputError("embedding_provider", f"onnxruntime is not installed: {ONNX_INSTALL_HINT}") from exc
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(threads)
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
        opts.log_severity_level = 3  # warnings about unused initializers are noise here
        return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])

    return _shared(("session", path, int(threads), bool(spinning)), make)


def load_tokenizer(path: str | Path, max_seq_length: int) -> Any:
    """A ``tokenizers`` tokenizer from ``tokenizer.json`` or a BERT ``vocab.txt`` (uncased)."""
    file = str(Path(path).resolve())

    def make() -> Any:
        try:
            from tokenizers import BertWordPieceTokenizer, Tokenizer
        except ImportError as exc:
            raise InvalidInputError("embedding_provider", f"tokenizers is not installed: {ONNX_INSTALL_HINT}") from exc
        if file.endswith(".json"):
            tok = Tokenizer.from_file(file)
        else:  # the uncased BERT normaliser and WordPiece, as all-MiniLM-L6-v2's tokenizer.json
            tok = BertWordPieceTokenizer(file, lowercase=True, strip_accents=None, clean_text=True,
                                         handle_chinese_chars=True)
        tok.no_padding()  # padded per batch, to the batch's longest text
        tok.enable_truncation(max_length=int(max_seq_length))
        return tok

    return _shared(("tokenizer", file, int(max_seq_length)), make)


def _shared(key: tuple[Any, ...], make: Any) -> Any:
    with _LOADED_LOCK:
        if key not in _LOADED:
            _LOADED[key] = make()
        return _LOADED[key]


class OnnxEmbedder:
    """One ONNX sentence-embedding model; loaded on first use, shared across instances."""

    def __init__(
        self,
        model_path: str | Path,
        tokenizer_path: str | Path,
        *,
        name: str,
        dimensions: int,
        max_seq_length: int = 256,
        batch_size: int = 32,
        pooling: str = "mean",
        query_prefix: str = "",
        document_prefix: str = "",
        threads: int | None = None,
        workers: int | None = None,
        spinning: bool = False,
    ) -> None:
        self.model_path = Path(model_path)
        self.tokenizer_path = Path(tokenizer_path)
        for field, p in (("model_path", self.model_path), ("tokenizer_path", self.tokenizer_path)):
            if not p.is_file():
                raise InvalidInputError(field, f"no such file: {p}")
        if pooling not in ("mean", "cls"):
            raise InvalidInputError("pooling", f"must be 'mean' or 'cls', got {pooling!r}")
        if not isinstance(dimensions, int) or dimensions <= 0:
            raise InvalidInputError("dimensions", f"must be a positive integer, got {dimensions!r}")
        self.name = name
        self.dimensions = dimensions
        self.max_seq_length = int(max_seq_length)
        self.batch_size = check_batch_size(batch_size)
        self.pooling = pooling
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.threads = 1 if threads is None else _positive("threads", threads)
        self.workers = default_workers() if workers is None else _positive("workers", workers)
        self.spinning = bool(spinning)
        self._loaded: tuple[Any, Any, set[str], str] | None = None
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors of documents (the texts that are stored and searched)."""
        return self._embed(check_texts(texts), self.document_prefix)

    def embed_query(self, texts: list[str]) -> np.ndarray:
        """Vectors of search queries (with the model's query prefix, if it has one)."""
        return self._embed(check_texts(texts), self.query_prefix)

    def _load(self) -> tuple[Any, Any, set[str], str]:
        if self._loaded is None:
            with self._lock:
                if self._loaded is None:
                    sess = load_session(self.model_path, self.threads, self.spinning)
                    tok = load_tokenizer(self.tokenizer_path, self.max_seq_length)
                    inputs = {i.name for i in sess.get_inputs()}
                    outputs = sess.get_outputs()
                    by_name = {o.name: o for o in outputs}
                    out = by_name.get("last_hidden_state") or next(
                        (o for o in outputs if len(o.shape) == 3), outputs[0])
                    self._loaded = (sess, tok, inputs, out.name)
        return self._loaded

    def _embed(self, texts: list[str], prefix: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        sess, tok, inputs, output = self._load()
        if prefix:
            texts = [prefix + t for t in texts]
        encodings = [tok.encode(texts[0])] if len(texts) == 1 else tok.encode_batch(texts)
        lengths = np.array([len(e.ids) for e in encodings])
        order = np.argsort(-lengths, kind="stable")  # similar lengths together: little padding
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        size = min(self.batch_size, -(-len(texts) // self.workers))  # every worker gets a batch
        batches = [order[start:start + size] for start in range(0, len(texts), size)]

        def run(idx: np.ndarray) -> None:
            seq = int(lengths[idx].max())
            ids = np.zeros((len(idx), seq), dtype=np.int64)
            mask = np.zeros((len(idx), seq), dtype=np.int64)
            for row, i in enumerate(idx):
                ids[row, :lengths[i]] = encodings[i].ids
                mask[row, :lengths[i]] = 1
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in inputs:
                feed["token_type_ids"] = np.zeros_like(ids)
            hidden = sess.run([output], feed)[0]  # releases the GIL: batches run side by side
            if self.pooling == "cls":
                out[idx] = hidden[:, 0, :]
            else:
                m = mask.astype(np.float32)
                out[idx] = np.einsum("bth,bt->bh", hidden, m) / np.maximum(m.sum(axis=1, keepdims=True), 1e-9)

        if len(batches) == 1 or self.workers == 1:
            for idx in batches:
                run(idx)
        else:
            list(self._executor().map(run, batches))
        return check_embeddings(l2_normalise(out), len(texts), self.dimensions)

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="worldgraph-embed")
            return self._pool

    def __repr__(self) -> str:
        return (f"OnnxEmbedder(name={self.name!r}, model_path={str(self.model_path)!r}, "
                f"threads={self.threads}, workers={self.workers})")


def _positive(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInputError(field, f"must be a positive integer, got {value!r}")
    return value
