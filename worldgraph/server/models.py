"""Pydantic models of the REST API and the MCP tools: one declaration gives validation, the
OpenAPI document (and so the TypeScript types) and the MCP tool schemas.

Inputs reuse the library's own models (``AgentExperience``, ``CanvasContext``, ``RecallOptions``,
``AgentRound``), subclassed under the same names only to add field descriptions to their JSON
Schema: validation is exactly the library's, and an instance is still the library's model to
the facade. The records it answers with are in results.py, every field declared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag
from pydantic.json_schema import SkipJsonSchema

from worldgraph.config import SEED_MIN_SIMILARITY, WorldGraphConfig
from worldgraph.memory import conversation
from worldgraph.memory import models as lib
from worldgraph.world import curiosity


def _described(docs: dict[str, str]) -> Callable[[dict[str, Any]], None]:
    """A ``json_schema_extra`` hook that adds descriptions to the properties of a schema."""
    def extra(schema: dict[str, Any]) -> None:
        for name, prop in schema.get("properties", {}).items():
            if name in docs:
                prop.setdefault("description", docs[name])
    return extra


EXPERIENCE_DOCS = {
    "episode_id": "Leave out to get a new id; give one only to import a run recorded elsewhere.",
    "agent_id": "The agent that ran, e.g. fin-agent-1.",
    "agent_role": "Its role, e.g. Finance; recall can filter on it.",
    "task_type": "Kind of task, e.g. reconciliation.",
    "task_description": "What the agent was asked to do (the main text recall matches).",
    "input_summary": "The input it worked from (cut to 500 characters).",
    "reasoning_chain": "Its reasoning: {steps: [{step, thought}], conclusion}, or a string, or a list of steps.",
    "approach_taken": "How it went about it.",
    "actions_taken": "The actions it took, in order.",
    "outcome": "success or failure.",
    "success": "Derived from outcome when left out; must agree with it.",
    "error_message": "What went wrong, for a failure.",
    "confidence_score": f"The agent's confidence in its result, 0 to 1 (default "
                        f"{lib.AgentExperience.model_fields['confidence_score'].default}).",
    "constitutional_violations": "Rules it broke (readiness counts runs with none).",
    "human_intervention_required": "Whether a human had to step in.",
    "learnings": "What to remember for next time (recall matches these too).",
    "metacognitive_insights": "{what_worked, what_failed, uncertainty}.",
    "timestamp": "When it ran (ISO 8601); default now. Recent runs rank higher.",
    "maturity_level": "student, intern, supervised or autonomous.",
    "canvas_id": "The canvas it worked on, when no canvas context is given.",
    "canvas_action_ids": "Ids of canvas actions taken during the run.",
}
CANVAS_DOCS = {
    "id": "Canvas id, e.g. canvas-456.",
    "name": "Display name.",
    "components": "The canvas components (free-form objects).",
    "state": "The canvas state (free-form object).",
    "actions": "Actions taken on it during the run: [{id, type, component_id, timestamp, details}].",
}
# The defaults a description states are read from the config class itself (its field defaults,
# through the property recall uses), never written out again: a description cannot drift.
_DEFAULTS = WorldGraphConfig.model_construct()  # field defaults, without the environment
DEFAULT_MIN_SIMILARITY = _DEFAULTS.min_similarity
MIN_SIMILARITY_DOC = (f"Minimum semantic (cosine) similarity, -1 to 1. Default: the server's min_similarity_threshold, "
                      f"{DEFAULT_MIN_SIMILARITY} unless the server sets it (relevance_signal "
                      f"{_DEFAULTS.relevance_signal!r}; {SEED_MIN_SIMILARITY} with 'vector'); while that is unset, "
                      f"{_DEFAULTS.speaker_min_similarity} for a query that names some of the memories' speakers and "
                      f"not others (speaker_min_similarity).")

RECALL_OPTION_DOCS = {
    "limit": "How many results (overrides the request's limit).",
    "min_similarity": MIN_SIMILARITY_DOC,
    "agent_role": "Only episodes of this role.",
    "agent_id": "Only episodes of this agent.",
    "canvas_ids": "Only episodes on these canvases.",
    "date_range": "Only episodes in {start, end} (ISO 8601).",
    "success_only": "Only successful runs.",
    "min_feedback_score": "Only episodes whose normalised average feedback is at least this (0 to 1); "
                          "unrated ones are left out, and highly / poorly rated ones get a boost / penalty.",
    "feedback_category": "Count only feedback of this category (e.g. accuracy).",
    "include_canvas_context": "Add each episode's canvas snapshot and actions.",
    "include_neighborhood": "Add each episode's canvas, feedback, scenes and the world nodes and rules learned from it.",
    "hybrid": f"Add BM25 full-text hits to the vector candidates (default "
              f"{str(lib.RecallOptions.model_fields['hybrid'].default).lower()}).",
    "extract_filters": "Turn references in the query (canvas-123, agent:bob, dates, 'last week') into filters.",
}
ROUND_DOCS = {
    "round": "The round number (0 or more); merges of one environment are ordered by it.",
    "action": "The action the agent took this round, e.g. take brass key.",
    "before_observation": "What the agent saw before acting.",
    "after_observation": "What it saw after.",
    "feedback": "The environment's feedback (reward text, error).",
    "admissible_commands": "The actions that were available.",
    "response": "The agent's full output. Ending with the lines 'FLAG_CURIOSITY: yes' and "
                "'CURIOSITY_REASON: ...' asks for a world-graph update from this round.",
}


class AgentExperience(lib.AgentExperience):
    """One agent run (every field of AgentExperience, docs/architecture.md "Glossary")."""

    model_config = ConfigDict(json_schema_extra=_described(EXPERIENCE_DOCS))
    # The key (or the MCP server's --tenant) names the tenant, so the schemas do not offer the
    # field; a body that still carries another tenant's id is refused by the facade (422).
    tenant_id: SkipJsonSchema[str | None] = None


class CanvasContext(lib.CanvasContext):
    """The workspace an agent acted on during a run."""

    model_config = ConfigDict(json_schema_extra=_described(CANVAS_DOCS))


class RecallOptions(lib.RecallOptions):
    """Recall filters and switches; a field left out takes the server's default."""

    model_config = ConfigDict(json_schema_extra=_described(RECALL_OPTION_DOCS))


