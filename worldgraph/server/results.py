"""The records the REST API answers with (the MCP tools answer with the same dicts): every field
declared, so the OpenAPI document, and from it the TypeScript client's types, name them all and a
misspelled field is a compile error, not an ``undefined`` at run time. Free-form JSON the caller
gave (a canvas, attributes, a stored record inside a neighbourhood) stays a JSON object.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Result(BaseModel):
    """A record the API answers with. Every field is declared, so the OpenAPI document and the
    TypeScript types list them all and a misspelled field fails to compile; a field the library
    returns that is not declared is dropped on the way out, and tests/unit/server/test_result_fields.py
    (which compares each answer's keys with these declarations) fails until it is declared."""

    model_config = ConfigDict(extra="ignore")


class EpisodeIds(BaseModel):
    episode_ids: list[str] = Field(description="The new episodes' ids, in the order given.")


class ScoreBreakdown(_Result):
    semantic_weighted: float = Field(description="text_relevance x semantic_weight.")
    text_relevance: float = Field(0.0, description="The relevance formula's first term, 0 to 1: the cosine "
                                  "(relevance_signal vector) or vector_part + bm25_part + speaker_part + question_part + "
                                  "answer_part + reply_part + neighbor_part + sentence_part (hybrid).")
    vector_part: float = Field(0.0, description="The cosine's share of text_relevance.")
    bm25_part: float = Field(0.0, description="The full-text (BM25) share of text_relevance, relative to the "
                             "query's best full-text hit.")
    speaker_part: float = Field(0.0, description="The speaker match: speaker_match_weight for a memory said by a "
                                "person the query names (when it names some of the speakers and not others).")
    question_part: float = Field(0.0, description="Minus question_weight x the share of a conversation turn's text "
                                 "that asks (0 or negative): a question tells little.")
    answer_part: float = Field(0.0, description="answer_weight x the question's share x the question's relevance, for "
                               "the turn that answers a question among the candidates (the next turn of its "
                               "session, said by another speaker).")
    reply_part: float = Field(0.0, description="(1 - hybrid_text_weight) x how much better a conversation turn "
                              "matches the query once reply_context x its reply's vector (the next turn of its "
                              "session, a candidate too) is mixed into its own.")
    neighbor_part: float = Field(0.0, description="The lift from the best session neighbour (neighbor_weight).")
    sentence_part: float = Field(0.0, description="The optional sentence stage (sentence_head > 0): sentence_weight "
                                 "x how much better a conversation turn's best sentence matches the query than "
                                 "the whole turn.")
    date_match: float = Field(0.0, description="The boost for falling inside the dates the query names.")
    recency_boost: float
    feedback_adjustment: float
    confidence_factor: float
    clamped: float
    feedback_aware: float
    diversity_penalty: float
    final: float = Field(description="The ranking value: clamped + feedback_aware - diversity_penalty; it can "
                                     "exceed 1 or drop below 0 (relevance_score is it clamped to [0, 1]).")
    vector_cosine: float | None = Field(None, description="The cosine vector_part used when it is not the whole "
                                        "query's: with the speakers' names taken out (speaker_free_vector).")
    subquery_cosine: float | None = Field(None, description="The best cosine with the query or one of the LLM's "
                                          "sub-queries (recall_llm_subqueries), when that step ran.")


class NeighborhoodOut(_Result):
    """What a recalled run is linked to (include_neighborhood): its canvas and actions, its feedback,
    the scenes it produced and the world nodes and rules learned from them, and the runs before and
    after it in its session. The records are the stored ones (JSON objects)."""

    canvas: dict[str, Any] | None = None
    canvas_actions: list[dict[str, Any]] = Field(default_factory=list)
    feedback: list[dict[str, Any]] = Field(default_factory=list)
    scenes: list[dict[str, Any]] = Field(default_factory=list)
    nodes: list[dict[str, Any]] = Field(default_factory=list)
    rules: list[dict[str, Any]] = Field(default_factory=list)
    previous: dict[str, Any] | None = Field(None, description="The run before it in its session, if any.")
    next: dict[str, Any] | None = Field(None, description="The run after it in its session, if any.")


class RecallResultOut(_Result):
    """One recalled run (the recall result fields, the semantic score and how the score was made)."""

    episode_id: str
    task_type: str
    task_description: str
    input_summary: str
    outcome: Literal["success", "failure"]
    learnings: list[str]
    confidence: float
    timestamp: str
    relevance_score: float = Field(description="The score, 0 to 1: score_breakdown.final (what results are ordered "
                                               "by) clamped to [0, 1].")
    semantic_score: float = Field(description="Cosine similarity of the query and the run.")
    canvas_id: str | None = None
    canvas_name: str | None = None
    canvas_actions: list[str] = Field(default_factory=list)
    feedback_score: float | None = Field(None, description="Normalised average feedback, 0 to 1; null if unrated.")
    feedback_count: int = 0
    session_id: str | None = Field(None, description="The chat, thread or run the episode belongs to.")
    agent_id: str
    agent_role: str
    success: bool
    approach_taken: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict, description="The caller's metadata, stored verbatim "
                                     "(what a metadata filter matches).")
    score_breakdown: ScoreBreakdown | None = None
    canvas_snapshot: dict[str, Any] | None = Field(None, description="The canvas as the run left it "
                                                   "(include_canvas_context).")
    canvas_action_details: list[dict[str, Any]] | None = Field(None, description="The run's canvas actions, "
                                                               "each whole (include_canvas_context).")
    neighborhood: NeighborhoodOut | None = Field(None, description="What the run is linked to "
                                                 "(include_neighborhood).")


