"""The sample format of ``examples/experiences.jsonl``, read by ``worldgraph record`` and the demo.

Each item is an experience, or ``{"experience": {...}, "canvas": {...}, "days_ago": 1.5,
"feedback": [{"score": 0.8, "notes": ..., "category": ..., "created_by": ...}]}``: ``days_ago``
dates the experience that long before now (unless it has its own ``timestamp``), and each
feedback item is stored as a rating of the recorded episode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from worldgraph.errors import InvalidInputError


@dataclass
class Samples:
    experiences: list[Any] = field(default_factory=list)
    canvases: list[Any] = field(default_factory=list)
    feedback: list[list[dict[str, Any]]] = field(default_factory=list)

    @property
    def ratings(self) -> int:
        return sum(len(f) for f in self.feedback)


def split_samples(items: list[tuple[int, Any]], source: str, now: datetime | None = None) -> Samples:
    """Experiences, canvases and ratings of the items; ``items`` are (line, item) of ``source``."""
    now = now or datetime.now(timezone.utc)
    out = Samples()
    for line, item in items:
        if not (isinstance(item, dict) and "experience" in item):
            out.experiences.append(item)
            out.canvases.append(None)
            out.feedback.append([])
            continue
        exp = item["experience"]
        if "days_ago" in item and isinstance(exp, dict) and not exp.get("timestamp"):
            try:
                days = float(item["days_ago"])
            except (TypeError, ValueError):
                raise InvalidInputError("days_ago", f"{source}:{line}: must be a number of days, not "
                                        f"{item['days_ago']!r}", item["days_ago"]) from None
            exp = {**exp, "timestamp": (now - timedelta(days=days)).isoformat()}
        ratings = item.get("feedback") or []
        if not isinstance(ratings, list) or not all(isinstance(r, dict) and "score" in r for r in ratings):
            raise InvalidInputError("feedback", f"{source}:{line}: must be a list of objects with a score in "
                                    "[-1, 1] (and optional notes, category, created_by)", ratings)
        out.experiences.append(exp)
        out.canvases.append(item.get("canvas"))
        out.feedback.append(ratings)
    return out


def store_ratings(wm: Any, tenant_id: str, episode_ids: list[str], samples: Samples) -> int:
    """Submit each sample's ratings for its recorded episode; returns how many were stored."""
    stored = 0
    for eid, ratings in zip(episode_ids, samples.feedback, strict=True):
        for fb in ratings:
            wm.submit_feedback(tenant_id, eid, fb["score"], notes=fb.get("notes"), category=fb.get("category"),
                               created_by=fb.get("created_by"))
            stored += 1
    return stored