class AgentRound(curiosity.AgentRound):
    """One round of an agent in an environment; missing optional fields are empty."""

    model_config = ConfigDict(json_schema_extra=_described(ROUND_DOCS))
    agent_id: str | None = Field(None, description="The agent, for the episode recorded for this round.")


class ConversationTurn(conversation.ConversationTurn):
    """One turn of a transcript: who spoke, what was said, when. Other fields of an
    AgentExperience (e.g. outcome, learnings) may be given too."""


# ---------------------------------------------------------------------------- requests
class ExperienceBatch(BaseModel):
    """Several runs at once: all are validated first (one bad item rejects the batch), then
    stored in one transaction."""

    model_config = ConfigDict(extra="forbid")
    experiences: list[AgentExperience] = Field(min_length=1, description="The runs to record.")
    canvases: list[CanvasContext | None] | None = Field(
        None, description="Optional: the canvas of each run (same length as experiences; null for none).")


def _experience_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "batch" if "experiences" in value else "experience"
    return "batch" if isinstance(value, ExperienceBatch) else "experience"


# POST /v1/experiences takes one experience or a batch. The tag of the failing branch leads the
# location of a validation error; errors.field_path shows "experience.outcome" for the first
# and "experiences[0].outcome" for the second, the Python API's own field names.
ExperiencesBody = Annotated[
    Annotated[ExperienceBatch, Tag("batch")] | Annotated[AgentExperience, Tag("experience")],
    Discriminator(_experience_kind),
]
UNION_TAGS = frozenset({"batch"})  # tags that are not part of the field path


class RecallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, description="What you are about to do, in plain words; recall finds "
                                                 "past runs like it.")
    agent_role: str | None = Field(None, description="Only runs of agents with this role (e.g. Finance); "
                                                     "null for every role.")
    limit: int = Field(5, gt=0, le=1000, description="How many results at most.")
    options: RecallOptions | None = Field(None, description="Filters and switches (RecallOptions).")


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    score: float = Field(ge=-1.0, le=1.0, description="-1 harmful, 0 neutral, 1 excellent.")
    notes: str | None = Field(None, description="Why.")
    category: str | None = Field(None, description="e.g. accuracy, helpfulness, safety.")
    created_by: str | None = Field(None, description="Who rated it (default: the API key's name; anonymous for an unnamed key).")


class ConversationRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_id: str = Field(description="The chat, thread or run the turns belong to; recall can follow a "
                                         "session's neighbours.")
    turns: list[ConversationTurn] = Field(description="The turns in order: one episode per turn (speaker -> "
                                                      "agent_id, text -> task_description, the turn before -> "
                                                      "input_summary). All are checked before any is recorded.")