class RecallResponse(BaseModel):
    results: list[RecallResultOut]


class FeedbackOut(_Result):
    """The stored rating, and the episode's ratings after it."""

    id: str
    tenant_id: str
    episode_id: str
    feedback_score: float
    feedback_notes: str | None = None
    feedback_category: str | None = None
    created_by: str
    created_at: str
    average: float = Field(description="The episode's normalised average feedback, 0 to 1.")
    mean_score: float = Field(description="The episode's mean raw score, -1 to 1.")
    count: int = Field(description="How many ratings the episode has.")


class EpisodeOut(_Result):
    """A stored run: every AgentExperience field plus id, timestamp, canvas details and its state in
    the index."""

    id: str
    episode_id: str = Field(description="The same as id.")
    tenant_id: str
    agent_id: str
    agent_role: str
    session_id: str | None = None
    task_type: str
    task_description: str
    input_summary: str = ""
    context_from: str | None = Field(None, description="A conversation turn: the episode its input_summary quotes "
                                                       "(the turn before it; derived again when that is forgotten).")
    approach_taken: str | None = None
    actions_taken: list[str] = Field(default_factory=list)
    outcome: Literal["success", "failure"]
    success: bool
    error_message: str | None = None
    confidence_score: float
    learnings: list[str]
    human_intervention_required: bool = False
    constitutional_violations: list[str] = Field(default_factory=list)
    maturity_level: str | None = None
    reasoning_chain: dict[str, Any] | None = None
    metacognitive_insights: dict[str, Any] | None = None
    canvas_id: str | None = None
    canvas_name: str | None = None
    canvas_snapshot: dict[str, Any] | None = None
    canvas_action_ids: list[str] = Field(default_factory=list)
    timestamp: str
    ts: float | None = Field(None, description="The timestamp in seconds since the epoch (the store's order).")
    index_status: str | None = Field(None, description="pending, indexed or failed: whether recall finds it yet.")
    index_error: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict, description="The caller's metadata, stored verbatim "
                                     "(what a metadata filter matches).")


class EpisodesResponse(BaseModel):
    episodes: list[EpisodeOut] = Field(description="Newest first.")


class Readiness(_Result):
    """The graduation exam over the agent's last `window` runs."""

    tenant_id: str
    agent_id: str
    window: int
    episodes: int
    zero_intervention_ratio: float
    constitutional_compliance: float
    mean_confidence: float
    success_rate: float
    score: float
    ready: bool = Field(description="True when every check reaches its threshold.")
    failing: list[str] = Field(description="The checks below their threshold.")
    thresholds: dict[str, int | float]


