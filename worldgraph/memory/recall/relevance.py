"""Text relevance: how well a memory matches the query's words and meaning, in [0, 1].

The relevance formula (scoring.py) takes one semantic term. With ``relevance_signal="vector"`` it
is the cosine similarity, as the original formula has it. With ``"hybrid"`` it fuses everything recall
fetched:

    relevance = (1 - w) x vector + w x bm25 + speaker match - question + answer + reply
                + neighbour lift + sentence part,
                in [0, 1]

- ``vector`` = the cosine similarity, floored at 0 (an absolute scale: it does not depend on
  the other candidates);
- ``bm25`` = the memory's BM25 score over the best BM25 score of the query's full-text hits
  (0 for a memory the full-text search did not return), so the best word match is 1 (BM25
  scores have no fixed scale: they grow with the query's length and the words' rarity);
- ``w`` = ``hybrid_text_weight``;
- speaker match = ``speaker_match_weight`` for a memory said by a person the query names
  (``"What do Melanie's kids like?"``: Melanie's own turns), when the query names some of the
  candidates' speakers and not others (it then says whose memories are meant); with
  ``speaker_free_vector`` the cosine of ``vector`` is then taken with the query without those
  names (``without_speakers``: "What do kids like?"), so that it ranks the person's memories by
  what they say instead of by the name every one of them carries;
- question = ``question_weight`` x the share of a conversation turn's text that asks
  (``question_share``): a turn that asks ("What are their names?") says little, yet it reads
  like the query and shares its words, so it came above the turns that answer it;
- answer = ``answer_weight`` x the question's share x the question's fused relevance, for the
  turn that follows a question among the candidates in its session, said by another speaker (its
  answer: "Luna and Oliver!"): a question that matches the query passes its match to its answer;
- neighbour lift = ``neighbor_weight`` x the fused relevance of the memory's best session
  neighbour (the turn before or after it) among the candidates: an answer that follows a
  question matching the query well is lifted with it;
- reply part = (1 - w) x how much better a conversation turn matches the query once the vector
  of its reply (the next turn of its session, when that is a candidate too) is mixed into its
  own, ``reply_context`` x the reply's: a reply often says what it replies to ("Congrats on your
  fourth tournament!"), so it confirms what a short or many-topic turn was about (``reply_gains``);
- sentence part (an optional stage, ``sentence_head`` > 0: sentences.py) = ``sentence_weight`` x
  how much better a conversation turn's best sentence matches the query than the whole turn.

Pure functions over arrays, so tests can pin the numbers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from worldgraph.config import WorldGraphConfig
from worldgraph.memory.cosine import cosine_to


@dataclass
class TextRelevance:
    """Per candidate (aligned arrays): the relevance and its parts."""

    relevance: np.ndarray
    vector: np.ndarray  # (1 - w) x vector evidence
    bm25: np.ndarray  # w x normalised BM25
    neighbor: np.ndarray  # the neighbour lift
    speaker: np.ndarray  # the speaker match
    question: np.ndarray  # the question part, subtracted: 0 or negative
    answer: np.ndarray  # the answer part
    reply: np.ndarray  # the reply part
    sentence: np.ndarray | None = None  # the sentence part (the optional stage: with_sentences)


def text_relevance(
    cosine: np.ndarray,
    bm25: np.ndarray,
    bm25_top: float,
    neighbors: list[tuple[int | None, int | None]] | None,
    cfg: WorldGraphConfig,
    searched_text: bool = True,
    named: np.ndarray | None = None,
    asks: np.ndarray | None = None,
    answers: list[tuple[int, int]] | None = None,
    replies: np.ndarray | None = None,
) -> TextRelevance:
    """``cosine`` and ``bm25`` (0 where there is no full-text hit) per candidate; ``bm25_top``:
    the best BM25 score of the query's hits (whether or not that memory is still a candidate);
    ``neighbors[i]``: the candidate indices of i's previous / next session episode (or None).
    ``searched_text=False`` (no full-text search ran: ``hybrid=False``) leaves the cosine alone,
    as with ``"vector"``; a search that matched nothing is evidence, and weighs in as 0.
    ``named[i]``: the query names candidate i's speaker (``named_speakers``); the match counts
    only when it tells candidates apart (some named, some not). ``asks[i]``: the share of
    candidate i's text that asks (``question_share``; 0 for a memory that is not a conversation
    turn); ``answers``: (question, answer) candidate index pairs, the answer being the next turn
    of the question's session, said by another speaker. ``replies[i]``: how much better
    candidate i matches the query with its reply's vector mixed in (``reply_gains``)."""
    cos = np.asarray(cosine, dtype=np.float64)
    n = cos.shape[0]
    if cfg.relevance_signal == "vector" or not searched_text:
        zeros = np.zeros(n)
        return TextRelevance(relevance=cos, vector=cos.copy(), bm25=zeros, neighbor=zeros.copy(), speaker=zeros.copy(),
                             question=zeros.copy(), answer=zeros.copy(), reply=zeros.copy())
    raw = np.asarray(bm25, dtype=np.float64)
    top = max(float(bm25_top), float(raw.max()) if n else 0.0)
    w = cfg.hybrid_text_weight
    vector = (1.0 - w) * np.clip(cos, 0.0, 1.0)
    lexical = w * (raw / top if top > 0 else np.zeros(n))
    speaker = np.zeros(n)
    if named is not None and cfg.speaker_match_weight > 0:
        hit = np.asarray(named, dtype=bool)
        if hit.any() and not hit.all():
            # capped so that the parts still add up to the relevance, at most 1
            speaker = np.minimum(cfg.speaker_match_weight * hit, 1.0 - (vector + lexical))
    fused = vector + lexical + speaker
    question = np.zeros(n)
    answer = np.zeros(n)
    if asks is not None and cfg.question_weight > 0:
        # at most the fused relevance itself, so the parts still add up to a relevance >= 0
        question = -np.minimum(cfg.question_weight * np.asarray(asks, dtype=np.float64), fused)
    if asks is not None and answers and cfg.answer_weight > 0:
        share = np.asarray(asks, dtype=np.float64)
        for q, a in answers:
            answer[a] = max(answer[a], cfg.answer_weight * share[q] * fused[q])
        answer = np.minimum(answer, 1.0 - (fused + question))
    reply = np.zeros(n)
    if replies is not None:
        # the vector part's own weight on the better cosine, capped so the relevance stays at most 1
        reply = np.maximum(0.0, np.minimum((1.0 - w) * np.clip(np.asarray(replies, dtype=np.float64), 0.0, None),
                                           1.0 - (fused + question + answer)))
    told = fused + question + answer + reply
    lift = np.zeros(n)
    if neighbors is not None and cfg.neighbor_weight > 0:
        for i, (prev, nxt) in enumerate(neighbors):
            best = max((fused[j] for j in (prev, nxt) if j is not None), default=0.0)
            lift[i] = cfg.neighbor_weight * best
    relevance = np.minimum(1.0, told + lift)
    return TextRelevance(relevance=relevance, vector=vector, bm25=lexical, neighbor=relevance - told,
                         speaker=speaker, question=question, answer=answer, reply=reply)


