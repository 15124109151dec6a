"""The derived-text upgrade: a store written before forgets derived text again (docs/forget.md,
"Upgrading") may hold copies of records it forgot, and this derives them again, once.

A worldgraph before ``kg.derived`` forgot a record but left what others had copied of it: the
turn after a forgotten turn quotes it in its input summary (and in its index row), a canvas record
keeps the canvas as a forgotten episode saw it, an environment's ``last_trigger_reason`` quotes a
forgotten round, a later scene's history excerpt quotes it. On the first writable open the
tenants that forgot an episode are read once (``legacy_copies``) and what is found is derived
again under the rules forgets follow now, in one transaction per tenant with an audit row
(kind ``rederive``, by ``upgrade``), so the next purge (scheduled at open) removes the old bytes
from the files and re-indexes the turns. The store then remembers it is done.

Records written before ``context_from`` and ``evidence_scenes`` carry no link to what they copied,
so the upgrade recognises a copy by its text: a turn whose input summary has the shape of a quote
(``"Name: text"``) and is the quote of no live episode of its session; a history line whose round
matches no live round of the environment. Evidence strings a world record kept from a scene
forgotten before the upgrade are not recognisable (they name no scene), and stay.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from worldgraph.clock import now_iso
from worldgraph.kg import derived
from worldgraph.kg.lifecycle import DerivedRecords, audit_record
from worldgraph.kg.sessions import by_session
from worldgraph.kg.store import GraphStore

__all__ = ["derive_legacy_copies", "legacy_copies"]

log = logging.getLogger("worldgraph")

Record = dict[str, Any]
_QUOTE = re.compile(r"^[^\n:]{1,200}: ")
_LINE = re.compile(r"^\[round (-?\d+)\] \| action: (.*?)(?: \| |$)")


def derive_legacy_copies(store: GraphStore) -> dict[str, int]:
    """Run the upgrade once (a writable store that has not yet); returns how many records of each
    kind it derived again. A failure (a store that went away meanwhile) is logged and leaves the
    upgrade to the next open: the store opens all the same (each tenant's writes are one
    transaction, and doing a tenant twice derives nothing new)."""
    if store.read_only or store.derived_text_upgraded():
        return {}
    try:
        return _derive(store)
    except Exception as exc:  # noqa: BLE001 - the store serves on; the next open upgrades
        log.warning("upgrade: the copies of forgotten records were not all derived again (%s); the next open "
                    "goes on with it", exc)
        return {}


def _derive(store: GraphStore) -> dict[str, int]:
    counts = {"episodes": 0, "canvases": 0, "metas": 0, "scenes": 0}
    tenants = sorted({a["tenant_id"] for a in store.forget_log() if a["kind"] in ("episode", "agent", "session")})
    for tenant in tenants:
        found = legacy_copies(store, tenant)
        if not found:
            continue
        audit = audit_record(tenant, "rederive", tenant, "upgrade", now_iso())
        audit["rederived"] = [e["id"] for e in found.episodes]
        store.write_derived(tenant, found, audit)
        for key, n in (("episodes", len(found.episodes)), ("canvases", len(found.canvases)),
                       ("metas", len(found.metas)), ("scenes", len(found.scenes))):
            counts[key] += n
    store.mark_derived_text_upgraded()
    if any(counts.values()):
        log.warning("upgrade: derived again what %d turns, %d canvases, %d environments and %d scenes kept of "
                    "records forgotten before (docs/forget.md); the next purge removes the old bytes",
                    counts["episodes"], counts["canvases"], counts["metas"], counts["scenes"])
    return counts


def legacy_copies(store: GraphStore, tenant_id: str) -> DerivedRecords:
    """The tenant's records that show something of a record no longer stored, derived again."""
    episodes = {e["id"]: e for page in store.iter_episodes(tenant_id) for e in page}
    out = DerivedRecords()
    out.episodes = _turns(store, tenant_id, episodes)
    for cid in store.canvas_ids(tenant_id):
        current = store.get_canvas(tenant_id, cid)
        live = sorted((e for e in episodes.values() if e.get("canvas_id") == cid),
                      key=lambda e: (float(e.get("ts") or 0), str(e["id"])), reverse=True)
        canvas = derived.canvas_of(tenant_id, cid, current, live)
        if canvas is not current:
            out.canvases[cid] = canvas
    rounds = [e for e in episodes.values() if e.get("task_type") == derived.ROUND_TASK_TYPE]
    for env, meta in store.environment_metas(tenant_id).items():
        scenes = store.list_scenes(tenant_id, env)
        reason = (meta or {}).get("last_trigger_reason")
        if meta is not None and reason and not any(s.get("trigger_reason") == reason for s in scenes):
            out.metas[env] = {**meta, "last_trigger_reason": None}
        for scene in scenes:
            kept = _history_kept(dict(scene), env, rounds)
            if kept is not None:
                out.scenes.append(kept)
    return out


def _turns(store: GraphStore, tenant_id: str, episodes: dict[str, Record]) -> list[Record]:
    """The turns recorded before ``context_from`` whose input summary quotes no live episode of
    their session: derived again from the episode now before them."""
    out = []
    for members in by_session(episodes.values()).values():
        legacy = [e for e in members if e.get("task_type") == derived.TURN_TASK_TYPE and "context_from" not in e
                  and e.get("input_summary") and _QUOTE.match(str(e["input_summary"]))]
        if not legacy:
            continue
        quotes = {derived.turn_context(e)["input_summary"] for e in members}
        stale = [e for e in legacy if e["input_summary"] not in quotes]
        if not stale:
            continue
        links = store.session_neighbors(tenant_id, [e["id"] for e in stale])
        for turn in stale:
            previous = links.get(turn["id"], (None, None))[0]
            out.append(derived.rederive_turn(turn, episodes.get(previous) if previous else None))
    return out


def _history_kept(scene: Record, env: str, rounds: list[Record]) -> Record | None:
    """``scene`` without the lines of its history excerpt that quote no live round of ``env``
    (a scene written before ``history_episode_ids``); None when it keeps every line."""
    text = str(scene.get("recent_history_excerpt") or "")
    if not text or scene.get("history_episode_ids"):
        return None
    live: list[tuple[str, str]] = []
    prefix = f"{env} round "
    for r in rounds:
        head, _, action = str(r.get("task_description") or "").partition(": ")
        if head.startswith(prefix):
            live.append((head[len(prefix):], " ".join(action.split())))
    kept = []
    for line in text.split("\n"):
        m = _LINE.match(line)
        if m is None:
            kept.append(line)  # not a line this version wrote: left as it is
            continue
        number, action = m.group(1), m.group(2).rstrip("…")
        action = "" if action == "-" else action
        if any(n == number and (a.startswith(action) or (a == "(no action)" and not action)) for n, a in live):
            kept.append(line)
    if len(kept) == len(text.split("\n")):
        return None
    out = dict(scene)
    out["recent_history_excerpt"] = "\n".join(kept)
    return out
