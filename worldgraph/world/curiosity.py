"""The trigger of a world-graph update: ``FLAG_CURIOSITY: yes`` at the end of an agent's output,
the rolling history of recent rounds, and the scene packet built from them (docs/architecture.md "World update").

Only the tail of a response counts: agents often quote the protocol ("answer with
FLAG_CURIOSITY: yes when ...") in their reasoning, and that must not trigger an update.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict, deque
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from worldgraph.errors import InvalidInputError
from worldgraph.kg.records import SceneRecord

TAIL_LINES = 5  # the flag must sit among the last non-empty lines of the response
_YES = frozenset({"yes", "y", "true"})

# Text fields of a scene packet are evidence, but one huge observation (a web page, a log dump)
# must not blow up the prompt or the scenes file; they are cut in the middle, marked.
MAX_OBSERVATION_CHARS = 8000
MAX_RESPONSE_CHARS = 4000

# "FLAG_CURIOSITY", "flag curiosity", "Flag-Curiosity"; ":" "：" or "=" between key and value.
_FLAG_RE = re.compile(r"^flag[\s_-]*curiosity\s*[:：=]\s*(.*)$", re.IGNORECASE)
_REASON_RE = re.compile(r"^curiosity[\s_-]*reason\s*[:：=]\s*(.*)$", re.IGNORECASE)
_DECORATION = str.maketrans("", "", "*`")


def parse_curiosity(response: str, tail: int = TAIL_LINES) -> tuple[bool, str | None]:
    """``(True, reason)`` when one of the last ``tail`` non-empty lines says ``FLAG_CURIOSITY: yes``.

    Tolerates case, spacing, markdown bold / backticks, list bullets and the full-width colon.
    ``no``, a missing flag or a malformed one give ``(False, None)``; a flag with no
    ``CURIOSITY_REASON`` line gives ``(True, None)``. When a key appears twice, the last one wins.
    """
    if not response:
        return False, None
    lines = [line for line in (_clean_line(raw) for raw in response.splitlines()) if line]
    flag: str | None = None
    reason: str | None = None
    for line in lines[-tail:] if tail > 0 else []:
        if m := _FLAG_RE.match(line):
            flag = m.group(1)
        elif m := _REASON_RE.match(line):
            reason = m.group(1).strip() or None
    if flag is None:
        return False, None
    words = re.findall(r"[a-z]+", flag.lower())
    if not words or words[0] not in _YES:
        return False, None
    return True, reason


def _clean_line(raw: str) -> str:
    line = raw.translate(_DECORATION).replace("\u3000", " ").strip()
    # list bullets, quotes and headings in front of the key: "- ", "> ", "## "
    return re.sub(r"^(?:[-+>#•]+\s*)+", "", line).strip()


class AgentRound(BaseModel):
    """One round of an agent, as given to ``observe_round``; missing optional fields are empty."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=False)

    round: int = Field(..., ge=0)
    action: str = ""
    before_observation: str = ""
    after_observation: str = ""
    feedback: str = ""
    admissible_commands: list[str] = Field(default_factory=list)
    response: str = ""

    @field_validator(
        "action", "before_observation", "after_observation", "feedback", "response", mode="before"
    )
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("admissible_commands", mode="before")
    @classmethod
    def _commands(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, tuple):
            return list(value)
        return value

    @classmethod
    def from_input(cls, obj: AgentRound | dict[str, Any]) -> AgentRound:
        """Validate a dict (extra keys ignored) or pass a model through; a bad value raises
        InvalidInputError naming the field, e.g. ``round.round: Input should be ...``."""
        if isinstance(obj, cls):
            return obj
        if isinstance(obj, BaseModel):
            obj = obj.model_dump()
        if not isinstance(obj, dict):
            raise InvalidInputError("round", f"must be a dict or AgentRound, got {type(obj).__name__}")
        try:
            return cls.model_validate(obj)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "round"
            raise InvalidInputError(f"round.{field}", err["msg"], err.get("input")) from exc


