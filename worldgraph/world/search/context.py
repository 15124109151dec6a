"""``context``: one prompt-ready block of what the agent knows that matters for a query.

The block is lines of plain text, each citing the record it says (its id's first characters,
made longer where two cited ids share them; ``WorldContext.citations`` has the whole ids):

    World model (current facts and rules, what actions did):
    [3f2a9c1d] the brass key is in the kitchen table
    [9d1e22b0] if the door is locked, then going outside fails
    Past episodes (most relevant first):
    [e7c04a5b] 2026-12-05 explorer-1 (explorer): kitchen round 4: open chest -> success

First the world's current facts, states, entities and rules, and what came after the actions the
query is about ("doing 'take key' moved the key from the table to the player", history that stays
true), in ``search_world``'s order (every
environment of the tenant, or ``env_name``'s), up to ``context_world_share`` of the budget; then
the most relevant past episodes (``recall_experiences`` with ``agent_role``) in compact form, one
line each (at most ``EPISODE_TOKENS``); then more world lines if the episodes left room. The
budget is counted in tokens of the embedder's own tokenizer (BERT's uncased WordPiece, the
vocabulary the local MiniLM models use, shipped with worldgraph), one more per line for its
newline, so ``tokens`` never passes ``max_tokens``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from worldgraph.errors import InvalidInputError
from worldgraph.memory.embedders.base import embed_query, embedder_name
from worldgraph.memory.embedders.catalog import BERT_UNCASED_VOCAB
from worldgraph.world.search.models import Citation, WorldContext, WorldHit

MAX_TOKENS = 100_000
EPISODE_TOKENS = 80  # at most this many tokens of one episode's line
WORLD_HEADER = "World model (current facts and rules, what actions did):"
EPISODE_HEADER = "Past episodes (most relevant first):"
ID_CHARS = 8  # characters of an id a line cites (more where two cited ids share them)
MIN_WORDS = 8  # tokens after its id a line cut to fit a tiny budget keeps, or it goes without the header

_TOKENIZER: Any = None
_TOKENIZER_LOCK = threading.Lock()


def tokenizer() -> Any:
    """BERT's uncased WordPiece over the vocabulary worldgraph ships (no truncation, no special tokens)."""
    global _TOKENIZER
    with _TOKENIZER_LOCK:
        if _TOKENIZER is None:
            from tokenizers import BertWordPieceTokenizer

            _TOKENIZER = BertWordPieceTokenizer(str(BERT_UNCASED_VOCAB), lowercase=True, strip_accents=None,
                                                clean_text=True, handle_chinese_chars=True)
            _TOKENIZER.no_truncation()
        return _TOKENIZER


def token_ends(lines: list[str]) -> list[list[int]]:
    """Per line (without the newline), where each of its tokens ends (a character offset in the
    line): the lines encoded as one text, each token given to the line its characters are in (a
    newline splits words, so no token spans two lines). One call and one thread:
    ``encode_batch`` spreads a batch over a thread pool whose threads, on a loaded machine, cost
    more than they save."""
    if not lines:
        return []
    starts = np.cumsum([0] + [len(line) + 1 for line in lines[:-1]])
    offsets = np.asarray(tokenizer().encode("\n".join(lines), add_special_tokens=False).offsets,
                         dtype=np.int64).reshape(-1, 2)
    owner = np.searchsorted(starts, offsets[:, 0], side="right") - 1
    bounds = np.searchsorted(owner, np.arange(len(lines) + 1), side="left")
    ends = offsets[:, 1] - starts[owner]
    return [ends[bounds[i]:bounds[i + 1]].tolist() for i in range(len(lines))]


def count_tokens(lines: list[str]) -> list[int]:
    """Tokens of each line (without the newline), as ``token_ends`` gives them."""
    return [len(t) for t in token_ends(lines)]


class OnceEmbedder:
    """An embedder that embeds each query text once (``context`` searches the world and recalls
    episodes with the same query); anything else goes to the embedder it wraps."""

    def __init__(self, embedder: Any) -> None:
        self.inner = embedder
        self.dimensions = int(embedder.dimensions)
        self.name = embedder_name(embedder)  # the wrapped one's: caches keyed by it stay shared
        self._queries: dict[tuple[str, ...], Any] = {}

    def embed(self, texts: list[str]) -> Any:
        return self.inner.embed(texts)

    def embed_query(self, texts: list[str]) -> Any:
        key = tuple(texts)
        if key not in self._queries:
            self._queries[key] = embed_query(self.inner, list(texts))
        return self._queries[key]