class ScenePacket(_Result):
    """A flagged round, stored as "pending" before any LLM call; the server's background worker
    extracts a delta from it and merges it (status then "merged", or "failed" with the error)."""

    id: str
    tenant_id: str
    status: str
    error: str | None = Field(None, description="Why the packet is pending or failed (the LLM named by its host).")
    env_name: str
    current_round: int
    trigger_reason: str | None = None
    episode_id: str | None = None
    created_at: str
    updated_at: str | None = None
    action: str = ""
    before_observation: str = ""
    after_observation: str = ""
    feedback: str = ""
    admissible_commands: list[str] = Field(default_factory=list)
    latest_response: str = ""
    recent_history_excerpt: str = ""
    history_episode_ids: list[str] | None = Field(None, description="The rounds the history excerpt quotes, "
                                                                    "a line each (a forgotten one's line goes).")


LLM_CONFIGURED_DOC = ("Whether the server has an LLM to extract graph updates with (OPENAI_API_KEY or "
                      "OPENAI_BASE_URL in its environment). Without one, scene packets stay pending.")
NOTE_DOC = "What happens to the pending packets next, and what to do when nothing will (e.g. no LLM configured)."


class RoundResponse(BaseModel):
    packet: ScenePacket | None = Field(description="The scene packet when the round carried "
                                                   "FLAG_CURIOSITY: yes, else null.")
    llm_configured: bool = Field(description=LLM_CONFIGURED_DOC)
    note: str | None = Field(None, description=NOTE_DOC + " Null when the round stored no packet.")


class DroppedItemOut(_Result):
    kind: str
    index: int
    reason: str
    item: Any = None


class MergeReportOut(_Result):
    """What one merge did, and why anything is missing."""

    tenant_id: str
    env_name: str
    scene_id: str | None = None
    ok: bool
    error: str | None = None
    graph_version: int | None = None
    created: dict[str, list[str]] = Field(description="Ids of new nodes, edges and rules.")
    merged: dict[str, list[str]] = Field(description="Ids of existing ones confirmed again (more evidence).")
    closed: dict[str, list[str]] = Field(description="Ids of ones a newer fact closed (valid_to set).")
    reopened: dict[str, list[str]] = Field(default_factory=dict)
    dropped: list[DroppedItemOut] = Field(description="Items left out, each with its reason.")
    notes: list[DroppedItemOut] = Field(default_factory=list)
    skipped: str | None = None


class RetryResponse(BaseModel):
    reports: list[MergeReportOut] = Field(description="One merge report per packet retried (ok false: not merged, "
                                                      "with the error; the packet stays pending or failed).")
    llm_configured: bool = Field(description=LLM_CONFIGURED_DOC)
    note: str | None = Field(None, description=NOTE_DOC)


class ImportResult(_Result):
    tenant_id: str
    env_name: str
    counts: dict[str, int] = Field(description="How many nodes, edges, rules and scenes were loaded.")


class WorldGraphOut(_Result):
    """One environment's graph; each list sorted by id. Closed facts have valid_to set."""

    nodes: list[dict[str, Any]] = Field(description="Entities and states: id, kind, type, name, attributes, "
                                                    "confidence, evidence, source_scenes, valid_from, valid_to.")
    edges: list[dict[str, Any]] = Field(description="id, relation (transition | containment | episodic | fact), "
                                                    "src_id, dst_id, action, confidence, valid_from, valid_to; a "
                                                    "fact also predicate and single_valued.")
    rules: list[dict[str, Any]] = Field(description="id, condition, outcome, linked_node_ids, confidence.")
    scenes: list[dict[str, Any]] = Field(description="The scene packets of the environment with their status.")
    meta: dict[str, Any] | None = Field(description="graph_version, updated_at, counts; null for a new environment.")


_COUNT = "How many of them it removed (or rewrote); only the kinds this forget touches are present."


