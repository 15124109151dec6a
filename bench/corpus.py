"""The synthetic episodes of the memory benchmarks: experiences, their vectors and queries.

Everything comes from fixed seeds, so two runs store the same episodes and ask the same queries;
only the timestamps are anchored to today (so "last 30 days" means the same thing whenever it
runs). See bench/README.md, "The data".
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import numpy as np

from worldgraph.memory.record import searchable_text, summarize

DIM = 384
DAY = 86400.0

ROLES = ["Finance", "Developer", "Support", "Sales", "Ops", "Analyst", "Legal", "Marketing"]
VERBS = ["reconcile", "migrate", "debug", "summarise", "forecast", "audit", "deploy", "triage", "draft",
         "classify", "optimise", "review", "escalate", "refactor", "visualise", "invoice"]
OBJECTS = ["inventory discrepancies", "quarterly revenue", "customer churn report", "payment gateway",
           "shipping delays", "database schema", "login failures", "marketing funnel", "vendor contracts",
           "support backlog", "pricing model", "cache invalidation", "sales pipeline", "tax filings",
           "onboarding flow", "data warehouse", "API rate limits", "refund requests", "ledger entries",
           "dashboard widgets", "SKU catalogue", "incident postmortem", "release notes", "cloud costs"]
DETAILS = ["for the EMEA region", "after the weekend outage", "with partial data", "under a tight deadline",
           "for a key account", "using last month's baseline", "across three systems", "for the audit committee",
           "with conflicting sources", "before the board meeting", "from the CSV export", "in the staging env"]
LEARNINGS = ["weighted average minimises variance", "check the timezone of every timestamp first",
             "ask for the raw export, not the summary", "retry idempotent calls with backoff",
             "small batches surface errors sooner", "validate totals against the ledger",
             "the physical count is the source of truth", "pin dependency versions before migrating",
             "write the rollback plan before deploying", "a chart with fewer series reads better"]


# ------------------------------------------------------------------------------------- data


class PrecomputedEmbedder:
    """Returns the vector prepared for each text: a dict lookup, so embedding costs ~nothing."""

    name = "bench-precomputed-384"
    dimensions = DIM

    def __init__(self) -> None:
        self.vectors: dict[str, np.ndarray] = {}
        self.fallback = np.zeros(DIM, dtype=np.float32)
        self.fallback[0] = 1.0
        self.misses = 0

    def register(self, exps: list[dict[str, Any]], vectors: np.ndarray) -> list[str]:
        """Learn the vector of each experience's text; returns the texts (to ``forget`` later)."""
        texts = [episode_text(e) for e in exps]
        self.vectors.update(zip(texts, vectors))
        return texts

    def forget(self, texts: list[str]) -> None:
        for t in texts:
            self.vectors.pop(t, None)

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            v = self.vectors.get(t)
            if v is None:
                self.misses += 1
                v = self.fallback
            out[i] = v
        return out


def unit_rows(a: np.ndarray) -> np.ndarray:
    return (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)