class Snapshot(BaseModel):
    """An environment's world graph as its canonical snapshot: the records of the snapshot folder's
    nodes.jsonl, edges.jsonl, rules.jsonl, scenes.jsonl and meta.json (see `worldgraph export`)."""

    model_config = ConfigDict(extra="forbid")
    meta: dict[str, Any] | None = Field(None, description="graph_version, updated_at, app_name, counts, ... "
                                                          "(counts are recomputed; env_name is the path's).")
    nodes: list[dict[str, Any]] = Field(default_factory=list, description="Entities and states (id, kind, type, "
                                                                          "name required).")
    edges: list[dict[str, Any]] = Field(default_factory=list, description="id, relation, src_id, dst_id required.")
    rules: list[dict[str, Any]] = Field(default_factory=list, description="id, condition, outcome required.")
    scenes: list[dict[str, Any]] = Field(default_factory=list, description="Scene packets (id required).")


class SnapshotOut(Snapshot):
    """An exported snapshot: every list is present (each sorted by id, every contract key filled)."""

    meta: dict[str, Any] | None = Field(description="graph_version, updated_at, app_name, env_name, counts, ...")
    nodes: list[dict[str, Any]] = Field(description="Entities and states.")
    edges: list[dict[str, Any]] = Field(description="Containment, transition and episodic edges.")
    rules: list[dict[str, Any]] = Field(description="If-then rules.")
    scenes: list[dict[str, Any]] = Field(description="Scene packets with their status.")


class CypherRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, description="Read-only Cypher in which every labelled node it starts from is "
                                                 "scoped with {tenant_id: $tenant_id} ($tenant_id is bound for you), "
                                                 "e.g. MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.id LIMIT 5.")
    params: dict[str, Any] | None = Field(None, description="More query parameters (tenant_id is not allowed).")


class WorldSearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, description="What to look for, in words (e.g. where is the brass key?).")
    env_name: str | None = Field(None, description="One environment; null for every environment of the tenant.")
    k: int = Field(10, ge=1, le=100, description="How many hits at most, best first.")
    as_of: str | None = Field(None, description="A past moment (ISO 8601, e.g. 2026-12-05T08:00:00Z): the "
                                                "records valid then rank first. Null: now.")


class ContextRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, description="What the agent is about to do or asks, in words.")
    agent_role: str | None = Field(None, description="Only past episodes of agents with this role (e.g. Finance); "
                                                     "null for every role.")
    env_name: str | None = Field(None, description="Facts and rules of this environment only; null for every "
                                                   "environment of the tenant.")
    max_tokens: int = Field(1500, ge=1, le=100_000, description="The block's budget in tokens (the embedder's "
                                                                 "WordPiece tokenizer).")


GraphDelta = Annotated[dict[str, Any], Field(
    description="A graph delta: {entities, states, edges, rules}, each an array of objects (see "
                "worldgraph/prompts/graph_delta.schema.json). A delta that is not an object with those four "
                "arrays is refused whole (422); inside it, each item is checked on its own and a bad one is "
                "dropped and listed in the report's `dropped` with the reason.",
    examples=[{"entities": [{"ref": "e1", "name": "brass key", "type": "item"},
                            {"ref": "e2", "name": "kitchen table", "type": "furniture"}],
               "states": [], "edges": [{"relation": "containment", "src_ref": "e2", "dst_ref": "e1"}],
               "rules": [{"condition": "the front door is locked", "outcome": "going outside fails"}]}])]


# ---------------------------------------------------------------------------- responses
class CypherResponse(BaseModel):
    rows: list[dict[str, Any]]


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    graph_store: str
    cypher_sandbox: str = Field(description="How Cypher is confined: landlock, unsandboxed (and whether API keys "
                                            "may use it) or neo4j-plan (docs/cypher.md)")


class ErrorBody(BaseModel):
    type: str = Field(description="e.g. unauthorized, not_found, payload_too_large, invalid_input.")
    message: str = Field(description="What is wrong and how to fix it.")
    field: str | None = Field(None, description="The field at fault (e.g. experience.outcome), when there is one.")
    request_id: str | None = Field(None, description="The request's id (also its X-Request-ID header and the "
                                                     "prefix of its server log lines).")


class ErrorResponse(BaseModel):
    error: ErrorBody
