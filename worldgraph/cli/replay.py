"""Replaying an agent log (JSONL, one round a line) through ``observe_round``: ``worldgraph run``
and the demo. Flagged rounds are extracted by the LLM when one is configured; otherwise (or with
``use_shipped_deltas``) a line's own ``delta`` is merged.

It drives the whole facade (record, observe, merge, wait), so it sits beside ``service``, above
``kg``: the world updater below never sees the facade."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worldgraph.config import llm_configured
from worldgraph.errors import InvalidInputError
from worldgraph.world.pending import scene_reasons

if TYPE_CHECKING:
    from worldgraph.service import WorldModel

__all__ = ["quiet_extraction_log", "reason_lines", "replay_log"]


def replay_log(wm: WorldModel, tenant_id: str, env_name: str, log_path: str | Path,
               use_shipped_deltas: bool | None = None, progress: Any = None) -> dict[str, Any]:
    """Feed an agent log (JSONL, one round per line) through observe_round.

    Flagged rounds are extracted by the LLM when one is configured; otherwise (or with
    ``use_shipped_deltas``) a line's own ``delta`` (what a model returned for it) is merged.
    """
    import json

    lines = Path(log_path).read_text(encoding="utf-8").splitlines()
    rounds = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                rounds.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{log_path}:{n}", f"not valid JSON ({exc.msg})") from None
    offline = (not llm_configured()) if use_shipped_deltas is None else use_shipped_deltas
    summary: dict[str, Any] = {"rounds": 0, "flagged": 0, "merged": 0, "pending": 0, "failed": 0, "reports": []}
    scene_ids: list[str] = []
    auto_update, wm.world.auto_update = wm.world.auto_update, not offline
    try:
        _replay(wm, tenant_id, env_name, str(log_path), rounds, offline, summary, scene_ids, progress)
    finally:
        wm.world.auto_update = auto_update
    wm.wait_for_updates()
    scenes = []
    for sid in scene_ids:
        scene = wm.store.get_scene(tenant_id, sid) or {"status": "pending"}
        scenes.append(scene)
        status = scene.get("status")
        summary["merged" if status == "merged" else "failed" if status == "failed" else "pending"] += 1
    summary["reasons"] = scene_reasons(scenes)  # why the pending and failed ones wait: {reason: count}
    return summary


def quiet_extraction_log(verbose: bool) -> None:
    """On the CLI the reasons are printed under the counts, naming the LLM by its host; the
    extractor's log line (the full configured address, for an operator's log) shows with -v only."""
    if not verbose:
        logging.getLogger("worldgraph.world.extractor").setLevel(logging.ERROR)


def reason_lines(summary: dict[str, Any]) -> list[str]:
    """What the CLI prints under a replay's counts: each reason packets wait or failed, once."""
    return [f"  {count} x {reason}" for reason, count in summary.get("reasons", {}).items()]


def _replay(wm: WorldModel, tenant_id: str, env_name: str, log_path: str, rounds: list[Any], offline: bool,
            summary: dict[str, Any], scene_ids: list[str], progress: Any) -> None:
    for i, rnd in enumerate(rounds, 1):
        if not isinstance(rnd, dict):
            raise InvalidInputError(f"{log_path} round {i}", "must be a JSON object")
        packet = wm.observe_round(tenant_id, env_name, {k: v for k, v in rnd.items() if k != "delta"})
        summary["rounds"] += 1
        if packet is not None:
            summary["flagged"] += 1
            scene_ids.append(packet["id"])
            if offline and rnd.get("delta") is not None:
                summary["reports"].append(wm.apply_delta(tenant_id, env_name, rnd["delta"], scene=packet).to_dict())
        if progress:
            progress(i, len(rounds))
