"""Settings: the seed's WorldModelConfig with its defaults, plus every weight the recall uses.

Each field can be overridden by an environment variable ``WORLDGRAPH_<FIELD>`` (upper case),
e.g. ``WORLDGRAPH_MIN_SIMILARITY_THRESHOLD=0.3``. Explicit keyword arguments win over the
environment, which wins over the defaults.
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from worldgraph.errors import InvalidInputError

ENV_PREFIX = "WORLDGRAPH_"
SEED_MIN_SIMILARITY = 0.6
HYBRID_MIN_SIMILARITY = 0.3


class WorldGraphConfig(BaseModel):
    """Every setting of the seed's WorldModelConfig, with its defaults, and the rest of ours."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # Embedding (seed)
    embedding_model: str = "text-embedding-3-small"
    embedding_dimensions: int = Field(1536, gt=0)
    # auto: the best installed local model (a folder keeps the model that built its index), else
    # the hashing fallback; local: the same without the fallback
    embedding_provider: Literal["auto", "openai", "local", "hashing"] = "auto"
    embedding_local_model: str = "auto"  # or a key of worldgraph.memory.embeddings.LOCAL_MODELS
    embedding_threads: int = Field(0, ge=0)  # local batches embedded side by side; 0 = one per core

    # Recall (seed)
    default_recall_limit: int = Field(5, gt=0)
    # The floor on the cosine similarity (semantic_score). Unset: the seed's 0.6 with
    # relevance_signal="vector" (the cosine is the only evidence); 0.3 with "hybrid", where the
    # words vouch too and the floor only drops memories whose meaning is plainly unrelated.
    min_similarity_threshold: float | None = Field(None, ge=-1.0, le=1.0)
    candidate_pool: int = Field(100, gt=0)  # "top 100 candidates by semantic similarity"
    fulltext_pool: int = Field(50, ge=0)  # extra BM25 hits merged into the candidates (hybrid)

    # Scoring (seed)
    semantic_weight: float = 0.6
    recency_boost_days: float = 7
    recency_boost_amount: float = 0.1
    recency_secondary_days: float = 30
    recency_secondary_amount: float = 0.05
    feedback_boost_max: float = 0.2
    feedback_penalty_max: float = -0.3
    confidence_weight: float = 0.1

    # Text relevance, the seed formula's semantic term (memory/relevance.py): "vector" = the cosine
    # similarity (the seed's exact numbers); "hybrid" = vector and BM25 evidence fused in [0, 1]
    relevance_signal: Literal["vector", "hybrid"] = "hybrid"
    hybrid_text_weight: float = Field(0.4, ge=0.0, le=1.0)  # BM25's share of the fused relevance
    neighbor_weight: float = Field(0.0, ge=0.0, le=1.0)  # lift from the best session neighbour's relevance
    # Dates and relative phrases in the query ("in May 2023", "last week") add this much to the
    # memories inside their window: a soft signal, never a filter
    date_match_boost: float = Field(0.1, ge=0.0, le=1.0)

    @property
    def min_similarity(self) -> float:
        """The cosine floor in effect (see ``min_similarity_threshold``)."""
        if self.min_similarity_threshold is not None:
            return self.min_similarity_threshold
        return SEED_MIN_SIMILARITY if self.relevance_signal == "vector" else HYBRID_MIN_SIMILARITY

    # Feedback-aware recall (seed): boosts on the normalised average feedback
    feedback_high_threshold: float = 0.7
    feedback_high_boost: float = 0.2
    feedback_low_threshold: float = 0.3
    feedback_low_penalty: float = -0.3

    # Diversity (seed)
    diversity_penalty_threshold: float = 0.9
    diversity_penalty_factor: float = 0.5

    # Graduation exam (readiness): an agent is ready when every ratio reaches its minimum
    readiness_min_episodes: int = Field(10, ge=1)
    readiness_min_zero_intervention: float = Field(0.9, ge=0.0, le=1.0)
    readiness_min_compliance: float = Field(1.0, ge=0.0, le=1.0)
    readiness_min_confidence: float = Field(0.7, ge=0.0, le=1.0)
    readiness_min_success_rate: float = Field(0.8, ge=0.0, le=1.0)

    # Storage (seed)
    # relative to the data directory given to WorldModel.open, or an object store URI such as
    # "s3://bucket/prefix" (credentials and endpoint from the standard AWS_* variables: see
    # object_store_options)
    lancedb_path: str = "lancedb"
    postgres_connection_pool: int = 20  # kept for parity with the seed; the graph store pools itself

    # LanceDB maintenance
    ann_index_min_rows: int = Field(10_000, gt=0)  # below it an exact scan is fast enough
    compact_every_writes: int = Field(200, gt=0)
    # Background optimize of a tenant's table also once this many rows were written to it (in this
    # process) since the last one: rows written after an index was built are flat-scanned until then.
    optimize_every_rows: int = Field(5_000, gt=0)
    # The ANN index of a tenant's table, chosen by measurement (bench/README.md, "Choosing the ANN
    # index"): IVF partitions of ~ann_partition_rows rows holding 4-bit RaBitQ codes; a search
    # probes at least ann_nprobes partitions and re-ranks at least ann_candidates hits (and k) by
    # their full vectors. At 1M episodes: recall@10 1.0 against exact search, ~12 ms a search.
    ann_index_type: Literal["IVF_PQ", "IVF_RQ", "IVF_SQ", "IVF_HNSW_SQ"] = "IVF_RQ"
    ann_partition_rows: int = Field(8_192, gt=0)
    ann_rq_bits: int = Field(4, ge=1, le=8)  # IVF_RQ: bits per dimension of the RaBitQ codes
    ann_nprobes: int = Field(20, gt=0)
    ann_candidates: int = Field(100, gt=0)
    # Retrain the ANN index once the table wants this many times the partitions it was built with.
    ann_retrain_growth: float = Field(4.0, gt=1.0)
    # Old table versions (and the files only they use) are deleted this long after they stop being
    # the newest; a reader always works on the newest, so this only needs to outlast one search.
    index_version_retention_seconds: float = Field(300.0, ge=0)
    # Compaction merges small fragments up to this many rows; bigger ones are not rewritten again.
    compact_target_rows: int = Field(65_536, gt=0)
    # New rows are indexed as small delta segments; an index with more segments than this (every
    # search reads each one) is merged back into one by the next background optimize.
    index_max_segments: int = Field(8, ge=1)

    # World graph
    app_name: str = "general"
    history_rounds: int = Field(5, ge=0)
    llm_model: str = "gpt-4o-mini"
    llm_timeout_seconds: float = Field(60.0, gt=0)
    llm_max_retries: int = Field(0, ge=0)
    max_delta_items: int = Field(500, gt=0)
    # background threads extracting scene packets (merges place facts by round time, so the
    # graph does not depend on which answer arrives first)
    world_workers: int = Field(1, ge=1, le=64)
    # how long update_world waits for a packet another worker holds before it gives up
    update_wait_seconds: float = Field(600.0, ge=0)
    summary_max_items: int = Field(40, gt=0)
    # False: flagged packets stay pending in the store for `worldgraph worker` processes instead of
    # this process's background threads (update_world and retry still merge on demand)
    world_background_updates: bool = True
    # A packet being extracted is leased to its worker, which renews the lease every third of this;
    # another worker takes a packet whose lease ran out (its worker died), never a live one's.
    worker_lease_seconds: float = Field(30.0, ge=1)
    # After an index write failed (object store unreachable), a long-running process re-indexes the
    # pending episodes this often until none is left.
    index_retry_seconds: float = Field(30.0, gt=0)

    # Service (worldgraph serve)
    max_request_bytes: int = Field(1 << 20, gt=0)  # a larger request body is refused (413) before parsing
    server_threads: int = Field(8, gt=0)  # threads running the blocking facade calls of HTTP requests
    shutdown_timeout_seconds: float = Field(30.0, ge=0)  # in-flight requests get this long on SIGTERM
    # Input limits (worldgraph.limits): a value over one is refused with InvalidInputError /
    # DeltaValidationError naming the field, the limit and this setting. Sizes are UTF-8 bytes.
    max_text_bytes: int = Field(65_536, gt=0)  # one string of an experience or canvas (each learning, action, ...)
    max_list_items: int = Field(1_000, gt=0)  # one list of an experience or canvas (learnings, actions, components, ...)
    max_experience_bytes: int = Field(1_048_576, gt=0)  # all the text of one experience
    max_nesting_depth: int = Field(32, gt=0)  # containers nested in an experience or canvas (reasoning_chain, state, ...)
    max_canvas_bytes: int = Field(1_048_576, gt=0)  # all the text of one canvas
    max_batch_experiences: int = Field(10_000, gt=0)  # experiences in one record_experiences call
    max_query_bytes: int = Field(4_096, gt=0)  # a recall query
    max_delta_bytes: int = Field(1_048_576, gt=0)  # a graph delta given to apply_delta (as JSON)
    # Recall reads at most this much of a stored episode's searchable text for full-text search:
    # records written before the limits existed (or imported) cannot make a recall slow.
    max_search_text_bytes: int = Field(65_536, gt=0)

    # Neo4j
    neo4j_uri: str = "bolt://127.0.0.1:7687"
    neo4j_user: str = "neo4j"
    neo4j_password: str = "worldgraph-dev"
    neo4j_database: str = "neo4j"
    # a snapshot import (replace_world) of more records than this runs in transactions of this many
    neo4j_import_batch: int = Field(10_000, gt=0)
    # cypher(): each query runs in one READ transaction with this timeout; more rows is an error
    cypher_timeout_seconds: float = Field(30.0, gt=0)
    cypher_max_rows: int = Field(10_000, gt=0)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> "WorldGraphConfig":
        """Defaults, then ``WORLDGRAPH_*`` variables, then ``overrides``."""
        environ = dict(os.environ if environ is None else environ)
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = environ.get(ENV_PREFIX + name.upper())
            if raw is not None:
                values[name] = _parse_env(raw)
        # The usual names of the Neo4j and LLM variables are honoured too.
        for var, name in (("NEO4J_URI", "neo4j_uri"), ("NEO4J_USER", "neo4j_user"),
                          ("NEO4J_USERNAME", "neo4j_user"), ("NEO4J_PASSWORD", "neo4j_password"),
                          ("NEO4J_DATABASE", "neo4j_database")):
            if var in environ and ENV_PREFIX + name.upper() not in environ:
                values[name] = environ[var]
        values.update(overrides)
        try:
            return cls(**values)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "config"
            env_name = ENV_PREFIX + field.upper()
            raise InvalidInputError(
                f"config.{field}", f"{err['msg']} (set it with {env_name} or a keyword argument)"
            ) from exc


