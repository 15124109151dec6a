"""The parts of recall that conversation turns and the speakers a query names bring (steps 2 and 3
of docs/architecture.md "Recall"): the speaker-free query (its vector, its embedding started ahead
of the candidates, the speakers the query names), the question and answer pairs among the
candidates, and the optional sentence stage."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from worldgraph.config import WorldGraphConfig
from worldgraph.kg.store import EpisodeStore
from worldgraph.memory.embeddings import Embedder, check_embeddings, embed_query
from worldgraph.memory.models import RecallOptions
from worldgraph.memory.recall.relevance import named_speakers, question_share, without_speakers
from worldgraph.memory.recall.sentences import best_sentence_cosines, sentence_texts
from worldgraph.memory.record import CONVERSATION_TASK_TYPE

# The speaker-free query's embedding, run beside the query's own (speaker_free_ahead); its own
# pool, so that a full-text search never waits behind a model run.
_AHEAD_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="worldgraph-recall-embed")
AHEAD_MAX_AGENTS = 64  # a tenant with more agents is not guessed at (the guess reads them all)


@dataclass
class Ahead:
    """A query embedding started on another thread (``speaker_free_ahead``): ``text`` and its run."""

    text: str
    run: Future[np.ndarray]

    def vector(self, embedder: Embedder) -> np.ndarray | None:
        """Its vector (None if it had not started: cancelled, the caller embeds it itself)."""
        if self.run.cancel():
            return None
        vec: np.ndarray = check_embeddings(self.run.result(), 1, embedder.dimensions)[0]
        return vec

    def settle(self) -> None:
        """Not left running past the recall: cancelled, or waited for (its error is not this
        recall's: the text was never used, or its error was raised where it was)."""
        if not self.run.cancel():
            try:
                self.run.result()
            except Exception:  # see above: not this recall's error
                pass


def speaker_names(cfg: WorldGraphConfig, text: str, searched_text: bool, ids: list[str],
                  episodes: dict[str, dict[str, Any]]) -> set[str]:
    """The speakers (agent ids) of the candidates ``ids`` that the query names, when the speaker
    match applies: hybrid relevance with a full-text search, ``speaker_match_weight`` > 0, and
    the query names some of the candidates' speakers and not others (naming every speaker, or
    none, tells no memory apart). Empty otherwise."""
    if cfg.relevance_signal != "hybrid" or not searched_text or cfg.speaker_match_weight <= 0:
        return set()
    agents = {str(episodes[i].get("agent_id") or "") for i in ids}
    named = named_speakers(text, agents)
    return named if len(named) < len(agents) else set()


def speaker_free_ahead(store: EpisodeStore, embedder: Embedder, cfg: WorldGraphConfig, tenant_id: str, text: str,
                       opts: RecallOptions) -> Ahead | None:
    """The speaker-free query's embedding, started on another thread before the candidates are
    known, so that it runs beside the query's own embedding (on a machine with a free core the
    recall then waits for one model run instead of two; the CPU is the same). Which speakers the
    query names is only known from the candidates (``speaker_names``), so it is guessed from the
    tenant's agents (at most ``AHEAD_MAX_AGENTS``): the vector is used only when the candidates
    name the same speakers (``speaker_free_vector`` compares the texts), else it is embedded
    again as before. None: the speaker match cannot apply, or the query names none or every one."""
    if not (cfg.speaker_free_vector and cfg.relevance_signal == "hybrid" and opts.hybrid
            and cfg.fulltext_pool > 0 and cfg.speaker_match_weight > 0):
        return None
    agents = store.agent_ids(tenant_id, AHEAD_MAX_AGENTS + 1)
    if len(agents) > AHEAD_MAX_AGENTS:
        return None
    named = named_speakers(text, agents)
    if not named or len(named) == len(agents):
        return None
    rest = _speaker_free_text(text, named)
    if rest is None:
        return None
    return Ahead(rest, _AHEAD_POOL.submit(embed_query, embedder, [rest]))


def speaker_free_vector(embedder: Embedder, text: str, named: set[str], ahead: Ahead | None = None
                        ) -> np.ndarray | None:
    """The embedding of ``text`` without the names of the ``named`` speakers (relevance.without_speakers),
    for the vector part of the text relevance (and the speaker-free candidates); None when nothing
    but the names is left. One more query embedding (``ahead``'s, when it embedded this same text)."""
    rest = _speaker_free_text(text, named)
    if rest is None:
        return None
    vec = ahead.vector(embedder) if ahead is not None and ahead.text == rest else None
    if vec is None:
        vec = check_embeddings(embed_query(embedder, [rest]), 1, embedder.dimensions)[0]
    return vec


def _speaker_free_text(text: str, named: set[str]) -> str | None:
    """The query without the names of the ``named`` speakers; None when nothing but them is left."""
    rest = without_speakers(text, named)
    return rest if any(ch.isalnum() for ch in rest) else None


def question_pairs(store: EpisodeStore, tenant_id: str, cfg: WorldGraphConfig, ids: list[str], pos: dict[str, int],
               episodes: dict[str, dict[str, Any]], links: dict[str, tuple[str | None, str | None]] | None = None
               ) -> tuple[np.ndarray | None, list[tuple[int, int]] | None]:
    """For the question and answer parts (relevance.py): the share of each candidate conversation
    turn's text that asks (0 for other memories), and the (question, answer) pairs among the
    candidates: the next turn of a question's session, said by another speaker. ``links``: the
    session neighbours the neighbour lift (every candidate's) or the reply part (every candidate
    turn's) already read; else only the questions' are read (one store query), and only when
    answer_weight > 0."""
    if cfg.question_weight <= 0 and cfg.answer_weight <= 0:
        return None, None
    asks = np.array([question_share(str(episodes[i].get("task_description") or ""))
                     if episodes[i].get("task_type") == CONVERSATION_TASK_TYPE else 0.0 for i in ids])
    asking = [i for i, share in zip(ids, asks) if share > 0]
    if not asking or cfg.answer_weight <= 0:
        return asks, None
    if links is None:
        links = store.session_neighbors(tenant_id, asking)
    answers = []
    for q in asking:
        nxt = links.get(q, (None, None))[1]
        if nxt is not None and nxt in pos and episodes[nxt].get("agent_id") != episodes[q].get("agent_id"):
            answers.append((pos[q], pos[nxt]))
    return asks, answers


def sentence_gains(embedder: Embedder, cfg: WorldGraphConfig, tenant_id: str, ids: list[str],
                   episodes: dict[str, dict[str, Any]], relevance: np.ndarray, cosine: np.ndarray,
                   qvec: np.ndarray) -> np.ndarray:
    """The optional sentence stage (sentences.py): the ``sentence_head`` candidates of highest text
    ``relevance`` that are conversation turns of several sentences gain the sentence part. Returns
    each candidate's gain (aligned with ``ids``; 0 for the others): how much better its best
    sentence matches ``qvec`` than its ``cosine``, for relevance.with_sentences."""
    head = [int(n) for n in np.argsort(-relevance, kind="stable")[:cfg.sentence_head]]
    turns = []
    for n in head:
        ep = episodes[ids[n]]
        turns.append(sentence_texts(str(ep.get("agent_id") or ""), str(ep.get("task_description") or ""))
                     if ep.get("task_type") == CONVERSATION_TASK_TYPE else [])
    gain = np.zeros(len(ids))
    for n, best in zip(head, best_sentence_cosines(embedder, tenant_id, qvec, turns)):
        if best is not None:
            gain[n] = max(0.0, best - float(cosine[n]))
    return gain
