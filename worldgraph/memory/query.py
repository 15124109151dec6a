"""Query preprocessing and entity extraction (seed recall step 1a and 1c).

``parse_query("what broke on canvas-123 last week")`` cleans the text and pulls out what the
query itself says about scope: canvas references (canvas-123), artifact references
(artifact-456), agent references (agent:bob, @bob), ISO dates and phrases such as "last week",
"yesterday", "since 2026-11-01", "between 2026-10-01 and 2026-10-31". Those become filters;
the rest of the text is what gets embedded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable
from datetime import datetime, time, timedelta, timezone

_CANVAS = re.compile(r"\bcanvas[-_](\w[\w-]*)", re.I)
_ARTIFACT = re.compile(r"\bartifact[-_](\w[\w-]*)", re.I)
_AGENT = re.compile(r"(?:\bagent[:=]\s*|(?<![\w@])@)([A-Za-z0-9][\w.-]*)", re.I)
_ISO = r"(\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?)"
_BETWEEN = re.compile(rf"\b(?:between|from)\s+{_ISO}\s+(?:and|to|until)\s+{_ISO}", re.I)
_SINCE = re.compile(rf"\b(?:since|after)\s+{_ISO}", re.I)
_BEFORE = re.compile(rf"\b(?:before|until)\s+{_ISO}", re.I)
_ON = re.compile(rf"\b(?:on\s+)?{_ISO}", re.I)
_LAST_N = re.compile(r"\b(?:in\s+the\s+)?(?:last|past)\s+(\d{1,4})\s+(day|week|month|hour)s?\b", re.I)
_RELATIVE = re.compile(r"\b(today|yesterday|(?:last|past|this)\s+(?:week|month|year))\b", re.I)
_SPECIAL = re.compile(r"[^\w\s\-:/.,'?!@#%&+]")
_SPACES = re.compile(r"\s+")


@dataclass
class ParsedQuery:
    text: str  # what to embed
    original: str
    canvas_ids: list[str] = field(default_factory=list)
    artifact_ids: list[str] = field(default_factory=list)
    agent_ids: list[str] = field(default_factory=list)
    start: datetime | None = None
    end: datetime | None = None
    date_phrases: list[str] = field(default_factory=list)

    def entities(self) -> dict[str, object]:
        return {
            "canvas_ids": self.canvas_ids,
            "artifact_ids": self.artifact_ids,
            "agent_ids": self.agent_ids,
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
            "date_phrases": self.date_phrases,
        }


def clean(text: str) -> str:
    """Collapse whitespace and drop control and decorative characters."""
    return _SPACES.sub(" ", _SPECIAL.sub(" ", text)).strip()


def _parse_iso(s: str) -> datetime:
    dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


def _day_bounds(d: datetime) -> tuple[datetime, datetime]:
    start = datetime.combine(d.date(), time.min, tzinfo=timezone.utc)
    return start, start + timedelta(days=1) - timedelta(microseconds=1)


def parse_query(query: str, now: datetime | None = None) -> ParsedQuery:
    """Clean ``query`` and extract its entities; the returned text has the filter phrases removed."""
    now = now or datetime.now(timezone.utc)
    text = clean(query)
    parsed = ParsedQuery(text=text, original=query)

    def take(pattern: re.Pattern[str], s: str, handle: Callable[[re.Match[str]], bool]) -> str:
        """Remove the matches ``handle`` accepts; a match it rejects (an impossible date such
        as 2026-13-45) stays in the text instead of vanishing without becoming a filter."""
        return pattern.sub(lambda m: " " if handle(m) else m.group(0), s)

    def between(m: re.Match[str]) -> bool:
        try:
            a, b = _parse_iso(m.group(1)), _parse_iso(m.group(2))
        except ValueError:
            return False
        parsed.start, parsed.end = a, _day_bounds(b)[1] if len(m.group(2)) == 10 else b
        parsed.date_phrases.append(m.group(0))
        return True

    def since(m: re.Match[str]) -> bool:
        try:
            parsed.start = _parse_iso(m.group(1))
        except ValueError:
            return False
        parsed.date_phrases.append(m.group(0))
        return True

    def before(m: re.Match[str]) -> bool:
        try:
            parsed.end = _parse_iso(m.group(1))
        except ValueError:
            return False
        parsed.date_phrases.append(m.group(0))
        return True

    def on(m: re.Match[str]) -> bool:
        try:
            day = _parse_iso(m.group(1))
        except ValueError:
            return False
        if len(m.group(1)) == 10:
            parsed.start, parsed.end = _day_bounds(day)
        else:
            parsed.start = parsed.end = day
        parsed.date_phrases.append(m.group(0).strip())
        return True

    rest = take(_BETWEEN, text, between)
    rest = take(_SINCE, rest, since)
    rest = take(_BEFORE, rest, before)
    rest = take(_ON, rest, on)
    found = list(_LAST_N.finditer(rest))
    rest = _LAST_N.sub(" ", rest)
    for m in found:
        n, unit = int(m.group(1)), m.group(2).lower()
        span = {"hour": timedelta(hours=n), "day": timedelta(days=n), "week": timedelta(weeks=n),
                "month": timedelta(days=30 * n)}[unit]
        parsed.start, parsed.end = now - span, now
        parsed.date_phrases.append(m.group(0))
    found = list(_RELATIVE.finditer(rest))
    rest = _RELATIVE.sub(" ", rest)
    for m in found:
        phrase = _SPACES.sub(" ", m.group(1).lower())
        today_start, _ = _day_bounds(now)
        if phrase == "today":
            parsed.start, parsed.end = today_start, now
        elif phrase == "yesterday":
            parsed.start, parsed.end = _day_bounds(now - timedelta(days=1))
        elif phrase.endswith("week"):
            parsed.start, parsed.end = (today_start - timedelta(days=now.weekday()), now) if phrase.startswith("this") \
                else (now - timedelta(days=7), now)
        elif phrase.endswith("month"):
            parsed.start, parsed.end = (today_start.replace(day=1), now) if phrase.startswith("this") \
                else (now - timedelta(days=30), now)
        else:  # year
            parsed.start, parsed.end = (today_start.replace(month=1, day=1), now) if phrase.startswith("this") \
                else (now - timedelta(days=365), now)
        parsed.date_phrases.append(m.group(0))

    parsed.canvas_ids = [f"canvas-{m.group(1)}" for m in _CANVAS.finditer(rest)]
    parsed.artifact_ids = [f"artifact-{m.group(1)}" for m in _ARTIFACT.finditer(rest)]
    parsed.agent_ids = [m.group(1).rstrip(".,") for m in _AGENT.finditer(rest)]
    rest = _AGENT.sub(" ", rest)
    rest = _SPACES.sub(" ", rest).strip(" ,.")
    # Canvas and artifact names stay in the text: they often carry meaning ("canvas-sales").
    parsed.text = rest if rest else text
    return parsed
