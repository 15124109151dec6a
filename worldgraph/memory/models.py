"""Pydantic models at the API boundary: experiences, feedback, canvases, recall options.

Field names follow the interfaces of the original specification (docs/architecture.md). Its "Record Experience" step
reads a few fields under shorter names (``approach``, ``actions``, ``confidence``, ``error``,
``violations``, ``intervention``, ``metacognitive``, ``input``); those are accepted as aliases.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationInfo,
    field_validator,
    model_validator,
)

from worldgraph.clock import to_utc as to_utc
from worldgraph.clock import utcnow as utcnow
from worldgraph.errors import InvalidInputError
from worldgraph.memory.metadata import check_metadata, parse_filter

MaturityLevel = Literal["student", "intern", "supervised", "autonomous"]
TURN_TASK_TYPE = "conversation"  # the task type of a conversation turn (memory/conversation.py)


def _metadata_value(value: Any) -> dict[str, Any]:
    try:
        return check_metadata(value, "metadata")
    except InvalidInputError as exc:
        raise ValueError(f"{exc.field}: {exc.rule}") from None


def _filter_value(value: Any) -> dict[str, Any] | None:
    try:
        parse_filter(value, "metadata")
    except InvalidInputError as exc:
        raise ValueError(f"{exc.field}: {exc.rule}") from None
    return value if value else None


# A JSON object kept verbatim (no whitespace stripped from its keys or strings: memory/metadata.py).
Metadata = Annotated[dict[str, Any], PlainValidator(_metadata_value, json_schema_input_type=dict[str, Any])]
MetadataFilterSpec = Annotated[dict[str, Any] | None,
                               PlainValidator(_filter_value, json_schema_input_type=dict[str, Any] | None)]


class ReasoningStep(BaseModel):
    model_config = ConfigDict(extra="allow")
    step: str = ""
    thought: str = ""


class ReasoningChain(BaseModel):
    """A reasoning chain: ordered steps plus free-form extras (the specification leaves its shape open)."""

    model_config = ConfigDict(extra="allow")
    steps: list[ReasoningStep] = Field(default_factory=list)
    conclusion: str = ""


class MetacognitiveInsights(BaseModel):
    """What the agent says about its own run: what worked, what failed, what it is unsure of."""

    model_config = ConfigDict(extra="allow")
    what_worked: list[str] = Field(default_factory=list)
    what_failed: list[str] = Field(default_factory=list)
    uncertainty: str = ""


class CanvasAction(BaseModel):
    """One action taken on a canvas during an execution."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    id: str = Field(min_length=1)
    type: str = Field(min_length=1, validation_alias=AliasChoices("type", "action_type"))
    component_id: str | None = None
    timestamp: datetime = Field(default_factory=utcnow)
    details: dict[str, Any] = Field(default_factory=dict)

    @field_validator("timestamp")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        return to_utc(v)