class RoundHistory:
    """The last ``max_rounds`` rounds of every (tenant, env), for ``recent_history_excerpt``.

    Call ``excerpt()`` before ``add()`` of the current round: the packet carries the current
    round in full, the excerpt gives the rounds that led to it. Each round is kept with the id of
    its episode: a forgotten round leaves the history (``forget_episodes``), and ``history_of``
    says which episode each line of an excerpt quotes (a scene keeps that, so forgetting a round
    takes its line out of the scenes that quote it: kg.derived). Thread-safe; the number of
    (tenant, env) keys is capped (least recently used dropped) so a long-lived process with many
    environments does not grow without bound.
    """

    def __init__(
        self,
        max_rounds: int,
        *,
        field_chars: int = 160,
        max_chars: int = 2000,
        max_keys: int = 10_000,
    ) -> None:
        if max_rounds < 0:
            raise InvalidInputError("max_rounds", "must be >= 0", max_rounds)
        self.max_rounds = max_rounds
        self.field_chars = field_chars
        self.max_chars = max_chars
        self.max_keys = max_keys
        self._rounds: OrderedDict[tuple[str, str], deque[tuple[str | None, AgentRound]]] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, tenant_id: str, env_name: str, rnd: AgentRound, episode_id: str | None = None) -> None:
        if self.max_rounds == 0:
            return
        key = (tenant_id, env_name)
        with self._lock:
            rounds = self._rounds.get(key)
            if rounds is None:
                rounds = self._rounds[key] = deque(maxlen=self.max_rounds)
                while len(self._rounds) > self.max_keys:
                    self._rounds.popitem(last=False)
            self._rounds.move_to_end(key)
            rounds.append((episode_id, rnd))

    def drop(self, tenant_id: str, env_name: str | None = None) -> None:
        """Forget the rounds kept for one environment of a tenant (all of them without ``env_name``)."""
        with self._lock:
            for key in [k for k in self._rounds if k[0] == tenant_id and env_name in (None, k[1])]:
                del self._rounds[key]

    def forget_episodes(self, tenant_id: str, episode_ids: Iterable[str]) -> int:
        """Forget the tenant's rounds recorded as these episodes; returns how many went."""
        gone = set(episode_ids)
        removed = 0
        with self._lock:
            for key, rounds in self._rounds.items():
                if key[0] != tenant_id:
                    continue
                kept = [(eid, rnd) for eid, rnd in rounds if eid is None or eid not in gone]
                if len(kept) != len(rounds):
                    removed += len(rounds) - len(kept)
                    rounds.clear()
                    rounds.extend(kept)
        return removed

    def episode_ids(self, tenant_id: str, env_name: str | None = None) -> list[str]:
        """The episodes of the rounds kept for one environment of a tenant (every one of its
        environments without ``env_name``; rounds recorded without one left out)."""
        with self._lock:
            return [eid for key, rounds in self._rounds.items() if key[0] == tenant_id and env_name in (None, key[1])
                    for eid, _ in rounds if eid is not None]

    def rounds(self, tenant_id: str, env_name: str) -> list[AgentRound]:
        with self._lock:
            return [rnd for _, rnd in self._rounds.get((tenant_id, env_name), ())]

    def excerpt(self, tenant_id: str, env_name: str) -> str:
        """One line per recent round, oldest first, each field truncated; at most ``max_chars``
        characters in all (the oldest lines go first when it is too long)."""
        return self.history_of(tenant_id, env_name)[0]

    def history_of(self, tenant_id: str, env_name: str) -> tuple[str, list[str | None]]:
        """``excerpt()`` and, for each of its lines, the episode of the round it quotes (None:
        recorded without one)."""
        with self._lock:
            kept = list(self._rounds.get((tenant_id, env_name), ()))
        lines = [self._render(rnd) for _, rnd in kept]
        ids = [eid for eid, _ in kept]
        while lines and len("\n".join(lines)) > self.max_chars:
            if len(lines) == 1:
                return _clip(lines[0], self.max_chars), ids
            lines.pop(0)
            ids.pop(0)
        return "\n".join(lines), ids

    def _render(self, rnd: AgentRound) -> str:
        parts = [f"[round {rnd.round}]", f"action: {_clip(rnd.action, self.field_chars) or '-'}"]
        if rnd.after_observation:
            parts.append(f"observation: {_clip(rnd.after_observation, self.field_chars)}")
        if rnd.feedback:
            parts.append(f"feedback: {_clip(rnd.feedback, self.field_chars)}")
        return " | ".join(parts)


def build_scene_packet(
    tenant_id: str,
    env_name: str,
    rnd: AgentRound,
    reason: str | None,
    history_excerpt: str,
    scene_id: str,
    now: datetime | str | None = None,
    episode_id: str | None = None,
    history_episode_ids: list[str | None] | None = None,
) -> SceneRecord:
    """The scene packet of one flagged round (the round, its recent history and the reason), status
    "pending". ``history_episode_ids``: the episode of each line of ``history_excerpt``, kept in
    the scene so that forgetting one of those rounds takes its line out (kg.derived)."""
    stamp = _iso(now)
    return SceneRecord(
        id=scene_id,
        tenant_id=tenant_id,
        status="pending",
        error=None,
        episode_id=episode_id,
        created_at=stamp,
        updated_at=stamp,
        env_name=env_name,
        current_round=rnd.round,
        trigger_reason=reason or "",
        action=rnd.action,
        before_observation=_cut_middle(rnd.before_observation, MAX_OBSERVATION_CHARS),
        after_observation=_cut_middle(rnd.after_observation, MAX_OBSERVATION_CHARS),
        feedback=_cut_middle(rnd.feedback, MAX_OBSERVATION_CHARS),
        admissible_commands=list(rnd.admissible_commands),
        latest_response=_cut_middle(rnd.response, MAX_RESPONSE_CHARS),
        recent_history_excerpt=history_excerpt,
        history_episode_ids=[str(e) if e is not None else "" for e in history_episode_ids or []],
    )


def _iso(now: datetime | str | None) -> str:
    if isinstance(now, str):
        return now
    moment = now or datetime.now(timezone.utc)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds")


def _clip(text: str, limit: int) -> str:
    """Whitespace collapsed to single spaces, cut at ``limit`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)] + "…"


def _cut_middle(text: str, limit: int) -> str:
    """Keep the head and the tail (where the flag and the outcome usually are), mark the cut."""
    if len(text) <= limit:
        return text
    marker = f"\n… [{len(text) - limit} characters cut] …\n"
    keep = max(limit - len(marker), 0)
    head = keep // 2
    return text[:head] + marker + text[len(text) - (keep - head):]
