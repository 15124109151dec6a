"""Settings: the original specification's WorldModelConfig with its defaults, plus every weight recall uses.

One pydantic-settings model reads them: each field can be set by an environment variable
``WORLDGRAPH_<FIELD>`` (upper case), e.g. ``WORLDGRAPH_MIN_SIMILARITY_THRESHOLD=0.3`` (``null``
unsets an optional one); the usual ``NEO4J_URI`` / ``NEO4J_USER`` (``NEO4J_USERNAME``) /
``NEO4J_PASSWORD`` / ``NEO4J_DATABASE`` are honoured after their ``WORLDGRAPH_NEO4J_*`` names.
Explicit keyword arguments win over the environment, which wins over the defaults. This module
is the only one that reads the environment (LLM and object-store variables included) or sets it:
the command line's defaults (``cli_defaults``), the local Neo4j launcher's variables
(``LauncherSettings``), library defaults (``set_library_defaults``) and the environment of a
child process (``child_environment``) are here too; a test (test_config_env.py) holds every
other module to that.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

try:  # where pydantic-settings keeps it since 2.7; before, in pydantic_settings.sources
    from pydantic_settings.sources.utils import parse_env_vars
except ImportError:  # pragma: no cover - older pydantic-settings
    from pydantic_settings.sources import parse_env_vars  # type: ignore[attr-defined,no-redef]

from worldgraph.errors import InvalidInputError

ENV_PREFIX = "WORLDGRAPH_"
SEED_MIN_SIMILARITY = 0.6
HYBRID_MIN_SIMILARITY = 0.3


# The usual names of the Neo4j variables, read after WORLDGRAPH_NEO4J_* (the first one set wins).
NEO4J_VARIABLES: tuple[tuple[str, str], ...] = (
    ("NEO4J_URI", "neo4j_uri"), ("NEO4J_USER", "neo4j_user"), ("NEO4J_USERNAME", "neo4j_user"),
    ("NEO4J_PASSWORD", "neo4j_password"), ("NEO4J_DATABASE", "neo4j_database"))

# The variables a config is read from: os.environ, or the mapping given to from_env (tests).
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("worldgraph_environ", default=None)


class WorldGraphConfig(BaseSettings):
    """Every setting of the original WorldModelConfig, with its defaults, and the rest of ours."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, case_sensitive=False, extra="forbid",
                                      validate_assignment=True, env_parse_none_str="null")

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

    # Recall (the original defaults)
    default_recall_limit: int = Field(5, gt=0)
    # The floor on the cosine similarity (semantic_score). Unset: the original 0.6 with
    # relevance_signal="vector" (the cosine is the only evidence); 0.3 with "hybrid", where the
    # words vouch too and the floor only drops memories whose meaning is plainly unrelated.
    min_similarity_threshold: float | None = Field(None, ge=-1.0, le=1.0)
    candidate_pool: int = Field(100, gt=0)  # "top 100 candidates by semantic similarity"
    fulltext_pool: int = Field(50, ge=0)  # extra BM25 hits merged into the candidates (hybrid)

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
    # only share the name (memory/recall/pipeline.py find_candidates)
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

    # Graduation exam (readiness): an agent is ready when every ratio reaches its minimum
    readiness_min_episodes: int = Field(10, ge=1)
    readiness_min_zero_intervention: float = Field(0.9, ge=0.0, le=1.0)
    readiness_min_compliance: float = Field(1.0, ge=0.0, le=1.0)
    readiness_min_confidence: float = Field(0.7, ge=0.0, le=1.0)
    readiness_min_success_rate: float = Field(0.8, ge=0.0, le=1.0)

    # Storage
    # relative to the data directory given to WorldModel.open, or an object store URI such as
    # "s3://bucket/prefix" (credentials and endpoint from the standard AWS_* variables: see
    # object_store_options)
    lancedb_path: str = "lancedb"
    # The embedded store's SQLite file (worldgraph.db). Page cache of the writing connection, in
    # MiB: the episode indexes of a million episodes (~100 MB) stay in memory instead of being
    # read back for each batch's inserts. WAL pages written before SQLite copies them into the
    # database: a page that batch after batch rewrites (the index pages random ids land on) is
    # copied once per checkpoint, not once a batch. Measured at 50-100k episodes (bench/README,
    # "Recording"): the store's share of a batch 90 -> 32 us an episode. The WAL file grows to
    # about this many 4 KiB pages between checkpoints.
    sqlite_cache_mb: int = Field(256, ge=2)
    sqlite_wal_autocheckpoint_pages: int = Field(16_384, ge=1)

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
    # 2, not 4: a search probes ann_nprobes partitions whatever their size, so partitions grown 4x
    # scanned up to 4x the codes (at 1M, an index trained at 300k: 37 partitions for 122).
    ann_retrain_growth: float = Field(2.0, gt=1.0)
    # Old table versions (and the files only they use) are deleted this long after they stop being
    # the newest; a reader always works on the newest, so this only needs to outlast one search.
    index_version_retention_seconds: float = Field(300.0, ge=0)
    # Compaction merges small fragments into fragments of this many rows, and once there are
    # index_policy.COMPACT_TIER of those, them into fragments of COMPACT_TIER times as many (each
    # row is rewritten about twice). Fewer fragments, faster reads: every search reads its rows
    # from each fragment they are in (two copies of a 1M table with the same index: 16 fragments
    # 11.0 ms, 4 fragments 9.5 ms for a recall's two searches).
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
    # After a forget, the background purge removes the forgotten bytes from the files within this many
    # seconds (while the process runs; a process that stops first leaves it to the next one that opens
    # the folder, or to `worldgraph purge`). 0: purge right after each forget.
    purge_after_seconds: float = Field(60.0, ge=0)
    # Every call to the index's object store (s3://) answers within this or fails with
    # StoreUnavailableError: a write leaves its episodes stored and pending (indexed later), a
    # recall fails (503). Also the per-request timeout given to LanceDB's object-store client.
    object_store_timeout_seconds: float = Field(20.0, gt=0, le=3600)

    # Service (worldgraph serve)
    max_request_bytes: int = Field(1 << 20, gt=0)  # a larger request body is refused (413) before parsing
    server_threads: int = Field(8, gt=0)  # threads running the blocking facade calls of HTTP requests
    # On SIGTERM, in-flight requests (serve) and packets being extracted (worker) get this long;
    # then requests fail and held packets go back to pending (serve ends within this + 1.5 s)
    shutdown_timeout_seconds: float = Field(2.0, ge=0)
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
    # cypher(): each query runs in one READ transaction with this timeout, and the call returns or
    # fails by then (plus the ~1 s it may take to end the transaction); more rows is an error
    cypher_timeout_seconds: float = Field(30.0, gt=0)
    cypher_max_rows: int = Field(10_000, gt=0)
    # ... and more than this many bytes of rows (their JSON size, roughly) is an error too
    cypher_max_result_bytes: int = Field(16 * 1024 * 1024, gt=0)
    # refused before any store sees them (worldgraph.kg.cypher_limits): a longer query text, one
    # nesting brackets / CASE deeper (a parser recurses per level), params nested deeper or bigger
    cypher_max_query_bytes: int = Field(65_536, gt=0)
    cypher_max_nesting_depth: int = Field(64, gt=0)
    cypher_max_params_bytes: int = Field(1_048_576, gt=0)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keywords, then WORLDGRAPH_* variables, then the usual Neo4j names; no .env file (a
        stray one in the working folder must not change where data goes)."""
        return init_settings, _Variables(settings_cls), _Neo4jVariables(settings_cls)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> WorldGraphConfig:
        """Defaults, then ``WORLDGRAPH_*`` variables (of ``environ``, default ``os.environ``), then
        ``overrides``. A bad value is an InvalidInputError naming the variable or keyword to fix."""
        with _reading(environ):
            try:
                return cls(**overrides)
            except ValidationError as exc:
                raise _config_error(exc, overrides, _environ()) from exc


class _Variables(EnvSettingsSource):
    """The WORLDGRAPH_* variables, of the mapping from_env was given or of os.environ."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(_environ(), self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


