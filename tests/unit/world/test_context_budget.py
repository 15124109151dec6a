"""context()'s block at every budget: the world's facts keep their share however small the budget
(an episode line never crowds out the most relevant fact), every line cites an id, and the block
never takes more tokens than asked."""

from __future__ import annotations

from worldgraph.world.search.context import EPISODE_HEADER, WORLD_HEADER, build_context, count_tokens
from worldgraph.world.search.models import WorldHit

FACT = "the brass key is located in the wooden chest, on the second shelf of the pantry by the door"


def hits() -> list[tuple[WorldHit, bool]]:
    return [(WorldHit(kind="fact", id=f"{i}f2a9c1d-0000-4000-8000-00000000000{i}", env_name="e", text=text,
                      current=True, confidence=0.9), False)
            for i, text in enumerate([FACT, "the wooden chest is open", "the pantry (room)"])]


EPISODES = [{"episode_id": "e7c04a5b-0000-4000-8000-000000000001", "timestamp": "2026-12-05", "agent_id": "a",
             "task_description": "key", "outcome": "success"}]


def test_the_world_keeps_a_line_at_every_budget_and_the_block_stays_within_it() -> None:
    for budget in range(1, 120):
        ctx = build_context(hits(), EPISODES, budget, 0.6)
        lines = ctx.text.splitlines()
        assert ctx.tokens == sum(n + 1 for n in count_tokens(lines)) <= budget, budget
        world = [c for c in ctx.citations if c.kind == "fact"]
        if budget >= 16:  # room for a cited id and a word
            assert world and world[0].id == hits()[0][0].id, (budget, ctx.text)
            first = lines[1] if lines[0] == WORLD_HEADER else lines[0]
            assert first.startswith("[0f2a9c1d] the "), (budget, first)
        for line in lines:
            assert line in (WORLD_HEADER, EPISODE_HEADER) or line.startswith("["), line
        if lines and lines[0] != WORLD_HEADER:  # a line alone, without its header: nothing else fits
            assert len(lines) == 1 and budget < 40, (budget, ctx.text)
    # a budget that holds the fact whole gives it whole, under its header, before the episodes
    ctx = build_context(hits(), EPISODES, 45, 0.6)
    assert ctx.text.splitlines()[:2] == [WORLD_HEADER, f"[0f2a9c1d] {FACT}"]


def test_the_share_and_the_episodes_as_before_when_the_budget_is_ample() -> None:
    ctx = build_context(hits(), EPISODES, 1500, 0.6)
    assert [c.kind for c in ctx.citations] == ["fact", "fact", "fact", "episode"]
    assert build_context(hits(), EPISODES, 40, 0.0).citations[0].kind == "episode"  # a share of 0 is none
    assert build_context([], EPISODES, 40, 0.6).citations[0].kind == "episode"