class Corpus:
    """N synthetic experiences whose vectors cluster around a few hundred topic centroids.

    Generated in chunks of ``CHUNK`` rows, each from its own seed, so a chunk can be made (or
    made again) on its own: a million experiences never need to be in memory at once
    (``batches``, ``vector_chunks``). ``experiences`` and ``embedder()`` materialise everything,
    for small runs and for callers that want the whole list.
    """

    CHUNK = 10_000

    def __init__(self, n: int, seed: int, topics: int = 300, anchor: float | None = None) -> None:
        rng = np.random.default_rng(seed)
        self.n = n
        self.seed = seed
        self.anchor = anchor if anchor is not None else _today_anchor()
        self.centroids = unit_rows(rng.standard_normal((topics, DIM)))
        # each topic has a fixed task type / object so texts and vectors agree (BM25 has signal too)
        self.topic_verb = rng.integers(0, len(VERBS), topics)
        self.topic_obj = rng.integers(0, len(OBJECTS), topics)
        self.topic_role = rng.integers(0, len(ROLES), topics)
        self._experiences: list[dict[str, Any]] | None = None

    @property
    def experiences(self) -> list[dict[str, Any]]:
        if self._experiences is None:
            self._experiences = [e for c in range(self.chunks) for e in self._chunk(c)[0]]
        return self._experiences

    def head(self, m: int) -> list[dict[str, Any]]:
        """The first ``m`` experiences (generating only the chunks they are in)."""
        out: list[dict[str, Any]] = []
        for c in range(self.chunks):
            if len(out) >= m:
                break
            out.extend(self._chunk(c)[0])
        return out[:m]

    @property
    def chunks(self) -> int:
        return -(-self.n // self.CHUNK)

    def _chunk_start(self, c: int) -> tuple[np.random.Generator, int, np.ndarray, np.ndarray]:
        """The chunk's generator, first row, topics and vectors (drawn first, so vectors alone are cheap)."""
        rng = np.random.default_rng([self.seed, 1, c])
        first = c * self.CHUNK
        m = min(self.n, first + self.CHUNK) - first
        topic = rng.integers(0, len(self.centroids), m)
        # cosine to the centroid ~0.8, between two episodes of one topic ~0.64
        noise = rng.standard_normal((m, DIM), dtype=np.float32) * np.float32(0.75 / np.sqrt(DIM))
        return rng, first, topic, unit_rows(self.centroids[topic] + noise)

    def vector_chunks(self) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, vectors) of every chunk, in order: the whole corpus, one chunk in memory."""
        for c in range(self.chunks):
            _, first, _, vectors = self._chunk_start(c)
            yield first, vectors

    def batches(self, batch: int, start: int = 0) -> Iterator[tuple[list[dict[str, Any]], np.ndarray]]:
        """(experiences, vectors) of rows ``start`` on, in batches of ``batch``, generated a chunk
        at a time (a resumed run starts where the stored rows end)."""
        exps: list[dict[str, Any]] = []
        vecs: list[np.ndarray] = []
        for c in range(start // self.CHUNK, self.chunks):
            e, v = self._chunk(c)
            skip = max(0, start - c * self.CHUNK)
            e, v = e[skip:], v[skip:]
            exps.extend(e)
            vecs.append(v)
            stacked = np.concatenate(vecs)
            while len(exps) >= batch or (c == self.chunks - 1 and exps):
                yield exps[:batch], stacked[:batch]
                exps, stacked = exps[batch:], stacked[batch:]
            vecs = [stacked]

    def meta_chunks(self) -> Iterator[tuple[int, np.ndarray, dict[str, np.ndarray]]]:
        """(first row, vectors, columns) of every chunk, in order; the columns are what recall
        filters on, as arrays: ``role`` (index into ROLES), ``agent`` (0-7 within the role),
        ``canvas`` (-1: none), ``ts`` (unix seconds), ``success`` (bool). No experience is built."""
        for c in range(self.chunks):
            rng, first, topic, vectors = self._chunk_start(c)
            d = self._draws(rng, topic)
            yield first, vectors, {
                "role": np.where(d["own_role"], self.topic_role[topic], d["any_role"]),
                "agent": d["agent"], "canvas": np.where(d["on_canvas"], d["canvas"], -1),
                "ts": self.anchor - d["ages"], "success": d["ok"]}

    def _draws(self, rng: np.random.Generator, topic: np.ndarray) -> dict[str, np.ndarray]:
        """Every random draw of a chunk at once, in the order the chunk's rows use them
        (per-row generator calls made 1M rows take minutes)."""
        m = len(topic)
        agents_per_role = 8
        d: dict[str, np.ndarray] = {}
        d["ages"] = rng.uniform(0, 90 * DAY, m)
        d["own_role"] = rng.random(m) < 0.8
        d["any_role"] = rng.integers(0, len(ROLES), m)
        d["ok"] = rng.random(m) < 0.75
        d["agent"] = rng.integers(0, agents_per_role, m)
        d["detail"] = rng.integers(0, len(DETAILS), m)
        d["ticket"] = rng.integers(1000, 99999, m)
        d["team"] = rng.integers(0, len(ROLES), m)
        d["n_actions"] = rng.integers(1, 4, m)
        d["confidence"] = rng.beta(5, 2, m)
        d["violation"] = rng.random(m) >= 0.97
        d["human"] = rng.random(m) < 0.1
        d["n_learnings"] = rng.integers(1, 3, m)
        d["learn_a"] = rng.integers(0, len(LEARNINGS), m)
        # a second learning, different from the first
        d["learn_b"] = (d["learn_a"] + rng.integers(1, len(LEARNINGS), m)) % len(LEARNINGS)
        d["maturity"] = rng.integers(0, 4, m)
        d["on_canvas"] = rng.random(m) < 0.4
        d["canvas"] = rng.integers(0, 500, m)
        d["n_canvas_actions"] = rng.integers(0, 3, m)
        return d

    def _chunk(self, c: int) -> tuple[list[dict[str, Any]], np.ndarray]:
        rng, first, topic, vectors = self._chunk_start(c)
        m = len(topic)
        d = self._draws(rng, topic)
        ages, own_role, any_role, ok, agent = d["ages"], d["own_role"], d["any_role"], d["ok"], d["agent"]
        detail, ticket, team, n_actions, confidence = d["detail"], d["ticket"], d["team"], d["n_actions"], d["confidence"]
        violation, human, n_learnings, learn_a, learn_b = (d["violation"], d["human"], d["n_learnings"], d["learn_a"],
                                                           d["learn_b"])
        maturity, on_canvas, canvas, n_canvas_actions = d["maturity"], d["on_canvas"], d["canvas"], d["n_canvas_actions"]
        out: list[dict[str, Any]] = []
        for j in range(m):
            i = first + j
            t = int(topic[j])
            role = ROLES[int(self.topic_role[t]) if own_role[j] else int(any_role[j])]
            success = bool(ok[j])
            verb, obj = VERBS[int(self.topic_verb[t])], OBJECTS[int(self.topic_obj[t])]
            exp: dict[str, Any] = {
                "episode_id": self.episode_id(i),
                "agent_id": f"{role.lower()}-{int(agent[j])}",
                "agent_role": role,
                "task_type": f"{verb}_{obj.split()[0].lower()}",
                "task_description": f"{verb.capitalize()} {obj} {DETAILS[int(detail[j])]} (#{i})",
                "input_summary": f"Ticket {int(ticket[j])}: {obj} flagged by {ROLES[int(team[j])]} team",
                "approach_taken": f"{verb} step by step, then cross-check",
                "actions_taken": ["query source system", f"{verb} records", "write summary"][: int(n_actions[j])],
                "reasoning_chain": [{"step": "plan", "thought": f"start with the {obj}"},
                                    {"step": "act", "thought": f"{verb} and verify"}],
                "outcome": "success" if success else "failure",
                "error_message": None if success else "validation failed on 3 rows",
                "confidence_score": round(float(confidence[j]), 3),
                "constitutional_violations": ["data_privacy"] if violation[j] else [],
                "human_intervention_required": bool(human[j]),
                "learnings": [LEARNINGS[int(learn_a[j])], LEARNINGS[int(learn_b[j])]][: int(n_learnings[j])],
                "metacognitive_insights": {"what_worked": ["cross-checking"], "uncertainty": "low"},
                "maturity_level": ["student", "intern", "supervised", "autonomous"][int(maturity[j])],
                "timestamp": _iso(self.anchor - float(ages[j])),
            }
            if on_canvas[j]:
                exp["canvas_id"] = f"canvas-{int(canvas[j])}"
                exp["canvas_action_ids"] = [f"action-{i}-{k}" for k in range(int(n_canvas_actions[j]))]
            out.append(exp)
        return out, vectors

    def embedder(self) -> PrecomputedEmbedder:
        """An embedder that knows every experience's vector (materialises the corpus)."""
        emb = PrecomputedEmbedder()
        for c in range(self.chunks):
            exps, vectors = self._chunk(c)
            emb.register(exps, vectors)
        return emb

    def queries(self, count: int, seed: int) -> list[tuple[str, np.ndarray, int]]:
        rng = np.random.default_rng(seed)
        out = []
        for q in range(count):
            t = int(rng.integers(0, len(self.centroids)))
            vec = unit_rows((self.centroids[t] + rng.standard_normal(DIM).astype(np.float32)
                             * np.float32(0.5 / np.sqrt(DIM)))[None, :])[0]
            text = f"how to {VERBS[int(self.topic_verb[t])]} {OBJECTS[int(self.topic_obj[t])]} q{q}"
            out.append((text, vec, t))
        return out

    def exact_top(self, qvecs: np.ndarray, k: int) -> list[list[str]]:
        """Exact top-``k`` episode ids by cosine for each query: brute force over every vector,
        a chunk at a time (the ground truth for ANN recall; the library is not involved)."""
        q = unit_rows(np.asarray(qvecs, dtype=np.float32))
        best_sims = np.full((len(q), 0), -np.inf, dtype=np.float32)
        best_rows = np.zeros((len(q), 0), dtype=np.int64)
        for first, vectors in self.vector_chunks():
            sims = q @ vectors.T  # corpus vectors are unit rows: the dot product is the cosine
            sims = np.concatenate([best_sims, sims], axis=1)
            rows = np.concatenate([best_rows, np.broadcast_to(np.arange(first, first + vectors.shape[0]),
                                                              (len(q), vectors.shape[0]))], axis=1)
            keep = np.argpartition(-sims, min(k, sims.shape[1] - 1), axis=1)[:, :k]
            best_sims = np.take_along_axis(sims, keep, axis=1)
            best_rows = np.take_along_axis(rows, keep, axis=1)
        order = np.argsort(-best_sims, axis=1, kind="stable")
        ranked = np.take_along_axis(best_rows, order, axis=1)
        return [[self.episode_id(int(i)) for i in r] for r in ranked]

    def episode_id(self, i: int) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench/{self.seed}/{i}"))


def episode_text(exp: dict[str, Any]) -> str:
    """The text the service embeds for this experience (record.searchable_text of its episode)."""
    ep = dict(exp)
    ep["input_summary"] = summarize(exp.get("input_summary", ""))
    return searchable_text(ep)


def _today_anchor() -> float:
    now = datetime.now(timezone.utc)
    return datetime(now.year, now.month, now.day, tzinfo=timezone.utc).timestamp()


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()
