"""AsyncWorldModel: every public WorldModel method as a coroutine, with the sync one's behaviour
(results, validation, errors), and the event loop free while it runs."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from pathlib import Path

import pytest

from worldgraph import AsyncWorldModel, InvalidInputError, NotFoundError, WorldModel
from worldgraph.aio import ASYNC_METHODS
from worldgraph.memory.embeddings import HashingEmbedder

T = "acme"
EXP = {"agent_id": "fin-1", "agent_role": "Finance", "task_type": "reconciliation",
       "task_description": "Reconcile SKU-123 inventory discrepancy", "outcome": "success"}


def test_the_method_sets_match() -> None:
    sync = {n for n, v in inspect.getmembers(WorldModel, callable) if not n.startswith("_")}
    mine = {n for n, v in inspect.getmembers(AsyncWorldModel, callable) if not n.startswith("_")}
    assert sync == mine
    assert set(ASYNC_METHODS) == sync - {"open", "close"} and len(ASYNC_METHODS) > 15
    for name in sync:
        assert inspect.iscoroutinefunction(getattr(AsyncWorldModel, name)), name
        if name != "open":  # same parameters, so a caller moves from one to the other unchanged
            assert inspect.signature(getattr(AsyncWorldModel, name)).parameters.keys() == \
                inspect.signature(getattr(WorldModel, name)).parameters.keys(), name


class SlowEmbedder(HashingEmbedder):
    """Embeds slowly and records which thread it ran on."""

    def __init__(self) -> None:
        super().__init__(384)
        self.threads: set[int] = set()

    def embed(self, texts: list[str]):  # type: ignore[no-untyped-def]
        self.threads.add(threading.get_ident())
        time.sleep(0.05)
        return super().embed(texts)


def test_same_results_and_errors_and_the_loop_stays_free(tmp_path: Path) -> None:
    emb = SlowEmbedder()

    async def main() -> None:
        async with await AsyncWorldModel.open(tmp_path / "data", embedder=emb) as wm:
            assert isinstance(wm.sync, WorldModel)
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.005)
                    ticks += 1

            tick = asyncio.create_task(ticker())
            ids = await asyncio.gather(*(wm.record_experience(T, {**EXP, "task_description": f"task {i}"})
                                         for i in range(6)))
            tick.cancel()
            assert len(set(ids)) == 6 and ticks >= 5  # the loop ran while the records embedded
            assert threading.get_ident() not in emb.threads
            results = await wm.recall_experiences(T, "Finance", "task 3", 3, {"min_similarity": 0})
            assert results[0]["episode_id"] == ids[3]
            fb = await wm.submit_feedback(T, ids[0], 0.5)
            assert fb["count"] == 1
            assert (await wm.stats(T))["episodes"] == 6
            with pytest.raises(InvalidInputError) as bad:  # validation before any write, as sync
                await wm.record_experiences(T, [EXP, {**EXP, "outcome": "meh"}])
            assert bad.value.field.startswith("experiences[1]")
            assert (await wm.stats(T))["episodes"] == 6
            with pytest.raises(NotFoundError):
                await wm.get_episode(T, "nope")

    asyncio.run(main())
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(384)) as wm:  # closed cleanly, reopens
        assert wm.stats(T)["episodes"] == 6


def test_wraps_only_a_world_model() -> None:
    with pytest.raises(TypeError, match="WorldModel"):
        AsyncWorldModel(object())  # type: ignore[arg-type]
