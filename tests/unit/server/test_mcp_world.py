"""What the MCP tools answer a model: world_graph of the demo world fits 8 KB by default (counts,
current facts one per line, rules) with filters, a size cap that says what it left out and the
full JSON on request; one id field per episode; descriptions that state the true defaults; the
readiness and record_conversation tools. In-process through the official SDK's Client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client

from worldgraph import WorldModel
from worldgraph.bundled import examples_dir
from worldgraph.cli.demo import ENV
from worldgraph.cli.replay import replay_log
from worldgraph.config import WorldGraphConfig
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.mcp_server import build_mcp

TENANT = "demo"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorldModel]:
    """The world `worldgraph demo` grows: the text-adventure log, merged offline from its deltas."""
    wm = WorldModel.open(tmp_path_factory.mktemp("demo") / "data", embedder=HashingEmbedder(384))
    try:
        summary = replay_log(wm, TENANT, ENV, examples_dir() / "text_adventure.jsonl", use_shipped_deltas=True)
        assert summary["merged"] > 5
        yield wm
    finally:
        wm.close()


def call(wm: WorldModel, name: str, args: dict[str, Any]) -> Any:
    async def run() -> Any:
        async with Client(build_mcp(lambda: wm, tenant=TENANT)) as client:
            if name == "list_tools":
                return (await client.list_tools()).tools
            return await client.call_tool(name, args)
    return asyncio.run(run())


def text_of(result: Any) -> str:
    assert not result.is_error, result.content
    assert result.structured_content is None  # the text is the whole answer, not sent twice
    assert len(result.content) == 1
    return str(result.content[0].text)


def test_world_graph_of_the_demo_world_is_compact_by_default(demo: WorldModel) -> None:
    full = demo.world_graph(TENANT, ENV)
    assert len(json.dumps(full, indent=2)) > 40_000  # what the tool answered before
    text = text_of(call(demo, "world_graph", {"env_name": ENV}))
    assert len(text.encode("utf-8")) <= 8192, len(text.encode("utf-8"))
    lines = text.splitlines()
    assert lines[0].startswith(f"{ENV}: graph version ")
    assert "18 nodes" in lines[1] and "6 rules" in lines[1]
    assert "- IF the front door is locked THEN going outside fails (conf 0.80, 1 evidence)" in lines
    assert "- item:brass key: in furniture:workbench; material=brass; size=small; conf 0.90" in lines
    assert any("--[unlock front door with brass key]-->" in line for line in lines)
    assert "was in" not in text  # history is off by default
    history = text_of(call(demo, "world_graph", {"env_name": ENV, "history": True}))
    assert "- item:brass key was in furniture:kitchen table: until " in history


def test_world_graph_filters_and_cap(demo: WorldModel) -> None:
    items = text_of(call(demo, "world_graph", {"env_name": ENV, "node_type": "item"}))
    assert "item:brass key" in items and "item:bolt cutters" in items and "room:" not in items.split("Entities")[1]
    named = text_of(call(demo, "world_graph", {"env_name": ENV, "name": "KEY"}))
    assert "Filter: name~'KEY': 1 nodes match." in named
    near = text_of(call(demo, "world_graph", {"env_name": ENV, "around": "room:shed", "depth": 1}))
    entities = near.split("Entities")[1]
    assert "furniture:workbench" in entities and "room:garden" in entities and "room:kitchen" not in entities
    assert "item:brass key" not in entities  # two steps away (in the workbench)
    assert "item:brass key" in text_of(call(demo, "world_graph", {"env_name": ENV, "around": "shed", "depth": 2}))

    capped = text_of(call(demo, "world_graph", {"env_name": ENV, "max_chars": 900}))
    assert len(capped) <= 900
    last = capped.splitlines()[-1]
    assert last.startswith("Left out (over max_chars=900): ") and "entities lines" in last and "format='json'" in last

    missing = call(demo, "world_graph", {"env_name": ENV, "around": "attic"})
    assert missing.is_error and '"not_found"' in missing.content[0].text and "room:shed" in missing.content[0].text

    everything = json.loads(text_of(call(demo, "world_graph", {"env_name": ENV, "format": "json", "history": True})))
    assert everything["nodes"] == demo.world_graph(TENANT, ENV)["nodes"]
    only_items = json.loads(text_of(call(demo, "world_graph", {"env_name": ENV, "format": "json",
                                                               "node_type": "item"})))
    assert sorted(n["name"] for n in only_items["nodes"]) == ["bolt cutters", "brass key"]


def test_tools_state_true_defaults_and_one_id(demo: WorldModel) -> None:
    tools = {t.name: t for t in call(demo, "list_tools", {})}
    assert {"readiness", "record_conversation"} <= set(tools)
    for tool in tools.values():  # the docstring without the source's indentation
        assert tool.description and not tool.description.startswith((" ", "\n")), tool.name
        assert "\n " not in tool.description, (tool.name, tool.description)
    recall = json.dumps(tools["recall_experiences"].input_schema)
    floor = WorldGraphConfig().min_similarity  # what recall uses when the server sets nothing
    assert f"default {floor}" in recall and "default 0.6" not in recall
    assert f"{floor} unless the server sets it" in recall

    conversation = [{"speaker": "bob", "text": "Where is the brass key?"},
                    {"speaker": "amy", "text": "On the workbench in the shed."}]
    ids = call(demo, "record_conversation", {"session_id": "chat-1", "turns": conversation}).structured_content
    assert len(ids["episode_ids"]) == 2
    episodes = call(demo, "get_agent_episodes", {"agent_id": "amy"}).structured_content["episodes"]
    assert [e["episode_id"] for e in episodes] == [ids["episode_ids"][1]]
    assert "id" not in episodes[0] and "tenant_id" not in episodes[0]
    bad = call(demo, "record_conversation", {"session_id": "chat-1", "turns": [{"speaker": "bob", "text": "x",
                                                                                 "agent_id": "eve"}]})
    assert bad.is_error and "turns[0].agent_id" in bad.content[0].text

    for _ in range(9):
        call(demo, "record_experience", {"experience": {"agent_id": "amy", "task_type": "t", "outcome": "success",
                                                        "task_description": "answer", "confidence_score": 0.9}})
    ready = call(demo, "readiness", {"agent_id": "amy", "window": 20}).structured_content
    assert ready["episodes"] == 10 and ready["window"] == 20 and isinstance(ready["ready"], bool)
    assert call(demo, "readiness", {"agent_id": "nobody"}).is_error


def test_observe_round_says_when_no_llm_is_configured(demo: WorldModel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    flagged = {"round": 30, "action": "look", "response": "hm\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: odd"}
    answer = call(demo, "observe_round", {"env_name": "Attic", "round": flagged}).structured_content
    assert answer["packet"]["status"] == "pending" and answer["llm_configured"] is False
    assert "no LLM is configured" in answer["note"] and "OPENAI_API_KEY" in answer["note"]


def test_world_graph_shows_facts_of_any_kind(tmp_path: Any) -> None:
    """Facts as one line each (subject predicate object), walked by ``around``, closed ones in the history."""
    people = [{"ref": n, "name": n, "type": t} for n, t in (("alice", "person"), ("acme", "company"),
                                                          ("beta", "company"), ("bob", "person"))]

    def fact(src: str, predicate: str, dst: str, **kw: Any) -> dict[str, Any]:
        return {"relation": "fact", "predicate": predicate, "src_ref": src, "dst_ref": dst, "confidence": 0.8, **kw}

    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64)) as wm:
        wm.apply_delta(TENANT, "office", {"entities": people, "states": [], "rules": [], "edges": [
            fact("alice", "works_at", "acme", single_valued=True), fact("bob", "knows", "alice")]})
        wm.apply_delta(TENANT, "office", {"entities": [], "states": [], "rules": [], "edges": [
            fact("alice", "works_at", "beta", single_valued=True)]})
        text = text_of(call(wm, "world_graph", {"env_name": "office"}))
        lines = text.splitlines()
        assert "current: 2 fact" in lines[1]
        start = lines.index("Facts (subject predicate object):") + 1
        assert lines[start:start + 3] == ["- person:alice works_at company:beta (single-valued; conf 0.80)",
                                          "- person:bob knows person:alice (conf 0.80)",
                                          "(current facts only: history=true adds closed ones; format='json' "
                                          "gives every record)"]
        assert "acme" not in text.split("Facts")[1]  # the closed fact is history
        near = text_of(call(wm, "world_graph", {"env_name": "office", "around": "bob", "depth": 2}))
        assert "company:beta" in near.split("Entities")[1]  # bob -> alice -> beta, through facts
        history = text_of(call(wm, "world_graph", {"env_name": "office", "history": True}))
        assert "- person:alice works_at company:acme: until " in history
