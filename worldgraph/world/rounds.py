"""What the world updater does with a round and a packet besides merging: the round as an
episode, a packet's ids, a stored MergeReport read back."""

from __future__ import annotations

import re
from typing import Any

from worldgraph.errors import InvalidInputError
from worldgraph.kg.records import DroppedItem, MergeReport
from worldgraph.world.curiosity import AgentRound

__all__ = ["round_experience", "packet_ids", "report_from_dict"]

_FAILURE_RE = re.compile(
    r"\b(can't|cannot|can not|couldn't|fail(?:s|ed)?|nothing happens|not possible|invalid|"
    r"don't understand|unknown command|is locked|won't)\b", re.I)


def round_experience(env_name: str, rnd: AgentRound, reason: str | None, agent_id: str | None) -> dict[str, Any]:
    """An agent round as an episode: the action is the approach, the observation the outcome."""
    outcome_text = " ".join(x for x in (rnd.feedback, rnd.after_observation) if x)
    failed = bool(_FAILURE_RE.search(outcome_text))
    return {
        "agent_id": agent_id or f"{env_name}-agent",
        "agent_role": "explorer",
        "task_type": "environment_round",
        "task_description": f"{env_name} round {rnd.round}: {rnd.action or '(no action)'}",
        "input_summary": rnd.before_observation,
        "approach_taken": rnd.action,
        "actions_taken": [rnd.action] if rnd.action else [],
        "outcome": "failure" if failed else "success",
        "error_message": outcome_text[:500] if failed else None,
        "learnings": [reason] if reason else [],
        "confidence_score": 0.5,
    }


def report_from_dict(data: dict[str, Any]) -> MergeReport:
    fields = {k: v for k, v in data.items() if k not in ("dropped", "notes")}
    report = MergeReport(**fields)
    report.dropped = [DroppedItem(**d) for d in data.get("dropped") or []]
    report.notes = [DroppedItem(**d) for d in data.get("notes") or []]
    return report


def packet_ids(packet: Any) -> tuple[str, str]:
    if hasattr(packet, "model_dump"):
        packet = packet.model_dump()
    if not isinstance(packet, dict):
        raise InvalidInputError("packet", f"must be the scene packet dict returned by observe_round, got "
                                f"{type(packet).__name__}")
    for key in ("tenant_id", "id"):
        if not isinstance(packet.get(key), str) or not packet[key]:
            raise InvalidInputError(f"packet.{key}", "is required (give the packet returned by observe_round)")
    return packet["tenant_id"], packet["id"]