def check_budget(max_tokens: Any) -> int:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS:
        raise InvalidInputError("max_tokens", f"must be an integer from 1 to {MAX_TOKENS}", max_tokens)
    return max_tokens


def short_ids(ids: list[str]) -> dict[str, str]:
    """Each id's first ``ID_CHARS`` characters, longer where two of ``ids`` share them."""
    out: dict[str, str] = {}
    n = ID_CHARS
    pending = list(dict.fromkeys(ids))
    while pending:
        starts: dict[str, list[str]] = {}
        for i in pending:
            starts.setdefault(i[:n], []).append(i)
        pending = []
        for start, group in starts.items():
            if len(group) == 1 or n >= max(len(g) for g in group):
                for g in group:
                    out[g] = g if len(group) > 1 else start
            else:
                pending.extend(group)
        n += 4
    return out


def episode_line(ep: Any) -> str:
    """An episode in one line: date, agent, task, approach, outcome, learnings."""
    get = ep.get if hasattr(ep, "get") else lambda k, d=None: getattr(ep, k, d)
    when = str(get("timestamp") or "")[:10]
    who = str(get("agent_id") or "")
    role = get("agent_role")
    parts = [f"{when} {who}{f' ({role})' if role else ''}:".strip(), str(get("task_description") or "")]
    approach = get("approach_taken")
    if approach and str(approach) not in parts[1]:
        parts.append(f"| approach: {approach}")
    outcome = str(get("outcome") or "")
    error = get("error_message")
    parts.append(f"-> {outcome}{f' ({error})' if error else ''}")
    learnings = get("learnings") or []
    if learnings:
        parts.append("| learned: " + "; ".join(str(x) for x in learnings))
    return " ".join(" ".join(p.split()) for p in parts if p)


def fit(line: str, ends: list[int], start: int, budget: int) -> str | None:
    """``line`` cut at a word so that its part from ``start`` takes at most ``budget`` tokens
    (' ...' marks a cut), placed by ``ends`` (``token_ends`` of the line); None: it fits whole."""
    body = [e for e in ends if e > start]
    if len(body) <= budget:
        return None
    end = body[max(budget - 2, 0)]  # room for the ellipsis
    head, part = line[:start], line[start:end]
    return head + (part.rsplit(" ", 1)[0] if " " in part else part) + " ..."


def squeeze(line: str, room: int) -> str | None:
    """``line`` cut at a token so that it takes at most ``room`` tokens, ' ...' marking the cut
    (None when not even its first token and the mark fit)."""
    enc = tokenizer().encode(line, add_special_tokens=False)
    if len(enc.ids) <= room:
        return line
    keep = room - 3  # ' ...' is three tokens
    while keep >= 1:
        cut = line[:enc.offsets[keep - 1][1]] + " ..."
        if count_tokens([cut])[0] <= room:
            return cut
        keep -= 1
    return None


def first_world_line(line: str, header: int, max_tokens: int) -> tuple[str, bool] | None:
    """The most relevant world line when the world's share cannot hold it: whole with its header
    if the budget can, else cut to fit, under the header when the cut keeps ``MIN_WORDS`` tokens
    after the cited id, alone otherwise; (line, with header) or None when nothing fits."""
    prefix = line[:line.index("]") + 1]
    cited = count_tokens([prefix])[0]
    room = max_tokens - (header + 1) - 1
    if room - cited >= MIN_WORDS or count_tokens([line])[0] <= room:
        cut = squeeze(line, room)
        if cut is not None:
            return cut, True
    cut = squeeze(line, max_tokens - 1)
    says = cut is not None and cut[len(prefix):].removesuffix(" ...").strip()  # a word past the id
    return (cut, False) if cut is not None and says else None


