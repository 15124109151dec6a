"""What each framework adapter adds to the recall it makes (the target: <= 2 ms p50 over the same
``WorldModel`` call). For each adapter, the adapter's search and the WorldModel call it makes
(same tenant, query, k, options) alternate in one run, query by query, so load and caches are
shared; the p50s and the p50 of the paired differences are printed.

    python bench/bench_integrations.py --episodes 5000 --queries 200 --out bench/results/integrations.json

- LangChain: ``WorldgraphRetriever.invoke(q)`` vs ``recall_experiences(tenant, None, q, k, options)``
- LangGraph: ``WorldgraphStore.search(ns, query=q, limit=k)`` vs the recall it makes (role, the
  namespace's and indexed metadata conditions, no floor)
- LlamaIndex: ``WorldgraphRetriever.retrieve(q)`` vs the same recall
- OpenAI Agents SDK: the ``recall_memories`` tool invoked (JSON in and out) vs
  ``AsyncWorldModel.recall_experiences``, awaited on one loop

The embedder is the hashing one by default (``--embedder default`` for MiniLM): the query is
embedded by both sides alike, and a cheap embedder leaves less noise on the difference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from worldgraph import AsyncWorldModel, WorldModel
from worldgraph.memory.embeddings import HashingEmbedder

WORDS = ("invoice ledger shipment warehouse refund customer pricing forecast audit payroll contract vendor "
         "inventory budget travel meeting deadline report migration backup outage deploy review hiring").split()
K = 5


def corpus(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(8)) + f" #{i}" for i in range(n)]


def paired(name: str, queries: list[str], adapter: Callable[[str], Any], baseline: Callable[[str], Any]) -> dict[str, Any]:
    a, b = [], []
    for q in queries[:10]:  # warm both paths (tables, copies, imports)
        adapter(q)
        baseline(q)
    for i, q in enumerate(queries):
        order = [(adapter, a), (baseline, b)] if i % 2 == 0 else [(baseline, b), (adapter, a)]
        for fn, out in order:
            t = time.perf_counter()
            fn(q)
            out.append((time.perf_counter() - t) * 1000)
    return summary(name, a, b)


async def apaired(name: str, queries: list[str], adapter: Callable[[str], Awaitable[Any]],
                  baseline: Callable[[str], Awaitable[Any]]) -> dict[str, Any]:
    a, b = [], []
    for q in queries[:10]:
        await adapter(q)
        await baseline(q)
    for i, q in enumerate(queries):
        order = [(adapter, a), (baseline, b)] if i % 2 == 0 else [(baseline, b), (adapter, a)]
        for fn, out in order:
            t = time.perf_counter()
            await fn(q)
            out.append((time.perf_counter() - t) * 1000)
    return summary(name, a, b)


def summary(name: str, a: list[float], b: list[float]) -> dict[str, Any]:
    diff = [x - y for x, y in zip(a, b)]
    return {"adapter": name, "adapter_p50_ms": statistics.median(a), "worldmodel_p50_ms": statistics.median(b),
            "added_p50_ms": statistics.median(a) - statistics.median(b), "paired_diff_p50_ms": statistics.median(diff),
            "n": len(a)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=5000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--embedder", choices=["hashing", "default"], default="hashing")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    from agents.tool_context import ToolContext
    from langgraph.store.base import PutOp

    from worldgraph.integrations.langchain import WorldgraphRetriever as LcRetriever
    from worldgraph.integrations.langgraph import ROLE, WorldgraphStore
    from worldgraph.integrations.llama_index import WorldgraphRetriever as LiRetriever
    from worldgraph.integrations.openai_agents import worldgraph_tools

    texts = corpus(args.episodes)
    queries = [" ".join(random.Random(i).sample(WORDS, 3)) for i in range(args.queries)]
    kw: dict[str, Any] = {} if args.embedder == "default" else {"embedder": HashingEmbedder(384)}
    results = []
    with tempfile.TemporaryDirectory() as folder, WorldModel.open(folder, **kw) as wm:
        for start in range(0, len(texts), 1000):
            wm.record_experiences("acme", [{"agent_id": "notes", "task_type": "note", "outcome": "success",
                                            "task_description": t} for t in texts[start:start + 1000]])
        store = WorldgraphStore(wm, "acme")
        for start in range(0, len(texts), 1000):
            store.batch([PutOp(("memories", "u1"), f"k{i}", {"text": t})
                         for i, t in enumerate(texts[start:start + 1000], start)])
        opts = {"min_similarity": -1.0}
        lc = LcRetriever(model=wm, tenant_id="acme", k=K, options=opts)
        results.append(paired("langchain retriever", queries, lc.invoke,
                              lambda q: wm.recall_experiences("acme", None, q, K, options={**opts, "limit": K})))
        meta = {"ns": {"0": "memories", "1": "u1"}, "indexed": True}
        results.append(paired("langgraph store search", queries,
                              lambda q: store.search(("memories", "u1"), query=q, limit=K),
                              lambda q: wm.recall_experiences("acme", ROLE, q, K,
                                                              options={"metadata": meta, "min_similarity": -1.0})))
        li = LiRetriever(wm, "acme", similarity_top_k=K, options=opts)
        results.append(paired("llama_index retriever", queries, li.retrieve,
                              lambda q: wm.recall_experiences("acme", None, q, K, options=opts)))
        aio = AsyncWorldModel(wm)
        tool = worldgraph_tools(aio, "acme")[0]

        async def via_tool(q: str) -> Any:
            args_json = json.dumps({"query": q, "limit": K})
            ctx = ToolContext(context=None, tool_name=tool.name, tool_call_id="c", tool_arguments=args_json)
            return await tool.on_invoke_tool(ctx, args_json)

        results.append(asyncio.run(apaired("openai_agents recall tool", queries, via_tool,
                                           lambda q: aio.recall_experiences("acme", None, q, K))))
    print(f"{'adapter':28} {'adapter p50':>12} {'WorldModel p50':>15} {'added p50':>10} {'paired diff p50':>16}")
    for r in results:
        print(f"{r['adapter']:28} {r['adapter_p50_ms']:10.2f}ms {r['worldmodel_p50_ms']:13.2f}ms "
              f"{r['added_p50_ms']:8.2f}ms {r['paired_diff_p50_ms']:14.2f}ms")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"episodes": args.episodes, "queries": args.queries, "embedder": args.embedder,
                                        "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