def reply_gains(vectors: np.ndarray, qvec: np.ndarray, replies: list[int | None], mix: float) -> np.ndarray:
    """Per candidate: how much better it matches ``qvec`` with its reply's vector mixed in, 0 if
    not at all or it has no reply: max(0, cos(qvec, v + ``mix`` x v_reply) - cos(qvec, v)), each
    vector scaled to length 1 first. ``replies[i]``: the row in ``vectors`` of candidate i's reply
    (the next turn of its session, itself a candidate), or None."""
    v = np.asarray(vectors, dtype=np.float64)
    n = v.shape[0]
    out = np.zeros(n)
    have = [(i, j) for i, j in enumerate(replies) if j is not None]
    if not have or n == 0:
        return out
    unit = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    q = np.asarray(qvec, dtype=np.float64)
    rows = np.array([i for i, _ in have])
    mixed = unit[rows] + mix * unit[np.array([j for _, j in have])]
    out[rows] = np.maximum(0.0, cosine_to(mixed, q) - cosine_to(unit[rows], q))
    return out


def with_sentences(parts: TextRelevance, gain: np.ndarray, cfg: WorldGraphConfig) -> TextRelevance:
    """``parts`` with the sentence part added: ``sentence_weight`` x ``gain[i]`` (how much better
    candidate i's best sentence matches the query than the whole of it: sentences.py), capped so
    that the relevance stays at most 1."""
    sentence = np.minimum(cfg.sentence_weight * np.clip(np.asarray(gain, dtype=np.float64), 0.0, None),
                          1.0 - parts.relevance)
    sentence = np.maximum(sentence, 0.0)
    return replace(parts, relevance=parts.relevance + sentence, sentence=sentence)


