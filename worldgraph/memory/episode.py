"""The episode as the read APIs return it: ``get_episode``, ``get_agent_episodes`` and the items
of ``list_episodes`` are ``Episode``; ``recall_experiences`` returns ``RecallResult``, an episode
with its scores (a subclass)."""

from __future__ import annotations

from typing import Any

__all__ = ["Episode"]


class Episode(dict[str, Any]):
    """A stored episode: a JSON-ready dict (the record's fields: episode_id, agent_id, task_type,
    task_description, outcome, timestamp, ...) whose keys also read as attributes."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc
