"""Transcripts as episodes: ``record_conversation`` turns each turn of a chat into one episode.

A turn ``{"speaker", "text", "timestamp", ...}`` becomes an AgentExperience: the speaker is the
agent, the text the task description, the turn before it (``"Melanie: Where did you go?"``) its
input summary, so a turn is indexed and found together with what it answers. Any other
AgentExperience field may ride along (``agent_role``, ``episode_id``, ``learnings``, ...).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from worldgraph.clock import to_utc
from worldgraph.errors import InvalidInputError
from worldgraph.memory.models import AgentExperience, check_session_id
from worldgraph.memory.record import CONVERSATION_TASK_TYPE, parse_experience, pydantic_error

TURN_TASK_TYPE = CONVERSATION_TASK_TYPE
# Set by the call (session_id argument) or by the turn's own speaker / text: a turn may not name them.
_FIXED = ("agent_id", "task_description", "session_id", "tenant_id")


class ConversationTurn(BaseModel):
    """One turn of a transcript."""

    model_config = ConfigDict(extra="allow", str_strip_whitespace=True)
    speaker: str = Field(min_length=1, description="who said it (becomes the episode's agent_id)")
    text: str = Field(min_length=1, description="what was said")
    timestamp: datetime | None = Field(None, description="when (ISO-8601); unset: now")

    @field_validator("timestamp")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        return None if v is None else to_utc(v)


def check_session(session_id: Any) -> str:
    try:
        return check_session_id(session_id)
    except ValueError as exc:
        raise InvalidInputError("session_id", str(exc), session_id) from None


def parse_turns(turns: Any, max_items: int | None = None,
                check: Callable[[int, Any], object] | None = None) -> list[ConversationTurn]:
    """The turns, validated in order (at most ``max_items`` are read; ``check(i, raw)`` runs on
    each raw turn first, e.g. the service's input limits)."""
    if isinstance(turns, (str, bytes, dict)) or not hasattr(turns, "__iter__"):
        raise InvalidInputError("turns", "must be a list of turns like {'speaker': ..., 'text': ..., 'timestamp': ...}")
    out = []
    for i, raw in enumerate(itertools.islice(turns, max_items)):
        if check is not None:
            check(i, raw)
        if isinstance(raw, ConversationTurn):
            out.append(raw)
            continue
        if not isinstance(raw, dict):
            raise InvalidInputError(f"turns[{i}]", f"must be a dict with speaker and text, got {type(raw).__name__}")
        fixed = [k for k in _FIXED if k in raw]
        if fixed:
            raise InvalidInputError(f"turns[{i}].{fixed[0]}", "is set by record_conversation (speaker, text and "
                                    "the session_id argument); leave it out")
        try:
            out.append(ConversationTurn.model_validate(raw))
        except ValidationError as exc:
            raise pydantic_error(exc, f"turns[{i}]") from exc
    return out


def quoted(speaker: str, text: str) -> str:
    """How a turn reads as the context of the next one."""
    return f"{speaker}: {text}"


def turn_experiences(session_id: str, turns: list[ConversationTurn], previous: str | None) -> list[AgentExperience]:
    """The experiences of a session's turns, in order; ``previous`` is the stored turn the first
    one follows (``quoted``), if any."""
    out = []
    for i, turn in enumerate(turns):
        extra = dict(turn.model_extra or {})
        exp = {"agent_id": turn.speaker, "task_type": TURN_TASK_TYPE, "task_description": turn.text,
               "outcome": "success", "session_id": session_id, **extra}
        if turn.timestamp is not None:
            exp["timestamp"] = turn.timestamp
        context = previous if i == 0 else quoted(turns[i - 1].speaker, turns[i - 1].text)
        if context and "input_summary" not in extra and "input" not in extra:
            exp["input_summary"] = context
        out.append(parse_experience(exp, f"turns[{i}]"))
    return out
