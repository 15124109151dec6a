"""``facade.store_only.stats`` (what ``worldgraph stats`` answers without opening the index or the
embedder) equals ``WorldModel.stats`` on a folder whose episodes are indexed, and steps aside when
it cannot answer that way."""

from __future__ import annotations

from pathlib import Path

import pytest

from worldgraph import WorldModel
from worldgraph.facade import store_only


def test_the_store_alone_answers_what_the_model_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("WORLDGRAPH_EMBEDDING_PROVIDER", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with WorldModel.open(tmp_path) as wm:
        wm.record_experiences("t", [{"agent_id": f"a{i}", "agent_role": "r", "task_type": "x",
                                     "task_description": f"run {i}", "outcome": "success"} for i in range(5)])
        wm.apply_delta("t", "Kitchen", {"entities": [{"name": "key", "type": "item"}], "states": [], "edges": [],
                                        "rules": []})
        full = wm.stats("t")
    quick = store_only.stats(tmp_path, "embedded", "t")
    assert quick == full and list(quick) == list(full)
    assert quick["indexed"] == 5 and quick["environments"] == ["Kitchen"]
    assert store_only.stats(tmp_path, "embedded", "nobody")["episodes"] == 0
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")  # a chosen embedder: the open checks it
    assert store_only.stats(tmp_path, "embedded", "t") is None
