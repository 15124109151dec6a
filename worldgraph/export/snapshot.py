"""The canonical snapshot: five files per environment, byte-stable.

``<root>/<tenant>/<app>/world_model_graph/<env>/`` holds nodes.jsonl, edges.jsonl, rules.jsonl,
scenes.jsonl (one JSON object a line, keys sorted, UTF-8 unescaped, sorted by id) and meta.json.
Records get every contract key (missing optional ones filled with their defaults, e.g.
``valid_to: null``), so exporting, importing and exporting again gives identical bytes, and a
store that drops null properties (Neo4j) exports the same bytes as one that keeps them. A fact
edge (``relation: fact``) also has its ``predicate`` (snake_case) and ``single_valued``; no other
edge gets these keys, so a snapshot without facts is written exactly as before they existed.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from worldgraph.errors import InvalidInputError, NotFoundError
from worldgraph.gcpause import gc_paused
from worldgraph.kg.ids import PREDICATE_RULE, is_predicate
from worldgraph.kg.records import SCENE_PACKET_KEYS

FILES: dict[str, str] = {
    "nodes": "nodes.jsonl",
    "edges": "edges.jsonl",
    "rules": "rules.jsonl",
    "scenes": "scenes.jsonl",
}
META_FILE = "meta.json"

# identity keys a record cannot do without, then the defaults of every other contract key
_REQUIRED: dict[str, tuple[str, ...]] = {
    "nodes": ("id", "kind", "type", "name"),
    "edges": ("id", "relation", "src_id", "dst_id"),
    "rules": ("id", "condition", "outcome"),
    "scenes": ("id",),
}
_COMMON = {"confidence": 0.5, "evidence": [], "source_scenes": []}
_DEFAULTS: dict[str, dict[str, Any]] = {
    "nodes": {"attributes": {}, **_COMMON, "entity_id": None, "valid_to": None},
    "edges": {**_COMMON, "action": None, "valid_from": None, "valid_to": None},
    "rules": {"linked_node_ids": [], **_COMMON, "valid_to": None},
    "scenes": {
        "status": "pending", "error": None, "episode_id": None,
        **{k: "" for k in SCENE_PACKET_KEYS},
        "current_round": None, "admissible_commands": [],
    },
}


def snapshot_dir(root: str | Path, tenant_id: str, app_name: str, env_name: str) -> Path:
    return Path(root) / tenant_id / app_name / "world_model_graph" / env_name


def write_snapshot(
    graph: dict[str, Any],
    out_dir: str | Path,
    *,
    env_name: str | None = None,
    app_name: str | None = None,
) -> Path:
    """Write ``graph`` (the ``GraphStore.world_graph()`` shape) as the five canonical files in
    ``out_dir``; returns ``out_dir``. Each file is written to a temp file first and renamed
    into place only when all five are written, so a failure leaves the old snapshot intact.
    ``env_name`` / ``app_name`` fill the meta when the graph has none."""
    out = Path(out_dir)
    with gc_paused():
        files = {FILES[k]: _jsonl(k, normalise_records(k, graph.get(k) or [])) for k in FILES}
    meta = _meta(graph, out, env_name, app_name)
    files[META_FILE] = json.dumps(meta, ensure_ascii=False, sort_keys=True, indent=2, allow_nan=False) + "\n"

    out.mkdir(parents=True, exist_ok=True)
    temps: list[tuple[Path, Path]] = []
    try:
        for name, text in files.items():
            tmp = out / f".{name}.tmp-{os.getpid()}"
            with open(tmp, "wb") as fh:
                fh.write(text.encode("utf-8"))
                fh.flush()
                os.fsync(fh.fileno())
            temps.append((tmp, out / name))
        for tmp, final in temps:
            os.replace(tmp, final)
    finally:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
    return out


def read_snapshot(path: str | Path) -> dict[str, Any]:
    """Read a snapshot folder back into the ``world_graph()`` shape. Everything is read and
    checked before anything is returned; errors name the file and line."""
    folder = Path(path)
    if not folder.is_dir():
        raise NotFoundError("snapshot folder", str(folder), "give the folder that holds nodes.jsonl ... meta.json")
    graph: dict[str, Any] = {}
    with gc_paused():
        for key, name in FILES.items():
            graph[key] = _read_jsonl(key, folder / name)
    meta_path = folder / META_FILE
    meta = _load(meta_path, meta_path.read_text("utf-8") if meta_path.is_file() else None, META_FILE)
    if not isinstance(meta, dict):
        raise InvalidInputError(META_FILE, "must hold a JSON object")
    graph["meta"] = meta
    return graph


def normalise_records(key: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``records`` (of ``nodes``/``edges``/``rules``/``scenes``) with every contract key,
    sorted by id. Raises InvalidInputError naming a record that lacks an identity key.

    The copies are shallow: ``records`` themselves are never modified (missing keys are added to
    the copy, with a fresh list / dict for a default), but nested values (evidence lists,
    attributes) are shared with them. Deep copies of every record cost most of an export."""
    return _normalise(key, records, in_place=False)


