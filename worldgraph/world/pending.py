"""Why scene packets wait: one sentence for every surface that counts pending packets (the CLI's
``run`` and ``demo``, ``stats``, the world graph's compact text, REST's round and retry answers).

A packet is pending for one of three reasons: no LLM is configured (nothing will extract it until
one is), its last extraction failed in a way worth retrying (the LLM server was unreachable, timed
out or failed: the scene's ``error`` says which, naming the server by its host only), or it simply
waits for a worker. ``failed`` packets carry their error the same way."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from worldgraph.config import llm_configured
from worldgraph.kg.store import GraphStore

__all__ = ["NO_LLM", "waiting_reason", "scene_reasons"]

NO_LLM = ("no LLM is configured: set OPENAI_API_KEY (OpenAI) or OPENAI_BASE_URL (a local OpenAI-compatible "
          "server), then run `worldgraph world retry`")


def scene_reasons(scenes: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """For pending and failed scenes: each distinct reason and how many scenes it holds back,
    most frequent first."""
    counts: dict[str, int] = {}
    for scene in scenes:
        status = scene.get("status")
        if status not in ("pending", "failed"):
            continue
        error = scene.get("error")
        reason = (str(error) if error else NO_LLM if status == "pending" and not llm_configured()
                  else "waiting for a worker" if status == "pending" else "failed (no error recorded)")
        counts[reason] = counts.get(reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def waiting_reason(store: GraphStore, tenant_id: str, env_name: str | None = None) -> str | None:
    """The most frequent reason a pending or failed packet of the tenant (of one environment)
    waits, or None when none waits."""
    reasons = scene_reasons(store.list_scenes(tenant_id, env_name, statuses=["pending", "failed"]))
    return next(iter(reasons), None)
