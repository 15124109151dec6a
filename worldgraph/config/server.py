"""The settings of ``worldgraph serve`` and the input limits every surface applies
(``worldgraph.limits``). Parts of ``WorldGraphConfig`` (settings.py)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ServerSettings(BaseModel):
    """``worldgraph serve``: request size, threads, shutdown."""

    # Service (worldgraph serve)
    max_request_bytes: int = Field(1 << 20, gt=0)  # a larger request body is refused (413) before parsing
    server_threads: int = Field(8, gt=0)  # threads running the blocking facade calls of HTTP requests
    # On SIGTERM, in-flight requests (serve) and packets being extracted (worker) get this long;
    # then requests fail and held packets go back to pending (serve ends within this + 1.5 s)
    shutdown_timeout_seconds: float = Field(2.0, ge=0)
    # Idempotent writes (an Idempotency-Key, or idempotency_key=): the first answer is kept this long
    # (at least a day: a client's retries, a queue's redeliveries), and a request still marked as
    # running after idempotency_stale_seconds is taken to have died with its process
    idempotency_ttl_seconds: float = Field(86_400.0, ge=86_400.0)
    idempotency_stale_seconds: float = Field(600.0, gt=0)


class LimitSettings(BaseModel):
    """Input limits: the size of every value a caller gives."""

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
