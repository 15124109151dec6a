"""Embedders name themselves: ``name`` is the index label; without it the label comes from the
class alone, the same whether its module runs as a script or is imported, and indexes labelled
the old way (module-qualified) still open."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from worldgraph import WorldModel
from worldgraph.errors import InvalidInputError
from worldgraph.memory.embeddings import HashingEmbedder, embedder_name, same_fallback_label
from worldgraph.memory.index.episode_index import META_FILE

MODULE = textwrap.dedent('''
    import sys
    from worldgraph.memory.embeddings import HashingEmbedder


    class TinyEmbedder:
        """A custom embedder without a name attribute (the hashing one underneath)."""

        dimensions = 32

        def embed(self, texts):
            return HashingEmbedder(32).embed(texts)


    if __name__ == "__main__":
        from worldgraph import WorldModel

        with WorldModel.open(sys.argv[1], embedder=TinyEmbedder()) as wm:
            wm.record_experience("lab", {"agent_id": "a", "task_type": "t", "task_description": "calibrate the scale",
                                         "outcome": "success"})
''')


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "tiny_embedders.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(folder))
    return folder


def test_the_label_is_the_name_else_the_class() -> None:
    assert embedder_name(HashingEmbedder(384)) == "hashing-v1-384"

    class Plain:
        dimensions = 8

    assert embedder_name(Plain()) == "Plain/8"
    assert same_fallback_label("__main__.Plain/8", "Plain/8") and same_fallback_label("a.b.Plain/8", "Plain/8")
    assert not same_fallback_label("a.b.Other/8", "Plain/8") and not same_fallback_label("a.b.Plain/16", "Plain/8")
    assert not same_fallback_label("x.hashing-v1-384", "hashing-v1-384")  # a chosen name is never guessed at


def test_a_script_and_an_import_share_the_index(module_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    subprocess.run([sys.executable, str(module_dir / "tiny_embedders.py"), str(data)], check=True)
    assert json.loads((data / "lancedb" / META_FILE).read_text())["embedder"] == "TinyEmbedder/32"
    import tiny_embedders  # type: ignore[import-not-found]

    with WorldModel.open(data, embedder=tiny_embedders.TinyEmbedder()) as wm:
        res = wm.recall_experiences("lab", None, "calibrate the scale", options={"min_similarity": 0.0})
        assert [r["task_description"] for r in res] == ["calibrate the scale"]


@pytest.mark.parametrize("old_label", ["__main__.TinyEmbedder/32", "tiny_embedders.TinyEmbedder/32"])
def test_an_index_labelled_the_old_way_opens_and_is_relabelled(module_dir: Path, tmp_path: Path, old_label: str) -> None:
    import tiny_embedders

    data = tmp_path / "data"
    with WorldModel.open(data, embedder=tiny_embedders.TinyEmbedder()) as wm:
        wm.record_experience("lab", {"agent_id": "a", "task_type": "t", "task_description": "weigh the flour",
                                     "outcome": "success"})
    meta_path = data / "lancedb" / META_FILE
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "embedder": old_label}))
    # read-only: opens, and leaves the old label alone (nothing is written)
    with WorldModel.open(data, embedder=tiny_embedders.TinyEmbedder(), read_only=True) as wm:
        assert wm.recall_experiences("lab", None, "weigh the flour", options={"min_similarity": 0.0})
    assert json.loads(meta_path.read_text())["embedder"] == old_label
    # writable: opens and records the new label
    with WorldModel.open(data, embedder=tiny_embedders.TinyEmbedder()) as wm:
        assert wm.recall_experiences("lab", None, "weigh the flour", options={"min_similarity": 0.0})
    assert json.loads(meta_path.read_text())["embedder"] == "TinyEmbedder/32"
    # another class with the same vector size is still refused
    meta_path.write_text(json.dumps({**meta, "embedder": "tiny_embedders.OtherEmbedder/32"}))
    with pytest.raises(InvalidInputError, match="reindex"):
        WorldModel.open(data, embedder=tiny_embedders.TinyEmbedder())