class ForgetCountsOut(_Result):
    """What a forget removed or rewrote, per kind (docs/forget.md). An episode, agent or session
    forget counts episodes to canvases and index_rows; an environment's, its graph and scenes; a
    tenant's, everything of the tenant."""

    episodes: int | None = Field(None, description=_COUNT)
    feedback: int | None = Field(None, description=_COUNT)
    canvas_audits: int | None = Field(None, description="Canvas actions. " + _COUNT)
    scenes: int | None = Field(None, description="Scene packets. " + _COUNT)
    world_records_updated: int | None = Field(None, description="World records that lost a forgotten scene "
                                                                "from their sources (and its evidence).")
    scenes_rederived: int | None = Field(None, description="Scenes whose history excerpt lost a forgotten round.")
    turn_contexts_rederived: int | None = Field(None, description="Turns that quoted a forgotten turn, "
                                                                  "derived again (and re-indexed).")
    canvases_rederived: int | None = Field(None, description="Canvas records derived again from a live episode.")
    canvases: int | None = Field(None, description="Canvas records deleted. " + _COUNT)
    index_rows: int | None = Field(None, description="Index rows deleted now (else by the next purge).")
    nodes: int | None = Field(None, description=_COUNT)
    edges: int | None = Field(None, description=_COUNT)
    rules: int | None = Field(None, description=_COUNT)
    scene_reports: int | None = Field(None, description="Merge reports (embedded store). " + _COUNT)
    agents: int | None = Field(None, description=_COUNT)
    api_keys: int | None = Field(None, description=_COUNT)


class ForgetReportOut(_Result):
    kind: Literal["episode", "agent", "session", "environment", "tenant"]
    tenant_id: str
    target_id: str = Field(description="The id named: episode id, agent id, session id, environment name, tenant")
    audit_id: str = Field(description="The audit row: who forgot which id and when, never the content")
    forgotten_at: str
    forgotten_by: str | None = Field(description="Who forgot: the API key's name (`key <id>` for an unnamed key)")
    removed: ForgetCountsOut = Field(description="Records removed (or rewritten), per kind")
    purge_due_by: str | None = Field(description="The background purge removes the bytes from the files by then")


class NeighbourOut(_Result):
    """A current fact one hop around a hit: its id and its sentence."""

    id: str
    text: str


class WorldHitOut(_Result):
    """One record of a world graph that search_world found."""

    kind: Literal["entity", "state", "fact", "rule"] = Field(description="entity, state, fact (an edge, as a "
                                                                         "sentence) or rule.")
    id: str = Field(description="The record's id (a fact's is its edge id): look it up in the environment's graph.")
    env_name: str
    text: str = Field(description="The record as a sentence, e.g. 'the brass key is in the kitchen table'.")
    current: bool = Field(description="Whether it holds now, read from the store when the search ran (a fact a "
                                      "merge closed is not current from that moment).")
    valid_from: str | None = Field(description="Since when it holds.")
    valid_to: str | None = Field(description="When it stopped holding; null while current.")
    confidence: float = Field(description="0 to 1.")
    evidence: list[str] = Field(description="The text it was learned from.")
    source_scenes: list[str] = Field(description="The scenes (rounds) it was learned in.")
    neighbourhood: list[NeighbourOut] = Field(description="At most 10 current facts one hop around it.")
    score: float = Field(description="What the hits are ranked by (current ones first unless as_of asks for the "
                                     "past).")


class WorldSearchResponse(BaseModel):
    hits: list[WorldHitOut] = Field(description="Best first, at most k.")


class CitationOut(_Result):
    """A record the context block cites (its lines cite the id's start)."""

    id: str = Field(description="The whole id.")
    kind: str = Field(description="episode, entity, state, fact or rule.")


class ContextOut(_Result):
    """One prompt-ready block: the relevant current facts and rules first, then the most relevant
    past episodes, within max_tokens; every line cites its record's id."""

    text: str = Field(description="The block, ready to put in a prompt.")
    citations: list[CitationOut] = Field(description="The records the lines cite, whole ids.")
    tokens: int = Field(description="The block's size in tokens (the embedder's WordPiece tokenizer); at most "
                                    "max_tokens.")
