"""``Page.items`` is ``episodes`` on REST, MCP and TypeScript: the Python page answers to both."""

from __future__ import annotations

from pathlib import Path

from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder


def test_a_page_of_episodes_has_items_and_episodes(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        ids = wm.record_experiences("t", [{"agent_id": "a", "agent_role": "r", "task_type": "x",
                                           "task_description": f"run {i}", "outcome": "success"} for i in range(3)])
        page = wm.list_episodes("t", limit=2)
        assert page.episodes is page.items and len(page.episodes) == 2
        assert {e["id"] for e in page.episodes} <= set(ids)
        assert page.to_dict("episodes")["episodes"] == page.items
