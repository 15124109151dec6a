"""LoCoMo for turn-level retrieval: the data, the measure, the baselines and an embedding cache.

Used by ``recall_quality.py``. The data set is ``../shared/datasets/locomo-dev.json`` (see its
README: CC BY-NC 4.0, read from there, never copied into this repo).

- ``load(path)``: conversations as sessions of turns (speaker, text, dia_id, session date) and
  their category 1-4 questions with evidence dia_ids (malformed entries split on ``;``).
- ``recall_at(ranked, evidence, k)``: the share of a question's evidence turns in the top k.
- ``BM25``: Okapi BM25 (k1 = 1.2, b = 0.75, Lucene's idf ``ln(1 + (N - n + 0.5) / (n + 0.5))``)
  over lower-cased ``\\w+`` tokens, no stemming, no stop-word list; a dozen lines, so the
  baseline is exactly what is written here.
- ``CachedEmbedder``: wraps an embedder; vectors are kept on disk (SQLite) keyed by the
  embedder's name and the text, so a rerun embeds nothing it embedded before.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sqlite3
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_TOKEN = re.compile(r"\w+")
_SESSION_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*(am|pm)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.I)
_MONTHS = {m: i for i, m in enumerate(["january", "february", "march", "april", "may", "june", "july", "august",
                                       "september", "october", "november", "december"], start=1)}


@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str
    session: str
    timestamp: datetime


@dataclass
class Question:
    question: str
    category: int
    evidence: list[str]


@dataclass
class Conversation:
    sample_id: str
    sessions: dict[str, list[Turn]]  # session name -> turns in order
    questions: list[Question] = field(default_factory=list)

    @property
    def turns(self) -> list[Turn]:
        return [t for turns in self.sessions.values() for t in turns]


def session_date(text: str) -> datetime:
    """ "1:56 pm on 8 May, 2023" -> 2023-05-08 13:56 UTC."""
    m = _SESSION_DATE.search(text)
    if m is None:
        raise ValueError(f"unrecognised session date {text!r}")
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    return datetime(int(year), _MONTHS[month.lower()], int(day), h, int(minute), tzinfo=timezone.utc)


def load(path: str | Path) -> list[Conversation]:
    out = []
    for sample in json.loads(Path(path).read_text()):
        conv = sample["conversation"]
        names = sorted((k for k in conv if re.fullmatch(r"session_\d+", k) and conv[k]),
                       key=lambda k: int(k.split("_")[1]))
        sessions = {}
        for name in names:
            ts = session_date(conv[f"{name}_date_time"])
            sessions[name] = [Turn(t["dia_id"], t["speaker"], t["text"], name, ts) for t in conv[name]]
        questions = []
        for qa in sample["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            evidence = [e.strip() for ev in qa.get("evidence", []) for e in str(ev).split(";") if e.strip()]
            questions.append(Question(qa["question"], int(qa["category"]), evidence))
        out.append(Conversation(sample["sample_id"], sessions, questions))
    return out


def recall_at(ranked: list[str], evidence: list[str], k: int) -> float:
    """Share of ``evidence`` (dia_ids) among the first ``k`` of ``ranked``."""
    if not evidence:
        return 0.0
    top = set(ranked[:k])
    return sum(1 for e in evidence if e in top) / len(evidence)


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class BM25:
    """Okapi BM25 over a fixed list of documents."""

    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.tfs = [Counter(tokens(d)) for d in docs]
        self.lens = np.array([sum(tf.values()) for tf in self.tfs], dtype=np.float64)
        self.avg = float(self.lens.mean()) if len(docs) else 0.0
        df: Counter[str] = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(docs)
        self.idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}

    def scores(self, query: str) -> np.ndarray:
        out = np.zeros(len(self.tfs))
        norm = self.k1 * (1 - self.b + self.b * self.lens / (self.avg or 1.0))
        for t in set(tokens(query)):
            idf = self.idf.get(t)
            if idf is None:
                continue
            tf = np.array([d.get(t, 0) for d in self.tfs], dtype=np.float64)
            out += idf * tf * (self.k1 + 1) / (tf + norm)
        return out


def rrf(rankings: list[list[int]], k: int = 60) -> list[int]:
    """Reciprocal rank fusion of full rankings (indices), best first."""
    score: dict[int, float] = {}
    for ranking in rankings:
        for r, i in enumerate(ranking):
            score[i] = score.get(i, 0.0) + 1.0 / (k + r + 1)
    return sorted(score, key=lambda i: -score[i])


class CachedEmbedder:
    """An embedder whose vectors are cached on disk by (embedder name, text).

    ``caching = False`` passes every call straight to the wrapped embedder (used while recall
    is timed, so the measured latency includes the query embedding).
    """

    def __init__(self, inner: Any, path: str | Path) -> None:
        self.inner = inner
        self.dimensions = int(inner.dimensions)
        self.name = getattr(inner, "name", None) or type(inner).__name__
        self.caching = True
        self._lock = threading.Lock()
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS vec (key TEXT PRIMARY KEY, v BLOB NOT NULL)")

    def _key(self, text: str) -> str:
        return hashlib.sha256(f"{self.name}\x00{self.dimensions}\x00{text}".encode()).hexdigest()

    def embed_query(self, texts: list[str]) -> np.ndarray:
        """Query vectors (a model with a query prefix embeds queries apart; cached apart)."""
        fn = getattr(self.inner, "embed_query", None)
        if not callable(fn):
            return self.embed(texts)
        return self._cached(list(texts), fn, "query\x00")

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._cached(list(texts), self.inner.embed, "")

    def _cached(self, texts: list[str], fn: Any, kind: str) -> np.ndarray:
        if not self.caching:
            return np.asarray(fn(texts), dtype=np.float32)
        with self._lock:  # one connection, and recall embeds from two threads at once
            return self._cached_locked(texts, fn, kind)

    def _cached_locked(self, texts: list[str], fn: Any, kind: str) -> np.ndarray:
        keys = [self._key(kind + t) for t in texts]
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            rows = self._db.execute(f"SELECT key, v FROM vec WHERE key IN ({','.join('?' * len(chunk))})", chunk)
            found.update((k, np.frombuffer(v, dtype=np.float32)) for k, v in rows)
        missing = list(dict.fromkeys(t for t, k in zip(texts, keys) if k not in found))
        if missing:
            vecs = np.asarray(fn(missing), dtype=np.float32)
            rows = [(self._key(kind + t), v.tobytes()) for t, v in zip(missing, vecs)]
            self._db.executemany("INSERT OR REPLACE INTO vec VALUES (?, ?)", rows)
            self._db.commit()
            found.update((k, np.frombuffer(v, dtype=np.float32)) for k, v in rows)
        return np.stack([found[k] for k in keys]) if keys else np.zeros((0, self.dimensions), np.float32)
