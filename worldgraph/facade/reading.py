"""The reading path of ``WorldModel`` over the store and the index: episodes by id, by agent and by
page, the readiness exam, a tenant's counts, and the inputs of a recall (memory/recall/pipeline.py
runs it). The facade checks the tenant, then calls these."""

from __future__ import annotations

from typing import Any

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import InvalidInputError, NotFoundError
from worldgraph.kg.lifecycle import EpisodeFilter
from worldgraph.kg.store import GraphStore
from worldgraph.limits import MAX_PAGE, check_query, check_text, check_value
from worldgraph.memory.embeddings import Embedder, embedder_name
from worldgraph.memory.episode import Episode
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.lifecycle import Page, decode_cursor, encode_cursor, parse_time
from worldgraph.memory.metadata import parse_filter
from worldgraph.memory.models import RecallOptions
from worldgraph.names import KNOWN_SHOWN, known_names
from worldgraph.world.pending import waiting_reason


def agent_episodes(store: GraphStore, cfg: WorldGraphConfig, tenant_id: str, agent_id: str, limit: int) -> list[Episode]:
    """``WorldModel.get_agent_episodes``: the agent's newest ``limit`` episodes, newest first."""
    if not isinstance(agent_id, str) or not agent_id:
        raise InvalidInputError("agent_id", "must be a non-empty string", agent_id)
    check_text(agent_id, "agent_id", cfg.max_text_bytes, "max_text_bytes")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_PAGE:
        raise InvalidInputError("limit", f"must be a positive integer (at most {MAX_PAGE})", limit)
    episodes = store.agent_episodes(tenant_id, agent_id, limit)
    if not episodes:  # one rule for unknown names: not_found, naming the known ones
        raise NotFoundError("agent", agent_id, f"tenant {tenant_id!r} has no episodes of this agent; "
                            + known_names(store.agent_ids(tenant_id, KNOWN_SHOWN + 1), "agents",
                                          "record a run of it first"))
    return [Episode(e) for e in episodes]


def episode(store: GraphStore, cfg: WorldGraphConfig, tenant_id: str, episode_id: str) -> Episode:
    """``WorldModel.get_episode``: one stored episode by id, as recorded."""
    if not isinstance(episode_id, str) or not episode_id:
        raise InvalidInputError("episode_id", "must be a non-empty string", episode_id)
    check_text(episode_id, "episode_id", cfg.max_text_bytes, "max_text_bytes")
    found = store.get_episodes(tenant_id, [episode_id])
    if episode_id not in found:
        raise NotFoundError("episode", episode_id, f"tenant {tenant_id!r} holds no such episode")
    return Episode(found[episode_id])


def check_window(window: int) -> None:
    """The window of ``WorldModel.readiness``: a positive integer, at most MAX_PAGE."""
    if isinstance(window, bool) or not isinstance(window, int) or not 0 < window <= MAX_PAGE:
        raise InvalidInputError("window", f"must be a positive integer (at most {MAX_PAGE})", window)


def readiness(cfg: WorldGraphConfig, tenant_id: str, agent_id: str, window: int, episodes: list[Episode]) -> dict[str, Any]:
    """The readiness exam over ``episodes`` (the agent's last ``window``, at least one)."""
    n = len(episodes)
    zero_int = sum(1 for e in episodes if not e["human_intervention_required"]) / n
    compliance = sum(1 for e in episodes if not e["constitutional_violations"]) / n
    confidence = sum(float(e["confidence_score"]) for e in episodes) / n
    success = sum(1 for e in episodes if e["success"]) / n
    checks = {
        "episodes": (n, cfg.readiness_min_episodes),
        "zero_intervention_ratio": (zero_int, cfg.readiness_min_zero_intervention),
        "constitutional_compliance": (compliance, cfg.readiness_min_compliance),
        "mean_confidence": (confidence, cfg.readiness_min_confidence),
        "success_rate": (success, cfg.readiness_min_success_rate),
    }
    failing = [k for k, (v, m) in checks.items() if v < m]
    return {
        "tenant_id": tenant_id, "agent_id": agent_id, "window": window, "episodes": n,
        "zero_intervention_ratio": round(zero_int, 6), "constitutional_compliance": round(compliance, 6),
        "mean_confidence": round(confidence, 6), "success_rate": round(success, 6),
        "score": round((zero_int + compliance + confidence + success) / 4, 6),
        "ready": not failing, "failing": failing,
        "thresholds": {k: m for k, (_, m) in checks.items()},
    }


def stats(store: GraphStore, index: EpisodeIndex, embedder: Embedder, tenant_id: str) -> dict[str, Any]:
    """``WorldModel.stats``: the tenant's counts, the index's, and what the model runs on."""
    out: dict[str, Any] = dict(store.stats(tenant_id))
    out["indexed"] = index.count(tenant_id)
    out["environments"] = store.environments(tenant_id)
    out["world_pending_reason"] = waiting_reason(store, tenant_id)  # why packets wait (None: none do)
    out["graph_store"] = store.name
    out["cypher_sandbox"] = store.cypher_sandbox()
    out["embedder"] = embedder_name(embedder)
    return out


# Episodes read from the store per step while a metadata filter fills a page.
METADATA_SCAN = 500


def episode_page(store: GraphStore, cfg: WorldGraphConfig, tenant_id: str, agent_id: str | None, session_id: str | None,
                 since: Any, until: Any, limit: int, cursor: str | None, metadata: Any = None) -> Page:
    """``WorldModel.list_episodes``: one page, newest first, and the next page's cursor. A
    metadata filter is checked on the records as the store returns them, page by page of
    ``METADATA_SCAN`` (docs/architecture.md "Metadata")."""
    for name, value in (("agent_id", agent_id), ("session_id", session_id)):
        if value is not None and (not isinstance(value, str) or not value):
            raise InvalidInputError(name, "must be a non-empty string or null", value)
        check_text(value, name, cfg.max_text_bytes, "max_text_bytes")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_PAGE:
        raise InvalidInputError("limit", f"must be a positive integer (at most {MAX_PAGE})", limit)
    if isinstance(metadata, dict):
        check_value(metadata, "metadata", cfg, cfg.max_experience_bytes, "max_experience_bytes")
    wanted = parse_filter(metadata, "metadata")
    flt = EpisodeFilter(agent_id, session_id, parse_time(since, "since"), parse_time(until, "until"))
    spec = wanted.spec if wanted is not None else None
    after = decode_cursor(cursor, flt, spec)
    if wanted is None:
        rows = store.list_episodes(tenant_id, flt, limit + 1, after)
    else:
        rows = []
        while len(rows) <= limit:
            batch = store.list_episodes(tenant_id, flt, METADATA_SCAN, after)
            rows.extend(r for r in batch if wanted.matches(r.get("metadata")))
            if len(batch) < METADATA_SCAN:
                break
            after = (batch[-1]["ts"], batch[-1]["id"])
    more = len(rows) > limit
    rows = rows[:limit]
    nxt = encode_cursor(rows[-1]["ts"], rows[-1]["id"], flt, spec) if more else None
    return Page([Episode(r) for r in rows], nxt)


def check_recall(cfg: WorldGraphConfig, query: str, agent_role: str | None,
                 options: RecallOptions | dict[str, Any] | None) -> None:
    """The sizes of ``WorldModel.recall_experiences``'s inputs (the pipeline checks the rest)."""
    check_query(query, cfg)
    check_text(agent_role, "agent_role", cfg.max_text_bytes, "max_text_bytes")
    if isinstance(options, dict):
        check_value(options, "options", cfg, cfg.max_experience_bytes, "max_experience_bytes")