def build_context(hits: list[tuple[WorldHit, bool]], episodes: list[Any], max_tokens: int,
                  world_share: float) -> WorldContext:
    """The block of the world's hits (in rank order those that hold now, and those that say what
    came after an action: true of that moment) and the recalled episodes. The world's share is
    never empty while it has a line and ``world_share`` is above 0: when the share cannot hold the
    first line, that line takes what it needs of the budget, cut to fit a tiny one
    (``first_world_line``)."""
    world = [h for h, history in hits if h.current or history]
    eps = [e for e in episodes if (e.get("episode_id") if hasattr(e, "get") else None)]
    short = short_ids([h.id for h in world] + [str(e["episode_id"]) for e in eps])
    w_lines = [f"[{short[h.id]}] {h.text}" for h in world]
    cited = [f"[{short[str(e['episode_id'])]}] " for e in eps]
    e_lines = [head + episode_line(e) for head, e in zip(cited, eps)]
    # one pass of the tokenizer over every line; an episode's line longer than EPISODE_TOKENS
    # after its id is cut, and only the lines cut are counted again
    ends = token_ends([WORLD_HEADER, EPISODE_HEADER, *w_lines, *e_lines])
    costs = [len(x) for x in ends]
    header, w_cost, e_cost = costs[:2], costs[2:2 + len(w_lines)], costs[2 + len(w_lines):]
    cut = {i: short_line for i, (head, line, te) in enumerate(zip(cited, e_lines, ends[2 + len(w_lines):]))
           if (short_line := fit(line, te, len(head), EPISODE_TOKENS)) is not None}
    for i, n in zip(cut, count_tokens(list(cut.values()))):
        e_lines[i], e_cost[i] = cut[i], n
    used = 0
    taken_w: list[int] = []
    taken_e: list[int] = []

    def take(cost: list[int], taken: list[int], start: int, head: int, limit: int) -> int:
        """Lines from ``start`` while they fit ``limit`` (``head``: their header's tokens, paid
        with the first; -1: no header); returns the first not taken."""
        nonlocal used
        i = start
        while i < len(cost):
            extra = cost[i] + 1 + (head + 1 if not taken else 0)
            if used + extra > limit:
                break
            used += extra
            taken.append(i)
            i += 1
        return i

    headed = True
    nxt = take(w_cost, taken_w, 0, header[0], int(max_tokens * world_share))
    if not taken_w and w_lines and world_share > 0:
        first = first_world_line(w_lines[0], header[0], max_tokens)
        if first is not None:
            w_lines[0], headed = first
            w_cost[0] = count_tokens([w_lines[0]])[0]
            nxt = take(w_cost[:1], taken_w, 0, header[0] if headed else -1, max_tokens)
            nxt = nxt if headed else len(w_lines)  # a line alone: the budget holds nothing more
    if headed:
        take(e_cost, taken_e, 0, header[1], max_tokens)
        take(w_cost, taken_w, nxt, header[0], max_tokens)
    lines: list[str] = []
    citations: list[Citation] = []
    if taken_w:
        if headed:
            lines.append(WORLD_HEADER)
        lines += [w_lines[i] for i in taken_w]
        citations += [Citation(id=world[i].id, kind=world[i].kind) for i in taken_w]
    if taken_e:
        lines.append(EPISODE_HEADER)
        lines += [e_lines[i] for i in taken_e]
        citations += [Citation(id=str(eps[i]["episode_id"]), kind="episode") for i in taken_e]
    text = "\n".join(lines)
    return WorldContext(text=text, citations=citations, tokens=used)


def context(search: Callable[[int], list[tuple[WorldHit, bool]]], recall: Callable[[int], list[Any]],
            max_tokens: Any, world_share: float) -> WorldContext:
    """``WorldModel.context`` once its arguments are checked: ``search(k)`` the world's hits,
    ``recall(limit)`` the episodes."""
    budget = check_budget(max_tokens)
    # enough to fill the budget, and no more (each hit is read from the store): a world line is
    # ~14 tokens, an episode's ~40 (at most EPISODE_TOKENS)
    hits = search(min(100, max(10, int(budget * world_share / 14) + 5)))
    episodes = recall(min(50, max(3, int(budget * (1 - world_share) / 40) + 2)))
    return build_context(hits, episodes, budget, world_share)
