"""How an episode record is kept in the ``episodes.data`` column of the embedded store: the
record's JSON without what can be filled in again exactly on reading (docs/architecture.md,
"Episode records on disk").

Format 1 (every worldgraph before this module, and any record ``pack`` cannot shorten exactly): the
whole record. Format 2: the record without
- the keys whose value is the default a recorded experience gets (``DEFAULTS``: no canvas, no
  session, no error, empty lists, ``index_status`` "pending"; the live index status is in its
  columns anyway),
- ``episode_id`` (always the record's ``id``),
- ``timestamp`` (the ISO spelling of ``ts``, which the record keeps),
with the other keys of the record model under short names (``SHORT``: the key names were ~0.4 KB
of a record) and the marker ``"_f": 2``. ``unpack`` of either format returns the record that was packed,
key for key and value for value; a record is packed only if that holds (every default key present,
``episode_id`` equal to ``id``, ``timestamp`` the spelling of ``ts``, no key of the record already
named like a short name), else it is kept whole.

The keys SQL reads keep their names (``json_extract`` of ``canvas_id``, and the partial index on
it, read NULL from a missing key as from a null one; ``input_summary`` and ``context_from``, which
SQL compares, are never left out), and so does ``id``. The reasoning chain and the metacognitive
insights, when of the model's shape (its keys exactly, each step a step and a thought), are kept as
lists of their values in their keys' order (``rc``: [conclusion, [[step, thought], ...]], ``mi``:
[uncertainty, what failed, what worked]); in any other shape under their own names, as written.
Every other nested value (the metadata, a canvas) is kept as written.

On the bench's records (bench/README.md, "Bytes per episode") format 2 is 640 bytes where format 1
was 1,203: ~5.6 GB less at ten million episodes."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from worldgraph.kg.codec import dumps, loads

__all__ = ["DEFAULTS", "FORMAT", "FORMAT_KEY", "SHORT", "full_data", "pack", "unpack"]

FORMAT = 2
FORMAT_KEY = "_f"  # never a record's own key: AgentExperience forbids unknown fields
# key -> the value build_episode gives an experience that leaves it out (memory.models.AgentExperience)
DEFAULTS: dict[str, Any] = {
    "actions_taken": [], "agent_role": "", "approach_taken": "", "canvas_action_ids": [], "canvas_id": None,
    "canvas_name": None, "canvas_snapshot": None, "constitutional_violations": [], "error_message": None,
    "human_intervention_required": False, "index_error": None, "index_status": "pending", "learnings": [],
    "metadata": {}, "session_id": None,
}

# key -> its name in format 2; never a key SQL reads (see above)
SHORT: dict[str, str] = {
    "actions_taken": "ac", "agent_id": "ag", "agent_role": "ar", "approach_taken": "ap", "canvas_action_ids": "ca",
    "canvas_name": "cn", "canvas_snapshot": "cs", "confidence_score": "co", "constitutional_violations": "cv",
    "error_message": "er", "human_intervention_required": "hi", "index_error": "ie", "index_status": "is",
    "learnings": "le", "maturity_level": "ml", "metacognitive_insights": "mi", "metadata": "md", "outcome": "ou",
    "reasoning_chain": "rc", "session_id": "se", "success": "su", "task_description": "td", "task_type": "tt",
    "tenant_id": "te",
}
_LONG = {v: k for k, v in SHORT.items()}
assert len(_LONG) == len(SHORT) and not _LONG.keys() & SHORT.keys()


_MISSING = object()
# Reading a record is on recall's path (~100 candidates a query), so unpack is one pass over a fixed
# table: every key a record of the model may hold, in format 1's (sorted) order, with where format
# 2 keeps it and what a missing one means (its default, or absent). ``episode_id`` reads ``id``;
# ``timestamp`` is spelled from ``ts`` afterwards, in its place.
_KNOWN = ("context_from", "episode_id", "id", "input_summary", "timestamp", "ts", "canvas_id",
          *SHORT)
_TABLE = tuple(sorted((k, "id" if k == "episode_id" else SHORT.get(k, k),
                       None if k == "timestamp" else DEFAULTS.get(k, _MISSING)) for k in _KNOWN))
_STORED_KEYS = frozenset(stored for _, stored, _ in _TABLE) | {FORMAT_KEY}
_DEFAULT_TABLE = tuple((SHORT.get(k, k), v, type(v)) for k, v in DEFAULTS.items())
_MUTABLE = tuple((k, v) for k, v in DEFAULTS.items() if isinstance(v, (list, dict)))


def _spelled(ts: Any) -> str | None:
    if type(ts) is not float:
        return None
    try:
        # clock.iso's spelling, without its conversions (pack checks that the two agree)
        return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="microseconds")
    except (OverflowError, OSError, ValueError):
        return None


_STEP = frozenset({"step", "thought"})
_CHAIN = frozenset({"conclusion", "steps"})
_INSIGHTS = frozenset({"uncertainty", "what_failed", "what_worked"})


def _chain_values(v: Any) -> list[Any] | None:
    if type(v) is not dict or v.keys() != _CHAIN or type(v["steps"]) is not list:
        return None
    if not all(type(s) is dict and s.keys() == _STEP for s in v["steps"]):
        return None
    return [v["conclusion"], [[s["step"], s["thought"]] for s in v["steps"]]]


def _insight_values(v: Any) -> list[Any] | None:
    if type(v) is not dict or v.keys() != _INSIGHTS:
        return None
    return [v["uncertainty"], v["what_failed"], v["what_worked"]]


def _chain(p: list[Any]) -> dict[str, Any]:
    return {"conclusion": p[0], "steps": [{"step": a, "thought": b} for a, b in p[1]]}


def _insights(p: list[Any]) -> dict[str, Any]:
    return {"uncertainty": p[0], "what_failed": p[1], "what_worked": p[2]}


# short name, long name, the values of a value of the model's shape (None: another shape), the value again
_NESTED = (("rc", "reasoning_chain", _chain_values, _chain), ("mi", "metacognitive_insights", _insight_values, _insights))


def pack(record: dict[str, Any]) -> str:
    """The data column's text of an episode ``record``: format 2 when it restores exactly, else
    the whole record (format 1). ``FORMAT_KEY`` is no record's own key (the record model has no
    such field): one that holds it is refused, as it would read back as format 2."""
    if FORMAT_KEY in record:
        raise ValueError(f"an episode record must not hold the key {FORMAT_KEY!r} (reserved for the stored format)")
    if (record.get("episode_id") != record.get("id") or "id" not in record
            or not DEFAULTS.keys() <= record.keys() or record.get("timestamp") != _spelled(record.get("ts"))
            or not _LONG.keys().isdisjoint(record)):
        return dumps(record)
    out = {SHORT.get(k, k): v for k, v in record.items()}
    del out["episode_id"], out["timestamp"]
    for at, default, kind in _DEFAULT_TABLE:
        # left out only if equal and of its type: False == 0, and [] and {} differ by type
        if type(v := out[at]) is kind and v == default:
            del out[at]
    for short, long, values, _ in _NESTED:
        if short in out:
            if (packed := values(out[short])) is None:
                out[long] = out.pop(short)  # another shape: as written, under its own name
            else:
                out[short] = packed
    out[FORMAT_KEY] = FORMAT
    return dumps(out)


def unpack(data: str) -> dict[str, Any]:
    """The record of a data column's text, of either format."""
    stored: dict[str, Any] = loads(data)
    if stored.get(FORMAT_KEY) is None:
        return stored
    if not _STORED_KEYS.issuperset(stored):  # a key the table does not know: the long way
        del stored[FORMAT_KEY]
        rec = {_LONG.get(k, k): v for k, v in stored.items()}
        for k, v in DEFAULTS.items():
            rec.setdefault(k, v)
        rec["episode_id"], rec["timestamp"] = rec["id"], None
        rec = dict(sorted(rec.items()))
    else:
        rec = {k: v for k, at, default in _TABLE if (v := stored.get(at, default)) is not _MISSING}
    for short, long, _, value in _NESTED:
        if short in stored:
            rec[long] = value(stored[short])
    for k, v in _MUTABLE:  # a default list or dict of its own, never the shared one
        if rec[k] is v:
            rec[k] = v.copy()
    rec["timestamp"] = _spelled(rec["ts"])
    return rec


def full_data(data: str) -> str:
    """The whole record's JSON of a data column's text (the Cypher projection's ``record``)."""
    return dumps(unpack(data)) if f'"{FORMAT_KEY}":' in data else data
