"""Steps 4 and 5 of recall (docs/architecture.md "Recall"): the diversity penalty on the head of the
ranking, then the top k as ``RecallResult``s (with the neighbourhood and canvas details when asked)."""

from __future__ import annotations

from typing import Any

from worldgraph.config import WorldGraphConfig
from worldgraph.kg.store import EpisodeStore
from worldgraph.memory.episode import Episode
from worldgraph.memory.models import RecallOptions
from worldgraph.memory.recall.assembly import Scored
from worldgraph.memory.recall.candidates import Candidates
from worldgraph.memory.recall.scoring import diversity_order


class RecallResult(Episode):
    """A recalled episode: its fields plus relevance_score, semantic_score and score_breakdown
    (a dict whose keys also read as attributes)."""


def diversify(cfg: WorldGraphConfig, k: int, found: Candidates, scored: Scored) -> list[str]:
    """4. diversity penalty and re-sort (ties broken by id so results are deterministic); returns
    the ids of the top ``k``, best first, and records each head candidate's penalty in ``scored``."""
    ids = sorted(found.ids)
    ranking, pos = scored.scores.ranking, scored.text.pos
    scores = [float(ranking[pos[i]]) for i in ids]
    # Only the head of the ranking can reach the top k, so the penalty is computed on a prefix
    # (exactly: a memory's penalty depends only on the memories ranked above it, and an adjusted
    # score is never above the score, so once the k-th best adjusted score of the prefix is >= the
    # next score, nothing further down can enter). Besides saving work, this keeps the pairwise
    # cosine matrix small: multi-threaded BLAS on a 100 x 100 product costs ~20 ms on a loaded
    # 2-core machine, a 16 x 16 one ~0.05 ms.
    by_score = sorted(range(len(ids)), key=lambda p: -scores[p])  # stable: same order as diversity_order
    m = min(len(ids), max(2 * k, 16))
    while True:
        head = by_score[:m]
        rows = [found.row[ids[p]] for p in head]
        order, penalties = diversity_order([scores[p] for p in head], found.matrix[rows], cfg)
        if m == len(ids):
            break
        adjusted = sorted((scores[p] - penalties[j] for j, p in enumerate(head)), reverse=True)
        if len(adjusted) >= k and adjusted[k - 1] >= scores[by_score[m]]:
            break
        m = min(len(ids), m * 2)
    for j, p in enumerate(head):
        scored.penalties[ids[p]] = penalties[j]
    return [ids[head[o]] for o in order[:k]]


def format_results(store: EpisodeStore, tenant_id: str, opts: RecallOptions, found: Candidates,
                   scored: Scored, top: list[str]) -> list[RecallResult]:
    """5. top-k and formatting."""
    episodes, stats, avg = found.episodes, found.stats, found.avg
    parts = {i: scored.parts(i) for i in top}
    extra = store.neighborhood(tenant_id, top) if opts.include_neighborhood else {}
    adjacent = _adjacent(store, tenant_id, top) if opts.include_neighborhood else {}
    results = []
    for i in top:
        ep = episodes[i]
        res = RecallResult(
            episode_id=i,
            task_type=ep["task_type"],
            task_description=ep["task_description"],
            input_summary=ep.get("input_summary", ""),
            outcome=ep["outcome"],
            learnings=ep.get("learnings", []),
            confidence=ep["confidence_score"],
            timestamp=ep["timestamp"],
            relevance_score=round(parts[i].score, 6),
            canvas_id=ep.get("canvas_id"),
            canvas_name=ep.get("canvas_name"),
            canvas_actions=ep.get("canvas_action_ids", []),
            feedback_score=None if (f := avg[i]) is None else round(f, 6),
            feedback_count=stats[i][1] if i in stats else 0,
            semantic_score=round(found.semantic[i], 6),
            agent_id=ep["agent_id"],
            agent_role=ep.get("agent_role", ""),
            success=ep["success"],
            approach_taken=ep.get("approach_taken", ""),
            session_id=ep.get("session_id"),
            metadata=ep.get("metadata") or {},
            score_breakdown=parts[i].as_dict(),
        )
        if opts.include_canvas_context:
            res["canvas_snapshot"] = ep.get("canvas_snapshot")
            res["canvas_action_details"] = store.canvas_audits(tenant_id, i)
        if opts.include_neighborhood:
            res["neighborhood"] = {**(extra.get(i) or {}), **adjacent.get(i, {"previous": None, "next": None})}
        results.append(res)
    return results


def _adjacent(store: EpisodeStore, tenant_id: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    """Per episode of a session: its previous and next episode in the session (records or None)."""
    links = store.session_neighbors(tenant_id, ids)
    found = store.get_episodes(tenant_id, [x for pair in links.values() for x in pair if x is not None])
    return {i: {"previous": found.get(p) if p else None, "next": found.get(n) if n else None}
            for i, (p, n) in links.items()}
