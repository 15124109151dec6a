"""Recording an experience (docs/architecture.md "Recording"): validate, build the episode, build the searchable text.

Storing (step 3) and indexing (step 5) are the service's job; this module is pure.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any, TypeVar, overload

from pydantic import BaseModel, ValidationError

from worldgraph.clock import iso, utcnow
from worldgraph.errors import InvalidInputError
from worldgraph.kg.derived import INPUT_SUMMARY_MAX, TURN_TASK_TYPE, summarize
from worldgraph.memory.metadata import metadata_terms
from worldgraph.memory.models import AgentExperience, CanvasAudit, CanvasContext

__all__ = ["INPUT_SUMMARY_MAX", "CONVERSATION_TASK_TYPE", "EpisodeRows", "build_episode", "date_text", "index_row", "index_text",
           "parse_canvas", "parse_experience", "parse_model", "pydantic_error", "searchable_text", "summarize"]


def pydantic_error(exc: ValidationError, prefix: str) -> InvalidInputError:
    """The first error of a pydantic failure as InvalidInputError('prefix.field', 'rule')."""
    errs = exc.errors()
    err = errs[0]
    loc = ".".join(str(p) for p in err["loc"] if p != "__root__")
    field = f"{prefix}.{loc}" if loc else prefix
    rule = err["msg"]
    if err["type"] == "missing":
        rule = "is required"
    elif err["type"] == "extra_forbidden":
        rule = "is not a known field (check the spelling against AgentExperience)"
    if len(errs) > 1:
        rule += f" (and {len(errs) - 1} more problem{'s' if len(errs) > 2 else ''})"
    return InvalidInputError(field, rule, err.get("input"))


M = TypeVar("M", bound=BaseModel)


def parse_model(model: type[M], value: Any, field: str) -> M:
    """``value`` as ``model`` (a model instance passes through, a dict is validated); any
    failure is an InvalidInputError naming ``field`` and the rule."""
    if isinstance(value, model):
        return value
    if not isinstance(value, dict):
        raise InvalidInputError(field, f"must be a {model.__name__} or a dict, got {type(value).__name__}")
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise pydantic_error(exc, field) from exc


def parse_experience(experience: AgentExperience | dict[str, Any], field: str = "experience") -> AgentExperience:
    return parse_model(AgentExperience, experience, field)


def parse_canvas(canvas: CanvasContext | dict[str, Any] | None, field: str = "canvas") -> CanvasContext | None:
    return None if canvas is None else parse_model(CanvasContext, canvas, field)


def build_episode(
    tenant_id: str,
    exp: AgentExperience,
    canvas: CanvasContext | None,
    now: datetime | None = None,
    field: str = "experience",
) -> tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]]:
    """Returns (episode record, canvas record or None, canvas audit records)."""
    if exp.tenant_id is not None and exp.tenant_id != tenant_id:
        raise InvalidInputError(f"{field}.tenant_id", f"is {exp.tenant_id!r} but the call is for tenant {tenant_id!r}")
    if canvas is not None and exp.canvas_id is not None and exp.canvas_id != canvas.id:
        raise InvalidInputError(f"{field}.canvas_id",
                                f"is {exp.canvas_id!r} but the canvas context given is {canvas.id!r}")
    if exp.episode_id is not None and not exp.episode_id.strip():
        raise InvalidInputError(f"{field}.episode_id", "must not be blank (leave it out to get a new id)")
    ts = exp.timestamp or now or utcnow()
    episode_id = exp.episode_id or str(uuid.uuid4())
    record = exp.model_dump(mode="json")
    action_ids = list(exp.canvas_action_ids)
    if canvas is not None:
        for a in canvas.actions:
            if a.id not in action_ids:
                action_ids.append(a.id)
    record.update(
        id=episode_id,
        episode_id=episode_id,
        tenant_id=tenant_id,
        input_summary=summarize(exp.input_summary),
        timestamp=iso(ts),
        ts=ts.timestamp(),
        canvas_id=canvas.id if canvas is not None else exp.canvas_id,
        canvas_name=canvas.name if canvas is not None else None,
        canvas_snapshot=canvas.serialize() if canvas is not None else None,
        canvas_action_ids=action_ids,
        index_status="pending",
        index_error=None,
    )
    canvas_rec = None
    audits: list[dict[str, Any]] = []
    if canvas is not None:
        canvas_rec = {"id": canvas.id, "tenant_id": tenant_id, "name": canvas.name, "snapshot": canvas.serialize(),
                      "updated_at": iso(ts)}
        for action in canvas.actions:
            audits.append(CanvasAudit(
                id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"worldgraph:{tenant_id}/{episode_id}/{action.id}")),
                tenant_id=tenant_id, canvas_id=canvas.id, action_id=action.id, action_type=action.type,
                component_id=action.component_id, agent_id=exp.agent_id, episode_id=episode_id,
                timestamp=iso(action.timestamp), details=action.details,
            ).model_dump(mode="json"))
    return record, canvas_rec, audits


CONVERSATION_TASK_TYPE = TURN_TASK_TYPE  # the task type of a transcript turn (record_conversation)
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")  # not strftime("%B"): that follows the locale


def searchable_text(episode: dict[str, Any], max_bytes: int | None = None) -> str:
    """The searchable text: task type, description, input summary, outcome and learnings (what is embedded).

    A conversation turn is embedded as what was said and by whom (``"Caroline: I went to the
    support group"``): the fixed words "conversation" and "success" would only blur it, and so
    would the turn before it (measured on LoCoMo: the vector of the turn alone ranks better);
    that context goes to the full-text column instead (``index_text``).

    ``max_bytes`` cuts the text to that many UTF-8 bytes (config ``max_search_text_bytes``), so
    a huge record (one stored before the input limits, or imported) costs an embedding and a
    full-text scan no more than any other."""
    learnings = " ".join(episode.get("learnings") or [])
    if episode.get("task_type") == CONVERSATION_TASK_TYPE:
        parts = [f"{episode.get('agent_id') or ''}: {episode.get('task_description') or ''}", learnings]
    else:
        parts = [episode.get("task_type") or "", episode.get("task_description") or "",
                 episode.get("input_summary") or "", episode.get("outcome") or "", learnings]
    return _cut("\n".join(p for p in parts if p).strip(), max_bytes)


def _cut(text: str, max_bytes: int | None) -> str:
    if max_bytes is not None and len(text) > max_bytes // 4:
        raw = text.encode("utf-8", "replace")  # a lone surrogate of a legacy record becomes "?"
        if len(raw) > max_bytes:
            text = raw[:max_bytes].decode("utf-8", "ignore")  # cut on a character boundary
    return text


def date_text(ts: float) -> str:
    """An episode's date as words and as an ISO day, for full-text search: "8 May 2023 2023-05-08"."""
    d = datetime.fromtimestamp(ts, timezone.utc)
    return f"{d.day} {_MONTHS[d.month - 1]} {d.year} {d.date().isoformat()}"


def index_text(episode: dict[str, Any], max_bytes: int | None = None) -> str:
    """The full-text (BM25) column: the searchable text, a conversation turn's context (the turn
    it answers, its input summary) and the episode's date, so a question that names the day
    ("on 8 May 2023") or words of the question a turn answers finds it. Cut like searchable_text."""
    parts = [searchable_text(episode, max_bytes)]
    if episode.get("task_type") == CONVERSATION_TASK_TYPE and episode.get("input_summary"):
        parts.append(episode["input_summary"])
    parts.append(date_text(float(episode["ts"])))
    return _cut("\n".join(parts), max_bytes)


# The columns of an index row but its vector, each made from an episode record: ``index_row`` makes
# one row of them, ``EpisodeRows.columns`` every row's column by column (one definition for both).
_ROW_COLUMNS: tuple[tuple[str, Callable[[dict[str, Any], int | None], Any]], ...] = (
    ("episode_id", lambda e, _m: e["id"]),
    ("tenant_id", lambda e, _m: e["tenant_id"]),
    ("agent_id", lambda e, _m: e["agent_id"]),
    ("agent_role", lambda e, _m: e.get("agent_role") or ""),
    ("task_type", lambda e, _m: e["task_type"]),
    ("outcome", lambda e, _m: e["outcome"]),
    ("success", lambda e, _m: bool(e["success"])),
    ("confidence", lambda e, _m: float(e["confidence_score"])),
    ("timestamp", lambda e, _m: float(e["ts"])),
    ("canvas_id", lambda e, _m: e.get("canvas_id")),
    ("canvas_action_ids", lambda e, _m: list(e.get("canvas_action_ids") or [])),
    ("text", index_text),
    ("metadata_terms", lambda e, _m: metadata_terms(e.get("metadata"))),
)


def index_row(episode: dict[str, Any], vector: Any, max_text_bytes: int | None = None) -> dict[str, Any]:
    """The index row (lance_record) (its text cut at ``max_text_bytes``, see searchable_text)."""
    row = {name: make(episode, max_text_bytes) for name, make in _ROW_COLUMNS}
    row["vector"] = vector
    return row


class EpisodeRows(Sequence[dict[str, Any]]):
    """The index rows of a batch of episode records, as ``index_row`` makes them one by one
    (indexing or iterating), or all at once column by column (``columns``): the episode index
    builds its Arrow table from the columns, without a dict per row (~8 ms of CPU per 1,000
    episodes less when recording; bench/README.md, "The recording process's own CPU per episode")."""

    def __init__(self, episodes: list[dict[str, Any]], vectors: Any, max_text_bytes: int | None = None) -> None:
        self.episodes = episodes
        self.vectors = vectors
        self.max_text_bytes = max_text_bytes

    def __len__(self) -> int:
        return min(len(self.episodes), len(self.vectors))

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return index_row(self.episodes[i], self.vectors[i], self.max_text_bytes)

    def columns(self) -> dict[str, list[Any]]:
        """Every column of ``index_row`` but the vector, each a list in the episodes' order (the
        vectors are ``self.vectors``)."""
        eps = self.episodes[:len(self)]
        max_text = self.max_text_bytes
        return {name: [make(e, max_text) for e in eps] for name, make in _ROW_COLUMNS}