class _Neo4jVariables(PydanticBaseSettingsSource):
    """NEO4J_URI and friends (what Neo4j's own tools read), below their WORLDGRAPH_ names."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ gives every value at once

    def __call__(self) -> dict[str, Any]:
        environ, out = _environ(), {}
        for var, name in NEO4J_VARIABLES:
            if var in environ and name not in out:
                out[name] = environ[var]
        return out


def _environ() -> Mapping[str, str]:
    given = _ENVIRON.get()
    return os.environ if given is None else given


@contextmanager
def _reading(environ: Mapping[str, str] | None) -> Iterator[None]:
    token = _ENVIRON.set(None if environ is None else dict(environ))
    try:
        yield
    finally:
        _ENVIRON.reset(token)


def _config_error(exc: ValidationError, overrides: Mapping[str, Any], environ: Mapping[str, str]) -> InvalidInputError:
    """The first problem, naming where the bad value came from: a keyword, a WORLDGRAPH_*
    variable (or a NEO4J_* one), and how to fix it."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "config"
    variable = ENV_PREFIX + field.upper()
    if err["type"] == "extra_forbidden":
        return InvalidInputError(f"config.{field}", "is not a setting of WorldGraphConfig (check the spelling)")
    if field in overrides:
        where = f"the keyword argument {field}={overrides[field]!r}"
    elif variable in environ or variable.lower() in {k.lower() for k in environ}:
        where = f"the environment variable {variable}={err.get('input')!r}: fix or unset it"
    else:
        usual = [v for v, name in NEO4J_VARIABLES if name == field and v in environ]
        where = (f"the environment variable {usual[0]}={err.get('input')!r}: fix or unset it" if usual else
                 f"set it with {variable} or a keyword argument")
    return InvalidInputError(f"config.{field}", f"{err['msg']} ({where})", err.get("input"))


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
    environ = dict(_environ() if environ is None else environ)
    options: dict[str, str] = {}
    for var, key in AWS_VARIABLES.items():  # the first variable of a key wins (AWS_REGION before AWS_DEFAULT_REGION)
        if environ.get(var) and key not in options:
            options[key] = environ[var]
    return options


