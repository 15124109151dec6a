"""``search_world``'s hits as a model (the MCP tool) or a person (``worldgraph search-world``) can
read them: one line per hit -- its kind, id, environment, whether it holds now (or when it
stopped), its confidence and its sentence -- then its first evidence and the facts around it,
cut short. The full records (every evidence, all ten neighbours) are the JSON answer."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["hits_text"]

EVIDENCE_CHARS = 160  # of the first evidence shown
NEIGHBOURS_SHOWN = 3  # facts around a hit shown (of at most 10)


def hits_text(hits: Iterable[Any], query: str) -> str:
    """The hits (``WorldHit`` objects or their dicts), best first, as lines of text."""
    rows = [h.model_dump() if hasattr(h, "model_dump") else dict(h) for h in hits]
    if not rows:
        return (f"no world record matches {query!r} (the world graph may be empty, or the environment's new facts "
                "not indexed yet)")
    lines = [f"{len(rows)} world record(s) for {query!r}, best first:"]
    for n, h in enumerate(rows, 1):
        lines.append(f"{n}. {h['kind']} {h['id']} ({h['env_name']}) {_when(h)}, confidence "
                     f"{float(h.get('confidence') or 0):.2f}: {h['text']}")
        evidence = [e for e in h.get("evidence") or [] if e]
        if evidence:
            more = f" (+{len(evidence) - 1} more)" if len(evidence) > 1 else ""
            lines.append(f"   evidence: {_cut(evidence[0], EVIDENCE_CHARS)!r}{more}")
        around = [nb["text"] for nb in h.get("neighbourhood") or []]
        if around:
            more = f" (+{len(around) - NEIGHBOURS_SHOWN} more)" if len(around) > NEIGHBOURS_SHOWN else ""
            lines.append(f"   around: {'; '.join(around[:NEIGHBOURS_SHOWN])}{more}")
    return "\n".join(lines)


def _when(h: Mapping[str, Any]) -> str:
    if h.get("current"):
        return "current"
    return f"closed {h['valid_to']}" if h.get("valid_to") else "not current"


def _cut(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
