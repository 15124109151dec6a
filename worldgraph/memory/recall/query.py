"""Query preprocessing and entity extraction (recall step 1, docs/architecture.md "Recall").

``parse_query("what broke on canvas-123 last week")`` cleans the text and pulls out what the
query itself says about scope: canvas references (canvas-123), artifact references
(artifact-456), agent references (agent:bob, @bob), ISO dates, written dates ("8 May 2023",
"October 13, 2023", "in July 2023", "in June") and phrases such as "last week", "yesterday",
"since 2026-11-01", "between 2026-10-01 and 2026-10-31". Canvas and agent references become
filters; the dates become one window (``start`` / ``end``) that recall uses as a soft signal
(``relative`` says whether it was read against ``now``); the rest of the text is what gets
embedded and searched.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
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
_MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
                "november", "december")
_MONTH = r"(january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|" \
         r"jun|jul|aug|sept|sep|oct|nov|dec)\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d{2})"
_DAY_MONTH_YEAR = re.compile(rf"\b(?:on\s+)?(?:the\s+)?{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b(?:on\s+)?{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.I)
_MONTH_YEAR = re.compile(rf"\b(?:in\s+|during\s+)?{_MONTH},?\s+{_YEAR}\b", re.I)
_IN_MONTH = re.compile(r"\b(?:in|during)\s+(january|february|march|april|may|june|july|august|september|october|"
                       r"november|december)\b", re.I)
_IN_YEAR = re.compile(rf"\b(?:in|during)\s+{_YEAR}\b", re.I)
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
    relative: bool = False  # the window was read against ``now`` ("last week", "yesterday", "in June")

    def entities(self) -> dict[str, object]:
        return {
            "canvas_ids": self.canvas_ids,
            "artifact_ids": self.artifact_ids,
            "agent_ids": self.agent_ids,
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
            "date_phrases": self.date_phrases,
            "relative": self.relative,
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


def _month_index(name: str) -> int:
    name = name.lower().rstrip(".")
    return next(i for i, m in enumerate(_MONTH_NAMES, 1) if m.startswith(name[:3]))


def _month_bounds(year: int, month: int) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=timezone.utc)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=timezone.utc)
    return start, end - timedelta(microseconds=1)


def parse_query(query: str, now: datetime | None = None) -> ParsedQuery:
    """Clean ``query`` and extract its entities; the returned text has the filter phrases removed."""
    now = now or datetime.now(timezone.utc)
    text = clean(query)
    parsed = ParsedQuery(text=text, original=query)
    rest = _take_dates(parsed, text, now)
    rest = _take_relative_spans(parsed, rest, now)
    rest = _take_ids(parsed, rest)
    parsed.text = rest if rest else text
    return parsed


def _take_dates(parsed: ParsedQuery, text: str, now: datetime) -> str:
    """Named dates and ranges ("between A and B", "since", "on 2026-01-02", "8 May 2023", "in
    May", "in 2023") become ``parsed``'s window; returns the text without them."""

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

    def written_day(m: re.Match[str], day: str, month: str, year: str) -> bool:
        try:
            parsed.start, parsed.end = _day_bounds(datetime(int(year), _month_index(month), int(day), tzinfo=timezone.utc))
        except ValueError:  # 31 February
            return False
        parsed.date_phrases.append(m.group(0).strip())
        return True

    def month_year(m: re.Match[str]) -> bool:
        parsed.start, parsed.end = _month_bounds(int(m.group(2)), _month_index(m.group(1)))
        parsed.date_phrases.append(m.group(0).strip())
        return True

    def in_month(m: re.Match[str]) -> bool:
        # the latest such month that has begun by now
        month = _month_index(m.group(1))
        year = now.year if month <= now.month else now.year - 1
        parsed.start, parsed.end = _month_bounds(year, month)
        parsed.relative = True
        parsed.date_phrases.append(m.group(0).strip())
        return True

    def in_year(m: re.Match[str]) -> bool:
        year = int(m.group(1))
        parsed.start = datetime(year, 1, 1, tzinfo=timezone.utc)
        parsed.end = datetime(year + 1, 1, 1, tzinfo=timezone.utc) - timedelta(microseconds=1)
        parsed.date_phrases.append(m.group(0).strip())
        return True

    rest = take(_BETWEEN, text, between)
    rest = take(_SINCE, rest, since)
    rest = take(_BEFORE, rest, before)
    rest = take(_ON, rest, on)
    rest = take(_DAY_MONTH_YEAR, rest, lambda m: written_day(m, m.group(1), m.group(2), m.group(3)))
    rest = take(_MONTH_DAY_YEAR, rest, lambda m: written_day(m, m.group(2), m.group(1), m.group(3)))
    rest = take(_MONTH_YEAR, rest, month_year)
    rest = take(_IN_MONTH, rest, in_month)
    return take(_IN_YEAR, rest, in_year)


def _take_relative_spans(parsed: ParsedQuery, rest: str, now: datetime) -> str:
    """"last 3 days", "yesterday", "this week", ... become a window ending ``now`` (marked
    relative: recall may re-read it against the newest memory); returns the text without them."""
    found = list(_LAST_N.finditer(rest))
    rest = _LAST_N.sub(" ", rest)
    for m in found:
        n, unit = int(m.group(1)), m.group(2).lower()
        span = {"hour": timedelta(hours=n), "day": timedelta(days=n), "week": timedelta(weeks=n),
                "month": timedelta(days=30 * n)}[unit]
        parsed.start, parsed.end = now - span, now
        parsed.relative = True
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
        parsed.relative = True
        parsed.date_phrases.append(m.group(0))
    return rest


def _take_ids(parsed: ParsedQuery, rest: str) -> str:
    """Canvas, artifact and agent ids named in the text; agent phrases leave the text, canvas and
    artifact names stay in it (they often carry meaning: "canvas-sales")."""
    parsed.canvas_ids = [f"canvas-{m.group(1)}" for m in _CANVAS.finditer(rest)]
    parsed.artifact_ids = [f"artifact-{m.group(1)}" for m in _ARTIFACT.finditer(rest)]
    parsed.agent_ids = [m.group(1).rstrip(".,") for m in _AGENT.finditer(rest)]
    rest = _AGENT.sub(" ", rest)
    return _SPACES.sub(" ", rest).strip(" ,.")
