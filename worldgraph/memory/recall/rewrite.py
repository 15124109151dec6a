"""The optional LLM step of recall: the query rewritten into search queries (sub-queries).

Off unless ``recall_llm_subqueries`` > 0 and an OpenAI-compatible LLM is configured
(``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``, the world graph's; model ``llm_model``). A question
that needs two memories ("what did X decide after Y happened?") often shares few words and
little meaning with either of them; the LLM names what to look for ("X's decision", "Y"), and
recall searches each sub-query beside the query (candidates.py). The step never fails a recall: an
unreachable, slow (``recall_llm_timeout_seconds``) or unreadable LLM leaves the query alone,
with a warning in the log.
"""

from __future__ import annotations

import json
import logging
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from worldgraph.config import WorldGraphConfig, llm_configured, openai_endpoint

if TYPE_CHECKING:  # imported where an LLM is asked: ~1 s that a process which never asks one does not pay
    import openai

log = logging.getLogger(__name__)

MAX_SUBQUERY_CHARS = 200  # a sub-query is a search phrase; a longer answer is cut here

PROMPT = (
    "You turn a question about past conversations and events into short search queries for a "
    "memory search. Answering may need several memories (e.g. two events, or one person's "
    "different activities): write one query per thing to look for, each a short phrase that "
    "such a memory would contain. Answer with JSON only: {\"queries\": [\"...\", ...]}, at most "
    "%d queries."
)

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


def enabled(cfg: WorldGraphConfig) -> bool:
    """Whether recall asks the LLM for sub-queries: configured on, and an LLM to ask."""
    return cfg.recall_llm_subqueries > 0 and llm_configured()


@lru_cache(maxsize=4)
def _client(base_url: str | None, api_key: str | None, timeout: float) -> openai.OpenAI:
    # one client (and its connection pool) per endpoint; no retries: recall does not wait twice
    import openai

    return openai.OpenAI(api_key=api_key or "not-needed", base_url=base_url, timeout=timeout, max_retries=0)


def subqueries(cfg: WorldGraphConfig, query: str) -> list[str]:
    """Up to ``recall_llm_subqueries`` search queries for ``query`` from the LLM, without the
    query itself and without repeats; [] when the LLM fails or answers nothing usable."""
    import openai

    base_url, api_key = openai_endpoint()
    n = cfg.recall_llm_subqueries
    try:
        completion = _client(base_url, api_key, cfg.recall_llm_timeout_seconds).chat.completions.create(
            model=cfg.llm_model,
            messages=[{"role": "system", "content": PROMPT % n}, {"role": "user", "content": query}],
            temperature=0,
        )
    except openai.OpenAIError as exc:
        log.warning("recall: the LLM step was skipped (%s: %s); the query is searched alone",
                    type(exc).__name__, str(exc)[:200])
        return []
    choices = getattr(completion, "choices", None) or []
    content = (choices[0].message.content or "") if choices and choices[0].message is not None else ""
    found = parse_subqueries(content)
    if not found and content.strip():
        log.warning("recall: the LLM's sub-queries were unreadable (%r); the query is searched alone", content[:200])
    seen = {" ".join(query.lower().split())}
    out: list[str] = []
    for s in found:
        key = " ".join(s.lower().split())
        if key and key not in seen:
            seen.add(key)
            out.append(" ".join(s.split())[:MAX_SUBQUERY_CHARS])
    return out[:n]


def parse_subqueries(content: str) -> list[str]:
    """The strings of ``{"queries": [...]}`` or of a bare JSON list, inside ```json fences or
    not; anything else gives []."""
    text = (content or "").strip()
    if m := _FENCE.match(text):
        text = m.group(1)
    try:
        data: Any = json.loads(text)
    except ValueError:
        return []
    if isinstance(data, dict):
        data = data.get("queries")
    if not isinstance(data, list):
        return []
    return [s for s in data if isinstance(s, str) and any(ch.isalnum() for ch in s)]