def openai_endpoint(environ: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """``(OPENAI_BASE_URL, OPENAI_API_KEY)``, each None when unset or empty: where the LLM and the
    OpenAI embedder are. Kept out of WorldGraphConfig like the AWS variables: a key never enters a
    config dump."""
    env = _environ() if environ is None else environ
    return env.get("OPENAI_BASE_URL") or None, env.get("OPENAI_API_KEY") or None


def llm_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether an OpenAI-compatible LLM is configured (``OPENAI_API_KEY`` or ``OPENAI_BASE_URL``):
    without one, scene packets wait for ``worldgraph world retry``."""
    base_url, api_key = openai_endpoint(environ)
    return bool(base_url or api_key)


# ------------------------------------------------------------------ variables outside WorldGraphConfig
# The command line's global options and the local Neo4j launcher read a few variables of their own;
# they are read here, like every other variable, each when it is needed (a test or a shell that
# changes one between two calls sees the change).


def cli_defaults(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``worldgraph`` command's global options when not given: ``--data`` from
    ``WORLDGRAPH_DATA`` (default ``./data``), ``--graph`` from ``WORLDGRAPH_GRAPH`` (default
    ``embedded``), ``--tenant`` from ``WORLDGRAPH_TENANT`` (default ``default``)."""
    env = _environ() if environ is None else environ
    return {"data": env.get("WORLDGRAPH_DATA", "./data"),
            "graph": env.get("WORLDGRAPH_GRAPH", "embedded"),
            "tenant": env.get("WORLDGRAPH_TENANT", "default")}


@dataclass(frozen=True)
class LauncherSettings:
    """The local Neo4j launcher's variables (``worldgraph.neo4j_local``); None when unset.

    ``home``: ``WORLDGRAPH_NEO4J_HOME``, the state folder (empty counts as unset);
    ``project``: ``WORLDGRAPH_NEO4J_PROJECT``, the Maven project (empty counts as unset);
    ``java_opts``: ``WORLDGRAPH_NEO4J_JAVA_OPTS``, the JVM options (set but empty: none);
    ``pagecache``: ``WORLDGRAPH_NEO4J_PAGECACHE``, Neo4j's page cache size;
    ``cache_home``: ``XDG_CACHE_HOME`` if set and not empty, else ``~/.cache`` (where a wheel's
    copy of the Maven project is built)."""

    home: str | None
    project: str | None
    java_opts: str | None
    pagecache: str | None
    cache_home: Path

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LauncherSettings:
        env = _environ() if environ is None else environ
        return cls(home=env.get("WORLDGRAPH_NEO4J_HOME") or None,
                   project=env.get("WORLDGRAPH_NEO4J_PROJECT") or None,
                   java_opts=env.get("WORLDGRAPH_NEO4J_JAVA_OPTS"),
                   pagecache=env.get("WORLDGRAPH_NEO4J_PAGECACHE"),
                   cache_home=Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache"))


# Variables a library reads itself, set for this process (and the processes it starts) unless the
# operator set them: lance's vector index statistics include every centroid unless told otherwise
# (and warn about it on each call); the episode index reads only the partition count, so it opts in
# to lance's announced default.
LIBRARY_DEFAULTS: dict[str, str] = {"LANCE_INCLUDE_VECTOR_CENTROIDS": "false"}


def set_library_defaults() -> None:
    """Set each of LIBRARY_DEFAULTS in this process's environment that is not set already."""
    for name, value in LIBRARY_DEFAULTS.items():
        os.environ.setdefault(name, value)


def child_environment(pythonpath_first: str | None = None) -> dict[str, str]:
    """The environment of a child process of ours: this process's (the ``AWS_*`` and ``OPENAI_*``
    variables and LIBRARY_DEFAULTS included), with ``pythonpath_first`` put in front of
    ``PYTHONPATH`` so the child imports the same worldgraph as its parent."""
    env = dict(os.environ)
    if pythonpath_first is not None:
        env["PYTHONPATH"] = pythonpath_first + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
