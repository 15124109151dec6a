"""Submitting feedback: validate a rating, store it, and return it with the episode's new
aggregates. Works on the episode half of the store only."""

from __future__ import annotations

import logging
import math
import uuid
from typing import Any

from worldgraph.clock import now_iso
from worldgraph.config import WorldGraphConfig
from worldgraph.errors import InvalidInputError
from worldgraph.kg.store import EpisodeStore
from worldgraph.limits import check_text
from worldgraph.memory.models import EpisodeFeedback
from worldgraph.memory.recall.pipeline import RecallResult
from worldgraph.names import check_tenant

__all__ = ["FeedbackResult", "submit_feedback"]

log = logging.getLogger("worldgraph")


class FeedbackResult(RecallResult):
    """A stored feedback record (EpisodeFeedback's fields) plus its episode's new aggregates:
    ``average`` (normalised to [0, 1]), ``mean_score`` (raw, in [-1, 1]) and ``count`` (None
    when they could not be read back). A dict whose keys read as attributes; it was returned
    as ``RecallResult`` before, and still is one (a subclass), so old checks keep passing."""


def submit_feedback(store: EpisodeStore, cfg: WorldGraphConfig, tenant_id: str, episode_id: str, score: float,
                    notes: str | None = None, category: str | None = None,
                    created_by: str | None = None) -> FeedbackResult:
    """Rate an episode in [-1, 1]: check every field, store one EpisodeFeedback record (NotFoundError
    for another tenant's episode), then read the episode's aggregates back."""
    check_tenant(tenant_id)
    if not isinstance(episode_id, str) or not episode_id:
        raise InvalidInputError("episode_id", "must be a non-empty string", episode_id)
    check_text(episode_id, "episode_id", cfg.max_text_bytes, "max_text_bytes")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or math.isnan(score):
        raise InvalidInputError("score", "must be a number in [-1, 1]", score)
    if not -1.0 <= float(score) <= 1.0:
        raise InvalidInputError("score", f"must be in [-1, 1] (-1 = harmful, 0 = neutral, 1 = excellent), got {score}",
                                score)
    for name, val in (("notes", notes), ("category", category), ("created_by", created_by)):
        if val is not None and not isinstance(val, str):
            raise InvalidInputError(name, "must be a string or None", val)
        check_text(val, name, cfg.max_text_bytes, "max_text_bytes")
    fb = EpisodeFeedback(id=str(uuid.uuid4()), episode_id=episode_id, tenant_id=tenant_id,
                         feedback_score=float(score), feedback_notes=notes, feedback_category=category,
                         created_by=created_by or "anonymous", created_at=now_iso())
    record: dict[str, Any] = fb.model_dump(mode="json")
    store.add_feedback(tenant_id, record)
    try:  # committed: from here on the call succeeds
        mean, count = store.feedback_stats(tenant_id, [episode_id])[episode_id]
    except Exception as exc:  # noqa: BLE001
        log.warning("feedback %s stored; reading the episode's new aggregates failed: %s", record["id"], exc)
        return FeedbackResult(record, average=None, mean_score=None, count=None)
    return FeedbackResult(record, average=round((mean + 1) / 2, 6), mean_score=round(mean, 6), count=count)
