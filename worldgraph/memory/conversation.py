"""Transcripts as episodes: ``record_conversation`` turns each turn of a chat into one episode.

A turn ``{"speaker", "text", "timestamp", ...}`` becomes an AgentExperience: the speaker is the
agent, the text the task description, the turn before it (``"Melanie: Where did you go?"``) its
input summary, so a turn is indexed and found together with what it answers. That input summary
is derived text (``kg.derived``): the episode names the turn it quotes (``context_from``), and
forgetting that turn derives it again. Any other AgentExperience field may ride along
(``agent_role``, ``episode_id``, ``learnings``, ...); a turn that gives its own ``input_summary``
keeps it and quotes nothing.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from worldgraph.clock import to_utc
from worldgraph.errors import InvalidInputError
from worldgraph.kg.derived import quoted
from worldgraph.memory.models import AgentExperience, check_session_id
from worldgraph.memory.record import CONVERSATION_TASK_TYPE, parse_experience, pydantic_error

TURN_TASK_TYPE = CONVERSATION_TASK_TYPE
# Set by the call (session_id argument) or by the turn's own speaker / role / text: a turn may not name them.
_FIXED = ("agent_id", "task_description", "session_id", "tenant_id")


class ConversationTurn(BaseModel):
    """One turn of a transcript."""

    model_config = ConfigDict(extra="allow", str_strip_whitespace=True)
    speaker: str | None = Field(None, min_length=1, description="who said it (becomes the episode's agent_id); "
                                "unset: the role")
    role: str | None = Field(None, min_length=1, max_length=64, description="the speaker's part: system, user, "
                             "assistant, tool, ... (becomes the episode's agent_role)")
    text: str = Field(description="what was said; \"\" for a turn that only calls a tool")
    timestamp: datetime | None = Field(None, description="when (ISO-8601); unset: now, the turns of one call "
                                       "a microsecond apart in their order")

    @field_validator("timestamp")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        return None if v is None else to_utc(v)

    @model_validator(mode="after")
    def _someone(self) -> ConversationTurn:
        if self.speaker is None:
            if self.role is None:
                raise ValueError("give speaker (who said it) or role (user, assistant, tool, ...)")
            self.speaker = self.role
        return self


def stamped(turns: list[ConversationTurn], now: datetime, last: float | None) -> list[ConversationTurn]:
    """The turns, those without a timestamp dated ``now`` a microsecond apart in their order, and
    after ``last`` (unix seconds: the session's newest stored turn), so a session reads back in the
    order its turns were given even when they are recorded within one clock tick."""
    if all(t.timestamp is not None for t in turns):
        return turns
    base = now if last is None else max(now, datetime.fromtimestamp(last, timezone.utc) + timedelta(microseconds=1))
    return [t if t.timestamp is not None else t.model_copy(update={"timestamp": base + timedelta(microseconds=i)})
            for i, t in enumerate(turns)]


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
        if raw.get("speaker") is None and raw.get("role") is None:
            raise InvalidInputError(f"turns[{i}].speaker", "is required (who said it), or give role "
                                    "(user, assistant, tool, ...)")
        fixed = [k for k in _FIXED if k in raw]
        if fixed:
            raise InvalidInputError(f"turns[{i}].{fixed[0]}", "is set by record_conversation (speaker, text and "
                                    "the session_id argument); leave it out")
        try:
            out.append(ConversationTurn.model_validate(raw))
        except ValidationError as exc:
            raise pydantic_error(exc, f"turns[{i}]") from exc
    return out


__all__ = ["ConversationTurn", "TURN_TASK_TYPE", "check_session", "parse_turns", "quoted", "stamped",
           "turn_experiences"]


def turn_experiences(session_id: str, turns: list[ConversationTurn],
                     previous: dict[str, Any] | None) -> tuple[list[AgentExperience], list[str | None]]:
    """The experiences of a session's turns, in order, and for each the id of the episode its
    input summary quotes (``kg.derived.turn_context``; None: it quotes none). ``previous`` is the
    stored episode the first turn follows, if any. A turn without an ``episode_id`` gets one here,
    so the next turn can name it."""
    out: list[AgentExperience] = []
    sources: list[str | None] = []
    before = previous
    for i, turn in enumerate(turns):
        extra = dict(turn.model_extra or {})
        exp = {"agent_id": turn.speaker, "task_type": TURN_TASK_TYPE, "task_description": turn.text,
               "outcome": "success", "session_id": session_id, **extra}
        if turn.role is not None:
            if extra.get("agent_role") not in (None, turn.role):
                raise InvalidInputError(f"turns[{i}].agent_role", f"is {extra['agent_role']!r} but role is "
                                        f"{turn.role!r}: give one of them")
            exp["agent_role"] = turn.role
        if exp.get("episode_id") is None:
            exp["episode_id"] = str(uuid.uuid4())
        if turn.timestamp is not None:
            exp["timestamp"] = turn.timestamp
        if before is not None and "input_summary" not in extra and "input" not in extra:
            # the quote as it is; recording summarizes it, which gives turn_context(before)
            exp["input_summary"] = quoted(str(before["agent_id"]), str(before["task_description"]))
            sources.append(str(before["id"]))
        else:
            sources.append(None)
        parsed = parse_experience(exp, f"turns[{i}]")
        out.append(parsed)
        before = {"id": parsed.episode_id, "agent_id": parsed.agent_id, "task_description": parsed.task_description}
    return out, sources
