"""Derived text is derived, not copied (docs/architecture.md): what one record shows of another is
computed from the record it comes from, and computed again when that record is forgotten, in the
forget itself. Both stores apply these rules in their forget transaction, so that once a forget
returns no row holds the forgotten words because of a neighbour, and after the purge no file does.

Where it applies, and the rule each function here states:

- **A turn's context.** ``record_conversation`` gives a turn the turn before it as its input
  summary (``turn_context``: ``"Bob: what was said"``), and names that turn in ``context_from``.
  When the quoted turn is forgotten, the turn quotes the turn now before it in its session, or
  nothing (``rederive_turn``), and its index row is written again. A turn recorded before
  ``context_from`` existed is matched by its text (``quotes``).
- **An agent's role.** The agent record shows the role of its episode last recorded: forgetting
  that episode gives it the role of its newest live episode (``agent_of``); its last one deletes it.
- **A canvas.** The canvas record is the canvas as the newest live episode that carried it saw it
  (``canvas_of``): forgetting that episode derives it from the next one, and forgetting the last
  episode that carried it deletes it.
- **A scene's words in the world graph.** A world record's evidence strings name the scenes they
  came from (``evidence_scenes``, aligned with ``evidence``); when a scene is forgotten, evidence
  that came only from it goes (``strip_scene``), and an environment's ``last_trigger_reason``
  that quotes it is cleared (``meta_without_scene``). Names, relations and rules stay.
- **A round in later scenes.** A scene packet quotes the rounds before it
  (``recent_history_excerpt``, one line per round, whose episodes ``history_episode_ids`` names);
  forgetting a round's episode takes its line out of every scene that quotes it
  (``scene_without_round``).
"""

from __future__ import annotations

import re
from typing import Any

Record = dict[str, Any]

__all__ = ["INPUT_SUMMARY_MAX", "ROUND_TASK_TYPE", "TURN_TASK_TYPE", "agent_of", "canvas_of", "meta_without_scene", "quoted",
           "quotes", "rederive_turn", "scene_text", "scene_without_round", "strip_scene", "summarize", "turn_context"]

INPUT_SUMMARY_MAX = 500
TURN_TASK_TYPE = "conversation"  # the task type of a transcript turn (record_conversation)
ROUND_TASK_TYPE = "environment_round"  # the task type of an agent round (observe_round)