# The standard variables of AWS SDKs, as LanceDB storage options (object stores: lancedb_path
# "s3://..."). AWS_ENDPOINT_URL points at any S3-compatible server (MinIO, Ceph, moto, R2).
AWS_VARIABLES: dict[str, str] = {
    "AWS_ENDPOINT_URL_S3": "aws_endpoint",  # the service-specific one wins, as in the AWS SDKs
    "AWS_ENDPOINT_URL": "aws_endpoint",
    "AWS_ACCESS_KEY_ID": "aws_access_key_id",
    "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
    "AWS_SESSION_TOKEN": "aws_session_token",
    "AWS_REGION": "aws_region",
    "AWS_DEFAULT_REGION": "aws_region",
    "AWS_ALLOW_HTTP": "allow_http",
}


def object_store_options(environ: dict[str, str] | None = None) -> dict[str, str]:
    """LanceDB storage options from the standard ``AWS_*`` variables that are set. Kept out of
    WorldGraphConfig on purpose: secrets never enter a config dump (the index maintenance child
    process gets its config on the command line and these from its environment)."""
    environ = dict(os.environ if environ is None else environ)
    options: dict[str, str] = {}
    for var, key in AWS_VARIABLES.items():  # the first variable of a key wins (AWS_REGION before AWS_DEFAULT_REGION)
        if environ.get(var) and key not in options:
            options[key] = environ[var]
    return options


def _parse_env(raw: str) -> Any:
    """Numbers and booleans come in as text; JSON parsing turns '0.3' into 0.3 and keeps words."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw
