"""``search_world``: hybrid search over a tenant's world records, ranked with what the store says now.

1. Candidates: the top ``world_search_pool`` rows of the world index by cosine with the query and
   the top ``world_search_pool`` by BM25 (``world_index.Snapshot``), in the asked environment (or
   every one of the tenant's).
2. Relevance, fused as recall fuses it (docs/architecture.md, "Recall", step 4):
   ``(1 - w) x cosine + w x BM25 / best BM25`` with ``w = hybrid_text_weight``.
3. The store, read now (``world_records``: the candidates' own records, by id): a record the store
   no longer holds is dropped; whether each is current or closed (and when), its confidence,
   evidence and source scenes come from it, never from the index.
4. Score (a record once, by its best row): the relevance, plus ``world_search_link_weight`` x the best relevance among the
   candidates the record links (a fact's two ends, a state's entity, a rule's nodes: a fact about
   the things the query names outranks the things themselves, which only say that they exist),
   plus ``world_search_action_weight`` when the query names the row's action word for word (a
   transition's, or the one a containment came after), plus ``world_search_form_weight`` for a
   fact of the kind the question's form asks for (``forms.py``: where X is, what C holds, what
   an action changed),
   minus ``world_search_closed_penalty`` for a record not valid at the asked moment (now, or
   ``as_of``: valid from at or before it and not closed by then), so current facts rank above
   closed ones (a row that says what came after an action is history, true of that moment:
   never penalised); with ``as_of``, a record made after that moment is left out.
5. The top ``k``, each with its neighbourhood: at most 10 current facts on the nodes it is or
   links, the most relevant first (``load_view`` of those nodes: only for the ``k`` hits, and
   not for ``context``, which shows none).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from worldgraph.clock import iso
from worldgraph.config import WorldGraphConfig
from worldgraph.errors import InvalidInputError
from worldgraph.kg.records import GraphView
from worldgraph.kg.store import GraphStore
from worldgraph.limits import check_query
from worldgraph.memory.embedders.base import check_embeddings, embed_query
from worldgraph.memory.embeddings import Embedder
from worldgraph.memory.index.world_index import Snapshot, WorldIndex
from worldgraph.names import check_env, require_environment
from worldgraph.world.search import forms
from worldgraph.world.search.models import Neighbour, WorldHit
from worldgraph.world.search.texts import is_history, record_id

MAX_K = 100
NEIGHBOURS = 10
EVIDENCE = 5  # evidence strings a hit carries (the newest)


@dataclass
class Candidate:
    row: int
    relevance: float
    record: dict[str, Any] | None = None
    score: float = 0.0
    valid: bool = True


def check_search(cfg: WorldGraphConfig, query: Any, env_name: Any, k: Any, as_of: Any) -> str | None:
    """The arguments of ``search_world`` (and ``context``'s query and environment): InvalidInputError
    naming the one that is wrong; returns ``as_of`` in the stored timestamp format."""
    check_query(query, cfg)
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("query", "must be a non-empty string: what to look for, in words", query)
    if env_name is not None:
        check_env(env_name)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidInputError("k", f"must be an integer from 1 to {MAX_K}", k)
    if as_of is None:
        return None
    if isinstance(as_of, str):
        try:
            as_of = datetime.fromisoformat(as_of.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError("as_of", "must be an ISO-8601 time (2026-12-05T08:00:00Z) or a datetime",
                                    as_of) from None
    if not isinstance(as_of, datetime):
        raise InvalidInputError("as_of", "must be an ISO-8601 time (2026-12-05T08:00:00Z) or a datetime", as_of)
    return iso(as_of)


def valid_at(record: dict[str, Any], at: str | None) -> bool:
    """Whether the record holds at ``at`` (None: now)."""
    if at is None:
        return record.get("valid_to") is None
    start, end = record.get("valid_from"), record.get("valid_to")
    return (start is None or str(start) <= at) and (end is None or str(end) > at)


def search_world(store: GraphStore, index: WorldIndex, embedder: Embedder, cfg: WorldGraphConfig,
                 ensure: Callable[[str, list[str] | None], None], tenant_id: str, query: str,
                 env_name: str | None = None, k: int = 10, as_of: Any = None,
                 neighbours: bool = True) -> list[tuple[WorldHit, bool]]:
    """``WorldModel.search_world`` once the tenant is checked (see the module doc), each hit with
    whether its row is history (what came after an action); ``ensure`` brings the index of the
    environments searched up to the store first; ``neighbours=False`` leaves the neighbourhoods
    empty (``context`` shows none)."""
    at = check_search(cfg, query, env_name, k, as_of)
    if env_name is not None:
        require_environment(store, tenant_id, env_name)
    envs = None if env_name is None else [env_name]
    ensure(tenant_id, envs)
    snap = index.snapshot(tenant_id)
    if snap is None:
        return []
    rows = snap.rows(envs)
    if len(rows) == 0:
        return []
    vector = check_embeddings(embed_query(embedder, [query]), 1, index.dimensions)[0]
    cands = candidates(snap, rows, vector, envs, query, cfg)
    asked = forms.form(query)
    relevance = node_relevance(snap, cands)
    # The store is read for the best candidates by their score before the penalty and the form's
    # preference (which raises the score of a row that may be of the kind asked by its weight):
    # more when a candidate left out could still pass the k-th hit.
    order = sorted(cands.values(), key=lambda c: (-c.score, c.row))
    most = [c.score + (cfg.world_search_form_weight if forms.may_prefer(
        asked, snap.kinds[c.row], is_history(snap.ids[c.row]), snap.links[c.row], relevance) else 0.0) for c in order]
    m = k + 24
    while True:
        views = read_records(store, tenant_id, snap, order[:m])
        ranked = score(snap, order[:m], views, at, cfg, asked, relevance)
        if m >= len(order) or (len(ranked) >= k and ranked[k - 1].score >= max(most[m:])):
            break
        m *= 2
    edges = by_node(snap, read_store(store, tenant_id, snap, ranked[:k]), ranked[:k]) if neighbours else {}
    return [(hit(snap, c, edges.get(snap.envs[c.row]), at, cands), is_history(snap.ids[c.row])) for c in ranked[:k]]


def words(text: str) -> str:
    """``text`` lower-cased, everything but letters and digits a space, its spaces single (so a
    quoted action, "'take key'", holds the words of ``take key``)."""
    return " " + " ".join(re.sub(r"[\W_]+", " ", text.lower()).split()) + " "


def names_action(query: str, said: str, action: str) -> bool:
    """Whether the query (``said``: its ``words``) names ``action`` word for word: an action of
    two words or more anywhere in it, a one-word action ("look") only in quotes."""
    if not action or words(action) not in said:
        return False
    return len(action.split()) > 1 or re.search(rf"['\"`]{re.escape(action)}['\"`]", query, re.I) is not None


def candidates(snap: Snapshot, rows: np.ndarray, vector: np.ndarray, envs: list[str] | None, query: str,
               cfg: WorldGraphConfig) -> dict[int, Candidate]:
    """Steps 1 and 2, and step 4 but the penalty: the candidate rows, their fused relevance and
    their score before the store is read (``Candidate.score``)."""
    pool = cfg.world_search_pool
    cos = snap.cosine(vector, envs)
    bm = snap.bm25(query, rows)
    picked = set(top(cos, pool))
    if bm.max(initial=0.0) > 0:
        picked |= {i for i in top(bm, pool) if bm[i] > 0}
    best = float(bm.max(initial=0.0)) or 1.0
    w = cfg.hybrid_text_weight
    out = {int(rows[i]): Candidate(int(rows[i]), float((1 - w) * cos[i] + w * bm[i] / best)) for i in picked}
    relevance = node_relevance(snap, out)
    said = words(query)
    for c in out.values():
        linked = max((relevance[n] for n in snap.links[c.row] if n in relevance), default=0.0)
        named = cfg.world_search_action_weight if names_action(query, said, snap.actions[c.row]) else 0.0
        c.score = c.relevance + cfg.world_search_link_weight * linked + named
    return out


def node_relevance(snap: Snapshot, cands: dict[int, Candidate]) -> dict[str, float]:
    """node id -> its relevance, for the entities and states among the candidates."""
    return {snap.ids[c.row]: c.relevance for c in cands.values() if snap.kinds[c.row] in ("entity", "state")}


def top(values: np.ndarray, n: int) -> list[int]:
    """Positions of the ``n`` largest values (any order)."""
    if len(values) <= n:
        return list(range(len(values)))
    return [int(i) for i in np.argpartition(-values, n - 1)[:n]]


def read_records(store: GraphStore, tenant_id: str, snap: Snapshot, cands: list[Candidate]) -> dict[str, GraphView]:
    """Step 3: per environment, the candidates' records."""
    wanted: dict[str, set[str]] = {}
    for c in cands:
        wanted.setdefault(snap.envs[c.row], set()).add(record_id(snap.ids[c.row]))
    return {env: store.world_records(tenant_id, env, sorted(ids)) for env, ids in wanted.items()}


def read_store(store: GraphStore, tenant_id: str, snap: Snapshot, cands: list[Candidate]) -> dict[str, GraphView]:
    """Step 5: per environment, the view of the nodes the hits are or link (their neighbourhoods)."""
    wanted: dict[str, set[str]] = {}
    for c in cands:
        ids = wanted.setdefault(snap.envs[c.row], set())
        if snap.kinds[c.row] in ("entity", "state"):
            ids.add(snap.ids[c.row])
        ids.update(snap.links[c.row])
    return {env: store.load_view(tenant_id, env, sorted(ids)) for env, ids in wanted.items()}


def record_of(view: GraphView | None, kind: str, rid: str) -> dict[str, Any] | None:
    if view is None:
        return None
    found: Any = view.rules.get(rid) if kind == "rule" else view.edges.get(rid) if kind == "fact" \
        else view.nodes.get(rid)
    return dict(found) if found is not None else None


def score(snap: Snapshot, cands: list[Candidate], views: dict[str, GraphView], at: str | None,
          cfg: WorldGraphConfig, asked: str | None = None, relevance: dict[str, float] | None = None) -> list[Candidate]:
    """Step 4's penalty and the form's preference (``asked``: the question's form; ``relevance``:
    the candidate nodes'): the candidates the store holds, with their final score, best first (a
    new list of copies: ``cands`` keep their score before both)."""
    out = []
    for c in (Candidate(x.row, x.relevance, score=x.score) for x in cands):
        key = snap.ids[c.row]
        c.record = record_of(views.get(snap.envs[c.row]), snap.kinds[c.row], record_id(key))
        if c.record is None:
            continue  # forgotten, or replaced by an import, since the row was written
        if at is not None and c.record.get("valid_from") is not None and str(c.record["valid_from"]) > at:
            continue  # not made yet at that moment
        # a row saying what came after an action is history: true of that moment, whatever holds
        # now; it loses only world_search_history_penalty when its record no longer holds
        c.valid = valid_at(c.record, at)
        penalty = 0.0 if c.valid else cfg.world_search_history_penalty if is_history(key) \
            else cfg.world_search_closed_penalty
        c.score -= penalty
        if forms.preferred(asked, snap.kinds[c.row], c.record, snap.texts[c.row], is_history(key), c.valid,
                           relevance or {}):
            c.score += cfg.world_search_form_weight
        out.append(c)
    out.sort(key=lambda c: (-c.score, snap.ids[c.row]))
    seen: set[str] = set()
    best = []
    for c in out:  # a record once, by its best row; a sentence once, by its best record
        rid, text = record_id(snap.ids[c.row]), snap.texts[c.row]
        if rid not in seen and text not in seen:
            seen.update((rid, text))
            best.append(c)
    return best


def hit_nodes(snap: Snapshot, c: Candidate) -> set[str]:
    """The nodes a hit is or links (its neighbourhood is the facts on them)."""
    rid = record_id(snap.ids[c.row])
    return set(snap.links[c.row]) | ({rid} if snap.kinds[c.row] in ("entity", "state") else set())


def by_node(snap: Snapshot, views: dict[str, GraphView], hits: list[Candidate]) -> dict[str, dict[str, list[Any]]]:
    """Per environment, the edges (but episodic ones) on the hits' nodes, by node."""
    out: dict[str, dict[str, list[Any]]] = {}
    for env, view in views.items():
        wanted = set().union(*(hit_nodes(snap, c) for c in hits if snap.envs[c.row] == env))
        found: dict[str, list[Any]] = {}
        for e in view.edges.values():
            src, dst = str(e.get("src_id")), str(e.get("dst_id"))
            if (src in wanted or dst in wanted) and e.get("relation") != "episodic":
                for end in {src, dst} & wanted:
                    found.setdefault(end, []).append(e)
        out[env] = found
    return out


def neighbourhood(snap: Snapshot, c: Candidate, edges: dict[str, list[Any]] | None,
                  cands: dict[int, Candidate], at: str | None) -> list[Neighbour]:
    """At most ``NEIGHBOURS`` facts valid at ``at`` on the nodes the hit is or links."""
    if edges is None:
        return []
    rid = record_id(snap.ids[c.row])
    found = {}
    for node in hit_nodes(snap, c):
        for e in edges.get(node, ()):
            eid = str(e["id"])
            row = snap.row_of.get(eid)
            if eid != rid and row is not None and valid_at(dict(e), at):
                relevance = cands[row].relevance if row in cands else 0.0
                found[eid] = (-relevance, -float(e.get("confidence") or 0.0), eid, snap.texts[row])
    return [Neighbour(id=eid, text=text) for _, _, eid, text in sorted(found.values())[:NEIGHBOURS]]


def hit(snap: Snapshot, c: Candidate, edges: dict[str, list[Any]] | None, at: str | None,
        cands: dict[int, Candidate]) -> WorldHit:
    rec = c.record or {}
    env = snap.envs[c.row]
    evidence = [str(x) for x in rec.get("evidence") or []][-EVIDENCE:]
    return WorldHit(kind=snap.kinds[c.row], id=record_id(snap.ids[c.row]), env_name=env, text=snap.texts[c.row],
                    current=rec.get("valid_to") is None, valid_from=rec.get("valid_from"),
                    valid_to=rec.get("valid_to"), confidence=float(rec.get("confidence") or 0.0),
                    evidence=evidence, source_scenes=[str(s) for s in rec.get("source_scenes") or []],
                    neighbourhood=neighbourhood(snap, c, edges, cands, at), score=round(c.score, 6))
