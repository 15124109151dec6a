"""Step 1 of recall (docs/architecture.md "Recall"): the options resolved, the query cleaned,
parsed (query.py: its canvases, agents and dates) and embedded, and the metadata filters made."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import InvalidInputError
from worldgraph.memory.embeddings import Embedder, check_embeddings, embed_query
from worldgraph.memory.metadata import MetadataFilter, parse_filter
from worldgraph.memory.models import DateRange, RecallOptions
from worldgraph.memory.recall import rewrite
from worldgraph.memory.recall.conversation import Ahead
from worldgraph.memory.recall.query import ParsedQuery, parse_query
from worldgraph.memory.record import parse_model


@dataclass
class Filters:
    agent_role: str | None
    agent_id: str | None
    canvas_ids: list[str] | None
    start: datetime | None
    end: datetime | None
    success_only: bool
    metadata: MetadataFilter | None = None
    session_id: str | None = None
    # the episodes the filters only the store can answer pass (a session, feedback): resolved by
    # step 2 (candidates.scope), pushed into the index's search; None: no such filter
    episode_ids: frozenset[str] | None = None

    def where(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.agent_role:
            out["agent_role"] = self.agent_role
        if self.agent_id:
            out["agent_id"] = self.agent_id
        if self.canvas_ids:
            out["canvas_ids"] = self.canvas_ids
        if self.start is not None:
            out["start"] = self.start.timestamp()
        if self.end is not None:
            out["end"] = self.end.timestamp()
        if self.success_only:
            out["success_only"] = True
        if self.episode_ids is not None:
            out["episode_ids"] = self.episode_ids
        if self.metadata is not None:  # what every match carries, pushed into the search
            if self.metadata.terms:
                out["metadata_terms"] = list(self.metadata.terms)
            if self.metadata.any_terms:
                out["metadata_any"] = [list(g) for g in self.metadata.any_terms]
        return out

    def keeps(self, ep: dict[str, Any]) -> bool:
        if self.agent_role and ep.get("agent_role") != self.agent_role:
            return False
        if self.agent_id and ep.get("agent_id") != self.agent_id:
            return False
        if self.canvas_ids and ep.get("canvas_id") not in self.canvas_ids:
            return False
        if self.start is not None and ep["ts"] < self.start.timestamp():
            return False
        if self.end is not None and ep["ts"] > self.end.timestamp():
            return False
        if self.success_only and ep.get("outcome") != "success":
            return False
        if self.session_id is not None and ep.get("session_id") != self.session_id:
            return False
        if self.episode_ids is not None and ep.get("id") not in self.episode_ids:
            return False
        return self.metadata is None or self.metadata.matches(ep.get("metadata"))


def parse_options(options: RecallOptions | dict[str, Any] | None) -> RecallOptions:
    return RecallOptions() if options is None else parse_model(RecallOptions, options, "options")


@dataclass
class PreparedQuery:
    """Step 1's output: the options resolved, the query cleaned, parsed and embedded."""

    opts: RecallOptions
    query: str
    k: int
    now_s: float
    min_sim: float
    parsed: ParsedQuery
    text: str
    window: ParsedQuery | None  # the query's own dates, a soft signal (None: none, or an explicit date_range)
    filters: Filters
    qvec: np.ndarray
    subqueries: list[str] = field(default_factory=list)  # the LLM step's (rewrite.py), searched beside the query
    subvecs: np.ndarray | None = None  # their embeddings, one row each
    ahead: Ahead | None = None  # the speaker-free query's embedding, started beside the query's own


def prepare_query(embedder: Embedder, cfg: WorldGraphConfig, agent_role: str | None, query: str,
                  limit: int | None, options: RecallOptions | dict[str, Any] | None,
                  now: float | None, ahead: Callable[[str, RecallOptions], Ahead | None] | None = None
                  ) -> PreparedQuery:
    """1. query preprocessing, entity extraction, embedding. ``ahead(text, options)``: called with
    the cleaned text just before it is embedded, to start other work beside the embedding."""
    opts = parse_options(options)
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("query", "must be a non-empty string (say what experience to recall)", query)
    if agent_role is not None and not isinstance(agent_role, str):
        raise InvalidInputError("agent_role", "must be a string or None", agent_role)
    k = opts.limit if opts.limit is not None else limit if limit is not None else cfg.default_recall_limit
    if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
        raise InvalidInputError("limit", "must be a positive integer", k)
    now_s = opts.now.timestamp() if opts.now is not None else time.time() if now is None else now
    min_sim = opts.min_similarity if opts.min_similarity is not None else cfg.min_similarity
    parsed = parse_query(query, datetime.fromtimestamp(now_s, timezone.utc))
    text = parsed.text if opts.extract_filters else " ".join(query.split())
    if not any(ch.isalnum() for ch in text):
        raise InvalidInputError("query", "has nothing to search for once cleaned (no letters or digits left): "
                                "say what experience to recall", query)
    dr: DateRange | None = opts.date_range
    # An explicit date_range is the caller's filter; the query's own dates are only a soft signal.
    window = parsed if opts.extract_filters and dr is None and parsed.date_phrases else None
    filters = Filters(
        agent_role=opts.agent_role or agent_role or None,
        agent_id=opts.agent_id or (parsed.agent_ids[0] if opts.extract_filters and parsed.agent_ids else None),
        canvas_ids=opts.canvas_ids or (parsed.canvas_ids if opts.extract_filters and parsed.canvas_ids else None),
        start=dr.start if dr else None, end=dr.end if dr else None, success_only=opts.success_only,
        metadata=parse_filter(opts.metadata, "options.metadata"), session_id=opts.session_id,
    )
    early = ahead(text, opts) if ahead is not None else None
    try:
        qvec = check_embeddings(embed_query(embedder, [text]), 1, embedder.dimensions)[0]
        q = PreparedQuery(opts, query, k, now_s, min_sim, parsed, text, window, filters, qvec, ahead=early)
        if rewrite.enabled(cfg) and (subs := rewrite.subqueries(cfg, text)):
            q.subqueries = subs
            q.subvecs = check_embeddings(embed_query(embedder, subs), len(subs), embedder.dimensions)
    except BaseException:
        if early is not None:
            early.settle()
        raise
    return q
