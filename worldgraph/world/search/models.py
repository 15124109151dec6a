"""What ``search_world`` and ``context`` return: ``WorldHit`` and ``WorldContext``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

HitKind = Literal["entity", "state", "fact", "rule"]


class Neighbour(BaseModel):
    """A current fact one hop around a hit: its id and its sentence."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str


class WorldHit(BaseModel):
    """One record of a world graph found by ``search_world``.

    ``current`` and ``valid_to`` are read from the store when the search runs (a fact a merge
    closed is not current from that moment); ``neighbourhood``: at most 10 current facts one hop
    around the record (edges touching its nodes); ``score``: what the hits are ranked by."""

    kind: HitKind
    id: str
    env_name: str
    text: str
    current: bool
    valid_from: str | None = None
    valid_to: str | None = None  # None while current; when it closed
    confidence: float = 0.0
    evidence: list[str] = Field(default_factory=list)
    source_scenes: list[str] = Field(default_factory=list)
    neighbourhood: list[Neighbour] = Field(default_factory=list)
    score: float = 0.0


class Citation(BaseModel):
    """A record a context block cites: the id (whole; the block cites its start) and its kind
    (``episode``, ``entity``, ``state``, ``fact``, ``rule``)."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: str


class WorldContext(BaseModel):
    """One prompt-ready block: ``text`` (``str(ctx)`` is it), the records it cites, and its size in
    tokens (the embedder's WordPiece tokenizer)."""

    text: str
    citations: list[Citation] = Field(default_factory=list)
    tokens: int = 0

    def __str__(self) -> str:
        return self.text