def _normalise(key: str, records: list[dict[str, Any]], in_place: bool) -> list[dict[str, Any]]:
    """``normalise_records``; ``in_place`` fills the given dicts instead of copies (for records
    that belong to nobody else, e.g. just parsed from a file)."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, rec in enumerate(records):
        where = f"{key}[{i}]"
        if not isinstance(rec, dict):
            raise InvalidInputError(where, "must be an object")
        missing = [k for k in _REQUIRED[key] if rec.get(k) in (None, "")]
        if missing:
            raise InvalidInputError(where, f"missing {', '.join(missing)}")
        if not isinstance(rec["id"], str):
            raise InvalidInputError(where, "id: must be a string")
        if rec["id"] in seen:
            raise InvalidInputError(where, f"duplicate id {rec['id']!r}")
        seen.add(rec["id"])
        full = rec if in_place else dict(rec)
        for k, default in _DEFAULTS[key].items():
            if full.get(k) is None and default is not None:
                full[k] = default.copy() if isinstance(default, (list, dict)) else default
            else:
                full.setdefault(k, None)
        if key == "edges" and full["relation"] == "fact":
            _fact_keys(full, where)
        out.append(full)
    return sorted(out, key=lambda r: str(r["id"]))


# ---------------------------------------------------------------------------- internals


def _fact_keys(edge: dict[str, Any], where: str) -> None:
    """A fact edge's own keys: its predicate (required, snake_case) and single_valued (false when
    not given)."""
    predicate = edge.get("predicate")
    if not isinstance(predicate, str) or not is_predicate(predicate):
        raise InvalidInputError(f"{where} predicate", f"a fact edge needs its predicate, {PREDICATE_RULE}; "
                                f"got {predicate!r}")
    if not isinstance(edge.get("single_valued"), bool):
        if edge.get("single_valued") is not None:
            raise InvalidInputError(f"{where} single_valued", "must be true or false")
        edge["single_valued"] = False


# what json.dumps(rec, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
# builds for every call, built once
_LINE = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _jsonl(key: str, records: list[dict[str, Any]]) -> str:
    lines = []
    for rec in records:
        try:
            lines.append(_LINE.encode(rec))
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"{key} id {rec['id']!r}", f"is not JSON-serialisable: {exc}") from None
    return "".join(line + "\n" for line in lines)


def _meta(graph: dict[str, Any], out: Path, env_name: str | None, app_name: str | None) -> dict[str, Any]:
    meta = copy.deepcopy(graph.get("meta") or {})
    meta.setdefault("env_name", env_name or out.name)
    meta.setdefault("app_name", app_name or "general")
    meta.setdefault("graph_version", 0)
    meta.setdefault("updated_at", None)
    meta.setdefault("last_trigger_reason", None)
    # the files are the truth: counts describe exactly what was written
    meta["counts"] = {k: len(graph.get(k) or []) for k in FILES}
    return meta


def _read_jsonl(key: str, path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise NotFoundError("snapshot file", str(path), "a snapshot folder holds nodes.jsonl, edges.jsonl, "
                            "rules.jsonl, scenes.jsonl and meta.json (see `wm.export`)")
    records = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        rec = _load(path, line, f"{path.name} line {lineno}")
        if not isinstance(rec, dict):
            raise InvalidInputError(f"{path.name} line {lineno}", "must be a JSON object")
        missing = [k for k in _REQUIRED[key] if rec.get(k) in (None, "")]
        if missing:
            raise InvalidInputError(f"{path.name} line {lineno}", f"missing {', '.join(missing)}")
        if not isinstance(rec["id"], str):
            raise InvalidInputError(f"{path.name} line {lineno}", "id: must be a string")
        if rec["id"] in seen:
            raise InvalidInputError(f"{path.name} line {lineno}", f"duplicate id {rec['id']!r} (first on line {seen[rec['id']]})")
        seen[rec["id"]] = lineno
        records.append(rec)
    try:
        return _normalise(key, records, in_place=True)  # parsed here: nobody else holds them
    except InvalidInputError as exc:  # name the file, not the list index
        raise InvalidInputError(f"{path.name} ({exc.field})", exc.rule) from None


def _load(path: Path, text: str | None, where: str) -> Any:
    if text is None:
        raise NotFoundError("snapshot file", str(path), "a snapshot folder holds meta.json (see `wm.export`)")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidInputError(where, f"not valid JSON: {exc}") from None