# ---------------------------------------------------------------------------------- turns
def summarize(text: str, limit: int = INPUT_SUMMARY_MAX) -> str:
    """An input summary: whitespace collapsed; a long one cut at a word boundary with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut + " …"


def quoted(speaker: str, text: str) -> str:
    """How a turn reads as the context of the next one."""
    return f"{speaker}: {text}"


def turn_context(previous: Record | None) -> Record:
    """The fields a turn derives from the episode before it in its session (``previous``; None:
    the first): its input summary, the quote of that episode, and ``context_from``, its id (None
    for no context: a turn recorded with ``context_from`` never falls back to ``quotes``' text match)."""
    if previous is None:
        return {"input_summary": "", "context_from": None}
    text = summarize(quoted(str(previous.get("agent_id") or ""), str(previous.get("task_description") or "")))
    return {"input_summary": text, "context_from": previous["id"]}


def quotes(turn: Record, source: Record) -> bool:
    """Whether ``turn``'s input summary is derived from ``source``: it names it in
    ``context_from``, or (a turn recorded before that field existed) it is a conversation turn
    whose input summary is exactly ``source``'s quote."""
    if "context_from" in turn:
        return bool(turn["context_from"]) and turn["context_from"] == source.get("id")
    return (turn.get("task_type") == TURN_TASK_TYPE and bool(turn.get("input_summary"))
            and turn.get("input_summary") == turn_context(source)["input_summary"])


def rederive_turn(turn: Record, previous: Record | None) -> Record:
    """``turn`` with its context derived again from ``previous`` (the episode now before it in its
    session, None if none), as ``record_conversation`` would have written it had the quoted turn
    never been recorded. Its index status goes back to pending: its index row is written again."""
    out = dict(turn)
    out.update(turn_context(previous))
    out["index_status"], out["index_error"] = "pending", None
    return out


# ---------------------------------------------------------------------------------- agents
def agent_of(tenant_id: str, current: Record, forgotten: Record, newest: Record) -> Record | None:
    """The agent record after ``forgotten`` (an episode of it) is forgotten, ``newest`` being its
    newest live episode: its role as ``newest`` gives it when the role it shows is the forgotten
    episode's (the role is copied from the episode last recorded); None: leave it as it is."""
    role = forgotten.get("agent_role") or ""
    if (current.get("agent_role") or "") != role or (newest.get("agent_role") or "") == role:
        return None
    return {"id": current.get("id") or newest["agent_id"], "tenant_id": tenant_id,
            "agent_role": newest.get("agent_role") or ""}


# ---------------------------------------------------------------------------------- canvases
def canvas_of(tenant_id: str, canvas_id: str, current: Record | None, live: list[Record]) -> Record | None:
    """The canvas record ``canvas_id`` should hold, given ``live``: the tenant's live episodes on
    that canvas, newest first. The record as it is when a live episode carried that very canvas
    (it was derived from one); else the canvas as the newest live episode that carried one saw
    it; None (delete it) when no live episode carried one."""
    carried = [e for e in live if e.get("canvas_snapshot")]
    if current is not None and any(e["canvas_snapshot"] == current.get("snapshot") for e in carried):
        return current
    if not carried:
        return None
    newest = carried[0]
    snapshot = newest["canvas_snapshot"]
    return {"id": canvas_id, "tenant_id": tenant_id, "name": newest.get("canvas_name") or snapshot.get("name") or "",
            "snapshot": snapshot, "updated_at": newest.get("timestamp")}


# ---------------------------------------------------------------------------------- scenes
_SCENE_TEXT = ("trigger_reason", "action", "before_observation", "after_observation", "feedback", "latest_response",
               "recent_history_excerpt")


def scene_text(scene: Record) -> str:
    """Every text of a scene packet, folded for ``strip_scene``'s matching of older evidence."""
    parts = [str(scene.get(k) or "") for k in _SCENE_TEXT] + [str(c) for c in scene.get("admissible_commands") or []]
    return _fold("\n".join(parts))


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


def strip_scene(record: Record, scene_id: str, scene_words: str | None = None) -> Record:
    """The world record without ``scene_id`` among its source_scenes and without the evidence that
    came only from that scene (what was learned stays: names, relations, rules, counts).

    Evidence merged since ``evidence_scenes`` exists names its scenes. Older evidence names none:
    it goes when the scene's text (``scene_words``, from ``scene_text``) holds it, or when the
    record has no other source scene left."""
    out = dict(record)
    sources = list(record.get("source_scenes") or [])
    out["source_scenes"] = [s for s in sources if s != scene_id]
    evidence = list(record.get("evidence") or [])
    if not evidence or scene_id not in sources:
        return out
    attributed = record.get("evidence_scenes")
    if not isinstance(attributed, list) or len(attributed) != len(evidence):
        attributed = [None] * len(evidence)
    kept_evidence, kept_scenes = [], []
    for text, scenes in zip(evidence, attributed):
        if isinstance(scenes, list):
            if scene_id in scenes and all(s == scene_id for s in scenes):
                continue
            scenes = [s for s in scenes if s != scene_id]
        elif not out["source_scenes"] or (scene_words is not None and _fold(str(text)) in scene_words):
            continue
        kept_evidence.append(text)
        kept_scenes.append(scenes)
    out["evidence"] = kept_evidence
    if "evidence_scenes" in record:
        out["evidence_scenes"] = [s if isinstance(s, list) else [] for s in kept_scenes]
    return out


def meta_without_scene(meta: Record, scene: Record) -> Record:
    """An environment's meta after ``scene`` is forgotten: ``last_trigger_reason`` cleared when it
    is that scene's reason (it quotes the round)."""
    reason = scene.get("trigger_reason")
    if reason and meta.get("last_trigger_reason") == reason:
        out = dict(meta)
        out["last_trigger_reason"] = None
        return out
    return meta


_ROUND_LINE = re.compile(r"^\[round -?\d+\]")


def scene_without_round(scene: Record, episode_id: str) -> Record | None:
    """``scene`` with the line of the round whose episode is ``episode_id`` taken out of its
    ``recent_history_excerpt`` (and out of ``history_episode_ids``); None when it does not quote it."""
    ids = scene.get("history_episode_ids")
    if not isinstance(ids, list) or episode_id not in ids:
        return None
    lines = str(scene.get("recent_history_excerpt") or "").split("\n")
    if len(lines) != len(ids) or not all(_ROUND_LINE.match(line) for line in lines):
        # not the shape excerpts have (a caller's own packet): the whole excerpt goes
        lines, ids = [], []
    out = dict(scene)
    keep = [i for i, e in enumerate(ids) if e != episode_id]
    out["recent_history_excerpt"] = "\n".join(lines[i] for i in keep)
    out["history_episode_ids"] = [ids[i] for i in keep]
    return out