_SENTENCE = re.compile(r"[^.!?\u2026\u3002\uff01\uff1f]+[.!?\u2026\u3002\uff01\uff1f]*")
_ASKS = ("?", "\uff1f")  # a sentence that ends with a question mark (ASCII or full-width) asks
QUESTION_SHARE_CHARS = 4096  # a longer text is read from its start (a pasted document, not a turn)


def question_share(text: str) -> float:
    """The share of ``text``'s characters (in [0, 1]) in sentences that end with a question mark:
    1 for "What are their names?", 0.5 or so for "Ah, they're adorable! What are their names?",
    0 for a text that asks nothing. Only the first ``QUESTION_SHARE_CHARS`` characters are read,
    so that a recall over huge memories costs no more than over short ones."""
    text = text[:QUESTION_SHARE_CHARS]
    if "?" not in text and "\uff1f" not in text:  # most memories: no sentence to split
        return 0.0
    sentences = [s.strip() for s in _SENTENCE.findall(text)]
    total = sum(len(s) for s in sentences)
    if total == 0:
        return 0.0
    return sum(len(s) for s in sentences if s.endswith(_ASKS)) / total


def split_sentences(text: str) -> list[str]:
    """``text``'s sentences, line by line, stripped (empty ones left out); only the first
    ``QUESTION_SHARE_CHARS`` characters are read."""
    return [s for line in text[:QUESTION_SHARE_CHARS].splitlines()
            for s in (m.strip() for m in _SENTENCE.findall(line)) if s]


def in_window(timestamps: np.ndarray, start: float | None, end: float | None) -> np.ndarray:
    """Which memories fall inside the query's date window (bounds inclusive; None is open)."""
    ts = np.asarray(timestamps, dtype=np.float64)
    inside = np.ones(ts.shape[0], dtype=bool)
    if start is not None:
        inside &= ts >= start
    if end is not None:
        inside &= ts <= end
    return inside


_WORD = re.compile(r"\w+")


def named_speakers(query: str, speakers: Iterable[str]) -> set[str]:
    """The speakers (agent ids) ``query`` names: the whole id as words of the query ("agent 7",
    "Caroline Smith"), or its first word as a word of the query ("Caroline's" names "Caroline
    Smith"); case-insensitive, a first word of one letter never counts alone, nor does a one-letter id."""
    words = _WORD.findall(query.lower())
    said = " " + " ".join(words) + " "
    vocab = set(words)
    out = set()
    for sp in set(speakers):
        parts = _WORD.findall(sp.lower())
        if len("".join(parts)) < 2:  # a one-letter id ("a") reads as a word of any query
            continue
        if f" {' '.join(parts)} " in said or (len(parts[0]) > 1 and parts[0] in vocab):
            out.add(sp)
    return out


def without_speakers(query: str, speakers: Iterable[str]) -> str:
    """``query`` without the words of the named speakers' ids (``named_speakers``), possessive
    forms included: "What do Melanie's kids like?" -> "What do kids like?". Case-insensitive;
    whitespace collapsed. What is left may be empty (a query that is only a name)."""
    words = {w for sp in speakers for w in _WORD.findall(sp.lower()) if len(w) > 1}
    if not words:
        return " ".join(query.split())
    names = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    out = re.sub(rf"(?<!\w)(?:{names})(?:['\u2019]s?)?(?!\w)", " ", query, flags=re.IGNORECASE)
    return " ".join(out.split())
