"""The settings of ``worldgraph.memory``: how episodes are embedded and recorded, how recall
finds and ranks them (the candidates, the relevance formula's weights, the feedback-aware boosts,
diversity) and the readiness exam. Parts of ``WorldGraphConfig`` (settings.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

SEED_MIN_SIMILARITY = 0.6
HYBRID_MIN_SIMILARITY = 0.3


class EmbeddingSettings(BaseModel):
    """Embedding and recording episodes."""

    # Embedding (the original defaults)
    embedding_model: str = "text-embedding-3-small"
    embedding_dimensions: int = Field(1536, gt=0)
    # auto: the best installed local model (a folder keeps the model that built its index), else
    # the hashing fallback; local: the same without the fallback
    embedding_provider: Literal["auto", "openai", "local", "hashing"] = "auto"
    embedding_local_model: str = "auto"  # or a key of worldgraph.memory.embeddings.LOCAL_MODELS
    embedding_threads: int = Field(0, ge=0)  # local batches embedded side by side; 0 = one per core
    # concurrent record calls (server threads, the CLI's sessions) share embedding batches
    # (memory/embedders/coalesce.py): a call waits up to this long for others while a batch runs ...
    embedding_coalesce_ms: float = Field(2.0, ge=0.0, le=1000.0)
    embedding_coalesce_max: int = Field(256, gt=0)  # ... and a shared batch holds at most this many texts
    embedding_coalesce: bool = True  # False: each call embeds alone (the behaviour before coalescing)
    # concurrent record calls of a tenant that arrive while one is being stored are stored together:
    # one store transaction and one index append per group (memory/group_commit.py); False: each
    # call commits alone
    record_group_commit: bool = True


class RecallSettings(BaseModel):
    """Recall: candidates, the relevance formula (docs/architecture.md "Recall"), feedback, diversity."""

    # Recall (the original defaults)
    default_recall_limit: int = Field(5, gt=0)
    # The floor on the cosine similarity (semantic_score). Unset: the original 0.6 with
    # relevance_signal="vector" (the cosine is the only evidence); 0.3 with "hybrid", where the
    # words vouch too and the floor only drops memories whose meaning is plainly unrelated.
    min_similarity_threshold: float | None = Field(None, ge=-1.0, le=1.0)
    candidate_pool: int = Field(100, gt=0)  # "top 100 candidates by semantic similarity"
    fulltext_pool: int = Field(50, ge=0)  # extra BM25 hits merged into the candidates (hybrid)
    # In a table searched through its mirror, a query word held by more than fulltext_common_share
    # of the rows (estimated from a sample; 0: none) or more than fulltext_common_rows rows (0: no
    # count) is common. A query of rare and common words whose common words hold more than
    # fulltext_common_budget rows together finds the rows holding a rare word, each scored by every
    # word (Lucene's common-terms query, memory/index/common_terms.py); any other query is searched
    # whole. Where common words' top hits tie, a whole search reads their lists to the end (~23-48
    # ms a query at 10M rows of the bench's corpus; led by the rare words 2-3 ms); bench/README.md
    # "Common words at 10M: the rare words lead".
    fulltext_common_share: float = Field(0.01, ge=0, le=1)
    fulltext_common_rows: int = Field(0, ge=0)
    fulltext_common_budget: int = Field(300_000, ge=0)

    # Scoring: the weights of the relevance formula (docs/architecture.md "Recall", step 4)
    semantic_weight: float = 0.6
    recency_boost_days: float = 7
    recency_boost_amount: float = 0.1
    recency_secondary_days: float = 30
    recency_secondary_amount: float = 0.05
    feedback_boost_max: float = 0.2
    feedback_penalty_max: float = -0.3
    confidence_weight: float = 0.1

    # Text relevance, the relevance formula's first term (memory/recall/relevance.py): "vector" = the cosine
    # similarity (the original formula's exact numbers); "hybrid" = vector and BM25 evidence fused in [0, 1]
    relevance_signal: Literal["vector", "hybrid"] = "hybrid"
    # BM25's share of the fused relevance: 0.25 since the vector part says more (the speaker-free
    # vector, the speaker floor); chosen on conv-26/30 of LoCoMo, checked on the other three (bench/README.md)
    hybrid_text_weight: float = Field(0.25, ge=0.0, le=1.0)
    neighbor_weight: float = Field(0.0, ge=0.0, le=1.0)  # lift from the best session neighbour's relevance
    # Added to the fused relevance of a memory said by a person the query names, when the query
    # names some of the candidates' speakers and not others (memory/recall/relevance.py)
    speaker_match_weight: float = Field(0.15, ge=0.0, le=1.0)
    # A conversation turn that asks loses question_weight x the share of its text that asks (a
    # question reads like the query but tells little), and the turn that answers it (the next turn
    # of its session, said by another speaker) gains answer_weight x that share x the question's
    # relevance (memory/recall/relevance.py). Chosen on conv-26/30 of LoCoMo, checked on the other
    # three (bench/README.md, "A question's match goes to its answer")
    question_weight: float = Field(0.2, ge=0.0, le=1.0)
    answer_weight: float = Field(0.4, ge=0.0, le=1.0)
    # A conversation turn gains (1 - hybrid_text_weight) x how much better it matches the query
    # with reply_context x its reply's vector (the next turn of its session, a candidate too) mixed
    # into its own (memory/recall/relevance.py reply_gains). 0 turns it off. Chosen on conv-26/30 of
    # LoCoMo, checked on the other three (bench/README.md, "The people and the replies")
    reply_context: float = Field(0.3, ge=0.0, le=1.0)
    # The sentence part, an optional stage (memory/recall/sentences.py): the top sentence_head
    # candidates that are conversation turns of several sentences gain sentence_weight x how much
    # better their best sentence matches the query than the whole turn does. Each sentence is
    # embedded at recall (then kept in a bounded in-process cache), so it costs query time, not
    # recording time: off (0) by default; bench/README.md, "The sentence part", has its gain and cost.
    sentence_head: int = Field(0, ge=0, le=200)
    sentence_weight: float = Field(0.2, ge=0.0, le=1.0)
    # When the speaker match applies, the vector part is the cosine with the query without the
    # named speakers' names (the match says who, the cosine says what); the whole query's vector
    # search and its min_similarity floor still use the whole query's cosine (speaker_free_candidates
    # adds the speaker-free search's). Costs a second query embedding.
    speaker_free_vector: bool = True
    # With speaker_free_vector, while the speaker floor applies (below), the candidates are also the
    # vector top candidate_pool of the query without the names (a second vector search): a memory
    # that says what the query asks in other words is not crowded out by the person's memories that
    # only share the name (memory/recall/candidates.py find_candidates)
    speaker_free_candidates: bool = True
    # The cosine floor while the speaker match applies (the query names some of the candidates'
    # speakers and not others), in place of the built-in floor: only while min_similarity_threshold
    # is unset and the caller passes no min_similarity (a floor someone set is kept as set). A name
    # the query shares with a memory's speaker lifts the cosine of every memory of that person (each
    # is embedded as "Name: ..."), so there the floor no longer tells an unrelated question from a
    # related one; it only drops evidence that says what the question asks in other words.
    # None: one floor for every query.
    speaker_min_similarity: float | None = Field(0.2, ge=-1.0, le=1.0)
    # The optional LLM step (memory/recall/rewrite.py): with an OpenAI-compatible LLM configured,
    # recall asks it (llm_model) for up to this many search queries, searches each beside the
    # query and ranks a memory by its best cosine with any of them; 0 = off. A failed or slower
    # than recall_llm_timeout_seconds LLM leaves the query alone.
    recall_llm_subqueries: int = Field(0, ge=0, le=8)
    recall_llm_timeout_seconds: float = Field(5.0, gt=0)
    # Dates and relative phrases in the query ("in May 2023", "last week") add this much to the
    # memories inside their window: a soft signal, never a filter
    date_match_boost: float = Field(0.1, ge=0.0, le=1.0)

    @property
    def min_similarity(self) -> float:
        """The cosine floor in effect (see ``min_similarity_threshold``)."""
        if self.min_similarity_threshold is not None:
            return self.min_similarity_threshold
        return SEED_MIN_SIMILARITY if self.relevance_signal == "vector" else HYBRID_MIN_SIMILARITY

    # Feedback-aware recall: boosts on the normalised average feedback
    feedback_high_threshold: float = 0.7
    feedback_high_boost: float = 0.2
    feedback_low_threshold: float = 0.3
    feedback_low_penalty: float = -0.3

    # Diversity: each memory loses (similarity - threshold) x factor per more similar, higher one
    diversity_penalty_threshold: float = 0.9
    diversity_penalty_factor: float = 0.5


class ReadinessSettings(BaseModel):
    """The readiness exam of an agent (``WorldModel.readiness``)."""

    # Graduation exam (readiness): an agent is ready when every ratio reaches its minimum
    readiness_min_episodes: int = Field(10, ge=1)
    readiness_min_zero_intervention: float = Field(0.9, ge=0.0, le=1.0)
    readiness_min_compliance: float = Field(1.0, ge=0.0, le=1.0)
    readiness_min_confidence: float = Field(0.7, ge=0.0, le=1.0)
    readiness_min_success_rate: float = Field(0.8, ge=0.0, le=1.0)