class CanvasContext(BaseModel):
    """The workspace an agent acted on; ``serialize()`` is its canvas_snapshot."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    id: str = Field(min_length=1)
    name: str = ""
    components: list[dict[str, Any]] = Field(default_factory=list)
    state: dict[str, Any] = Field(default_factory=dict)
    actions: list[CanvasAction] = Field(
        default_factory=list, validation_alias=AliasChoices("actions", "actions_during_execution")
    )

    def serialize(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class AgentExperience(BaseModel):
    """Every field of the AgentExperience interface."""

    # allow_inf_nan=False: a NaN confidence is "not a finite number", not "should be <= 1"
    model_config = ConfigDict(extra="forbid", populate_by_name=True, str_strip_whitespace=True, allow_inf_nan=False)

    # Identity
    episode_id: str | None = None
    tenant_id: str | None = None
    agent_id: str = Field(min_length=1)
    agent_role: str = ""

    # Task
    task_type: str = Field(min_length=1)
    # empty only for a conversation turn (a tool call says nothing): _described below
    task_description: str
    input_summary: str = Field("", validation_alias=AliasChoices("input_summary", "input"))

    # Execution
    reasoning_chain: ReasoningChain = Field(default_factory=ReasoningChain)
    approach_taken: str = Field("", validation_alias=AliasChoices("approach_taken", "approach"))
    actions_taken: list[str] = Field(default_factory=list, validation_alias=AliasChoices("actions_taken", "actions"))

    # Outcome
    outcome: Literal["success", "failure"]
    success: bool | None = None  # derived from outcome when not given
    error_message: str | None = Field(None, validation_alias=AliasChoices("error_message", "error"))

    # Learning
    confidence_score: float = Field(0.5, ge=0.0, le=1.0, validation_alias=AliasChoices("confidence_score", "confidence"))
    constitutional_violations: list[str] = Field(
        default_factory=list, validation_alias=AliasChoices("constitutional_violations", "violations")
    )
    human_intervention_required: bool = Field(
        False, validation_alias=AliasChoices("human_intervention_required", "intervention")
    )
    learnings: list[str] = Field(default_factory=list)
    metacognitive_insights: MetacognitiveInsights = Field(
        default_factory=MetacognitiveInsights, validation_alias=AliasChoices("metacognitive_insights", "metacognitive")
    )

    # Metadata
    timestamp: datetime | None = None  # kept when given (backfills, imports); else now
    maturity_level: MaturityLevel = "student"
    # The chat, thread or run this episode belongs to: episodes of one session are linked in
    # time order (NEXT), and recall reads a memory together with its neighbours.
    session_id: str | None = Field(None, description="chat, thread or run id (1-200 printable characters)")

    # Canvas context
    canvas_id: str | None = None
    canvas_action_ids: list[str] = Field(default_factory=list)

    # The caller's own fields, stored verbatim and returned with the episode; recall and
    # list_episodes filter by them (RecallOptions.metadata, memory/metadata.py)
    metadata: Metadata = Field(default_factory=dict, description="a JSON object stored verbatim with the "
                               "episode; recall and listing filter by its fields")

    @field_validator("task_description")
    @classmethod
    def _described(cls, v: str, info: ValidationInfo) -> str:
        if not v and info.data.get("task_type") != TURN_TASK_TYPE:
            raise ValueError("must not be empty (only a conversation turn's text may be: a tool call says nothing)")
        return v

    @field_validator("learnings", "actions_taken", "constitutional_violations", mode="before")
    @classmethod
    def _one_string_is_a_list(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("reasoning_chain", mode="before")
    @classmethod
    def _chain(cls, v: Any) -> Any:
        if v is None:
            return {}
        if isinstance(v, str):
            return {"conclusion": v}
        if isinstance(v, list):
            return {"steps": [s if isinstance(s, dict) else {"thought": str(s)} for s in v]}
        return v

    @field_validator("metacognitive_insights", mode="before")
    @classmethod
    def _meta(cls, v: Any) -> Any:
        return {} if v is None else v

    @field_validator("timestamp")
    @classmethod
    def _ts_utc(cls, v: datetime | None) -> datetime | None:
        return None if v is None else to_utc(v)

    @field_validator("session_id")
    @classmethod
    def _short_id(cls, v: str | None) -> str | None:
        return None if v is None else check_session_id(v)

    @model_validator(mode="after")
    def _outcome_matches_success(self) -> AgentExperience:
        if self.success is None:
            self.success = self.outcome == "success"
        elif self.success != (self.outcome == "success"):
            raise ValueError(
                f"success={self.success} contradicts outcome={self.outcome!r}: "
                "success must be true exactly when outcome is 'success'"
            )
        return self


SESSION_ID_MAX = 200


def check_session_id(value: object) -> str:
    """A session id is a short printable string: it names a chat, thread or run, not content."""
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {type(value).__name__}")
    if not value.strip() or len(value) > SESSION_ID_MAX or not value.isprintable():
        raise ValueError(f"must be 1-{SESSION_ID_MAX} printable characters (an id such as 'chat-42'), "
                         f"got {len(value)} characters")
    return value


class EpisodeFeedback(BaseModel):
    """A human rating of one episode (RLHF). Scores are in [-1, 1]."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    id: str
    episode_id: str = Field(min_length=1)
    tenant_id: str = Field(min_length=1)
    feedback_score: float = Field(ge=-1.0, le=1.0)
    feedback_notes: str | None = None
    feedback_category: str | None = None  # accuracy, helpfulness, safety, ...
    created_by: str = "anonymous"
    created_at: str


class CanvasAudit(BaseModel):
    """One canvas action, linked to the episode during which it happened."""

    model_config = ConfigDict(extra="forbid")
    id: str
    tenant_id: str
    canvas_id: str
    action_id: str
    action_type: str
    component_id: str | None = None
    agent_id: str
    episode_id: str
    timestamp: str
    details: dict[str, Any] = Field(default_factory=dict)


class DateRange(BaseModel):
    """A recall filter on the episode's time: from ``start`` to ``end``, both inclusive; either may be open."""

    model_config = ConfigDict(extra="forbid")
    start: datetime | None = None
    end: datetime | None = None

    @field_validator("start", "end")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        return None if v is None else to_utc(v)

    @model_validator(mode="after")
    def _ordered(self) -> DateRange:
        if self.start is None and self.end is None:
            raise ValueError("give start, end or both (ISO-8601 dates)")
        if self.start and self.end and self.start > self.end:
            raise ValueError(f"start {self.start.isoformat()} is after end {self.end.isoformat()}")
        return self


class RecallOptions(BaseModel):
    """Every field of RecallOptions. ``None`` means "the config's default"."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # Search parameters
    limit: int | None = Field(None, gt=0, le=1000)
    min_similarity: float | None = Field(None, ge=-1.0, le=1.0)

    # Filters
    agent_role: str | None = None
    agent_id: str | None = None
    canvas_ids: list[str] | None = None
    date_range: DateRange | None = None
    success_only: bool = False
    metadata: MetadataFilterSpec = Field(None, description="conditions on the episodes' metadata fields "
                                         "({field: value} or {field: {'$gt': 3}})")
    session_id: str | None = Field(None, min_length=1, description="only the episodes of this session "
                                   "(the session_id they were recorded with)")

    # Feedback (thresholds on the normalised average feedback in [0, 1])
    min_feedback_score: float | None = Field(None, ge=0.0, le=1.0)
    feedback_category: str | None = None

    # Context
    include_canvas_context: bool = False
    include_neighborhood: bool = False

    # Search mode: vector candidates plus BM25 full-text hits
    hybrid: bool = True
    # Turn the query's own references (canvas-123, agent:bob) into filters; its dates and
    # relative phrases ("last week", "in May 2023") into a soft date signal
    extract_filters: bool = True
    # What relative phrases in the query ("yesterday", "last week") are read against. Unset: now,
    # or the newest memory found when every memory found is older than the phrase's window.
    now: datetime | None = Field(None, description="reference time for relative dates in the query (ISO-8601)")

    @field_validator("now")
    @classmethod
    def _now_utc(cls, v: datetime | None) -> datetime | None:
        return None if v is None else to_utc(v)
