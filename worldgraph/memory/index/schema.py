"""The episode index's table layout: schema, per-tenant table names, SQL filters.

Pure functions and constants shared by the index's tables, writes, searches and maintenance.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from worldgraph.errors import InvalidInputError
from worldgraph.memory.index import objectstore
from worldgraph.schema import SCHEMA_VERSIONS

TABLE_NAME = "episodes"  # the single table of the old layout (META_FORMAT 1), migrated on open
META_FILE = "index_meta.json"
WRITE_LOCK_FILE = ".write.lock"
META_FORMAT = SCHEMA_VERSIONS["lancedb"]  # 2: one table per tenant (worldgraph.schema)
# Table names: "ep-<tenant>" for tenants made of lower-case letters, digits and _.- (readable, and
# distinct on case-insensitive file systems); "eph-<hex of the utf-8 bytes>" for any other tenant
# id; "eps-<sha256>" for very long ones. The three prefixes differ at their third character, so
# two tenants never share a table.
def stored_embedder_name(path: str | Path, timeout: float | None = None) -> str | None:
    """The embedder name recorded beside the index at ``path`` (None: new, unlabelled, or an object
    store that does not answer within ``timeout`` seconds: opening the index then says why)."""
    try:
        if objectstore.is_remote(path):
            text = objectstore.read_meta(str(path), META_FILE, timeout)
            name = json.loads(text).get("embedder") if text is not None else None
        else:
            name = json.loads((Path(path) / META_FILE).read_text()).get("embedder")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) and name else None


_PLAIN_TENANT = re.compile(r"[a-z0-9][a-z0-9_.-]{0,127}")
TABLE_PREFIXES = ("ep-", "eph-", "eps-")
VECTOR_INDEX_NAME = "vector_idx"
FTS_INDEX_NAME = "text_idx"
# column -> index kind; BITMAP suits the low-cardinality columns, BTREE the rest. A filter that
# combines a role or an agent with a date range is evaluated ~6x faster from a BITMAP index of the
# role or agent than from a BTREE (bench/README.md, "Filtered recall"); an index of another kind
# than this table says is rebuilt by the next maintenance (``IndexMaintenance``), so older folders
# are upgraded in place.
SCALAR_INDEXES: dict[str, str] = {
    "episode_id": "BTREE",  # merge_insert and delete look rows up by it
    "tenant_id": "BTREE",
    "agent_role": "BITMAP",
    "agent_id": "BITMAP",
    "canvas_id": "BTREE",
    "timestamp": "BTREE",
    "success": "BITMAP",
    # the terms of an episode's metadata (memory/metadata.py): a list column, one bitmap per term
    "metadata_terms": "LABEL_LIST",
}
# LanceDB's names of the two kinds (``list_indices()``'s ``index_type``)
INDEX_TYPE_NAMES = {"BTREE": "BTree", "BITMAP": "Bitmap", "LABEL_LIST": "LabelList"}
WHERE_KEYS = frozenset({"agent_role", "agent_id", "canvas_ids", "start", "end", "success_only", "metadata_terms",
                        "metadata_any", "episode_ids"})
# Added after the first tables were made: a table without it gets it (all null) on its first write
# (IndexTables._part_by_name); a search of a table without it checks the metadata on the hits only.
METADATA_TERMS = "metadata_terms"
STRING_COLUMNS = ("episode_id", "tenant_id", "agent_id", "agent_role", "task_type", "outcome", "text")
COMMIT_RETRIES = 5  # attempts of a table commit that conflicts with another writer's
# attempts of a compaction whose rewrite a writer changed meanwhile (IndexTables._compact); the last
# one rewrites and commits under the table's write lock
COMPACT_ATTEMPTS = 3
PK_METADATA = "lance-schema:unenforced-primary-key"


# Vectors are stored as half-precision floats: half the bytes of float32 on disk (7.7 GB instead of
# 15.4 GB for 10M 384-d vectors) and per hit read. A cosine from float16 components is within
# ~1e-3 of the float32 one, below what changes a ranking (bench/README.md, "Filtered recall and
# ten million episodes": LoCoMo R@5 / R@10 unchanged). Tables made by earlier versions keep their
# float32 column (LanceDB casts what is written to a table's own type); a rebuild makes them anew.
VECTOR_VALUE_TYPE = pa.float16()


def episode_schema(dimensions: int) -> pa.Schema:
    """The arrow schema of the ``episodes`` table for vectors of ``dimensions`` floats
    (``VECTOR_VALUE_TYPE``)."""
    return pa.schema([
        # Declared as the (unenforced) primary key: lance then records the keys a merge_insert
        # inserts, so two writers inserting the same new episode_id at once conflict and retry
        # instead of both committing a row (lance issue #4585).
        pa.field("episode_id", pa.string(), nullable=False, metadata={PK_METADATA: "true"}),
        pa.field("tenant_id", pa.string(), nullable=False),
        pa.field("agent_id", pa.string()),
        pa.field("agent_role", pa.string()),
        pa.field("task_type", pa.string()),
        pa.field("outcome", pa.string()),
        pa.field("success", pa.bool_()),
        pa.field("confidence", pa.float32()),
        pa.field("timestamp", pa.float64()),  # unix seconds, UTC
        pa.field("canvas_id", pa.string()),
        pa.field("canvas_action_ids", pa.list_(pa.string())),
        pa.field("text", pa.string()),
        pa.field("vector", pa.list_(VECTOR_VALUE_TYPE, dimensions), nullable=False),
        pa.field(METADATA_TERMS, pa.list_(pa.string())),
    ])


# ---------------------------------------------------------------------------------------------
# Filters: every literal goes through sql_literal, never raw text
# ---------------------------------------------------------------------------------------------


def sql_literal(value: Any, field: str = "value") -> str:
    """A SQL literal for ``value``: strings single-quoted with quotes doubled, finite numbers, bools."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, np.integer, np.floating)):
        f = float(value)
        if not math.isfinite(f):
            raise InvalidInputError(field, f"must be a finite number, got {value!r}")
        return repr(f)
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidInputError(field, "must not contain NUL characters")
        return "'" + value.replace("'", "''") + "'"
    raise InvalidInputError(field, f"expected a string, number or bool, got {type(value).__name__}")


def as_timestamp(value: Any, field: str) -> float:
    """Unix seconds of ``value`` (a number, or a datetime: naive ones are UTC); InvalidInputError naming ``field`` otherwise."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return float(value.timestamp())
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidInputError(field, f"expected unix seconds (float) or a datetime, got {value!r}")
    f = float(value)
    if not math.isfinite(f):
        raise InvalidInputError(field, f"must be a finite number, got {value!r}")
    return f


def require_tenant_id(tenant_id: Any) -> str:
    """``tenant_id`` if it is a non-empty string, else InvalidInputError."""
    if not isinstance(tenant_id, str) or not tenant_id:
        raise InvalidInputError("tenant_id", "must be a non-empty string")
    return tenant_id


def table_name(tenant_id: str, prefixes: tuple[str, str, str] = TABLE_PREFIXES) -> str:
    """The LanceDB table that holds ``tenant_id``'s episodes (a pure function of the id); another
    index names its tables the same way with its own three ``prefixes`` (plain, hex, sha256)."""
    require_tenant_id(tenant_id)
    plain, hexed, hashed = prefixes
    if _PLAIN_TENANT.fullmatch(tenant_id):
        return plain + tenant_id
    raw = tenant_id.encode("utf-8")
    if len(raw) <= 100:
        return hexed + raw.hex()
    return hashed + hashlib.sha256(raw).hexdigest()


def is_tenant_table(name: str) -> bool:
    """Whether a table of the index folder holds one tenant's episodes (its name has a tenant table prefix)."""
    return name.startswith(TABLE_PREFIXES)


def _where_parts(where: dict[str, Any] | None) -> list[str]:
    if not where:
        return []
    if not isinstance(where, dict):
        raise InvalidInputError("where", f"expected a dict of filters, got {type(where).__name__}")
    unknown = set(where) - WHERE_KEYS
    if unknown:
        raise InvalidInputError(
            "where", f"unknown filter(s) {sorted(unknown)}; allowed: {sorted(WHERE_KEYS)}"
        )
    parts: list[str] = []
    for key in ("agent_role", "agent_id"):
        value = where.get(key)
        if value is not None:
            if not isinstance(value, str):
                raise InvalidInputError(f"where.{key}", f"expected a string, got {type(value).__name__}")
            parts.append(f"{key} = {sql_literal(value, f'where.{key}')}")
    canvas_ids = where.get("canvas_ids")
    if canvas_ids:
        if isinstance(canvas_ids, str):
            canvas_ids = [canvas_ids]
        lits = [sql_literal(c, "where.canvas_ids") if isinstance(c, str)
                else _raise(InvalidInputError("where.canvas_ids", f"expected strings, got {c!r}"))
                for c in canvas_ids]
        parts.append(f"canvas_id IN ({', '.join(lits)})")
    start, end = where.get("start"), where.get("end")
    if start is not None:
        parts.append(f"timestamp >= {sql_literal(as_timestamp(start, 'where.start'))}")
    if end is not None:
        parts.append(f"timestamp <= {sql_literal(as_timestamp(end, 'where.end'))}")
    if where.get("success_only"):
        parts.append("success = true")
    episode_ids = where.get("episode_ids")
    if episode_ids is not None:
        if isinstance(episode_ids, str) or not isinstance(episode_ids, (list, tuple, set, frozenset)):
            raise InvalidInputError("where.episode_ids", f"expected a list of strings, got {type(episode_ids).__name__}")
        parts.append(f"episode_id IN ({id_literals(episode_ids)})" if episode_ids else "false")
    # the terms every episode passing a metadata filter carries (memory/metadata.py filter_terms)
    terms = where.get(METADATA_TERMS)
    if terms:
        parts.append(f"array_has_all({METADATA_TERMS}, [{_literals(terms, 'where.metadata_terms')}])")
    for group in where.get("metadata_any") or []:
        parts.append(f"array_has_any({METADATA_TERMS}, [{_literals(group, 'where.metadata_any')}])")
    return parts


_LITERALS: list[tuple[Any, str]] = []  # the last ids object (held: its id() stays its own) and its literals


def id_literals(episode_ids: Any) -> str:
    """The SQL literals of a filter's episode ids, comma-separated (one pass, where a
    ``sql_literal`` call each took 30 ms for 5k ids), kept for the same ids object: recall passes
    the same set while the store's feedback does not change."""
    held = _LITERALS[0] if _LITERALS else None
    if held is not None and held[0] is episode_ids:
        return held[1]
    if not all(isinstance(e, str) for e in episode_ids):
        raise InvalidInputError("where.episode_ids", "expected a list of strings")
    text = "', '".join(e.replace("'", "''") for e in episode_ids)
    if "\x00" in text:
        raise InvalidInputError("where.episode_ids", "must not contain NUL characters")
    _LITERALS[:] = [(episode_ids, f"'{text}'")]
    return _LITERALS[0][1]


def _literals(values: Any, field: str) -> str:
    if isinstance(values, str) or not isinstance(values, (list, tuple)) or not values \
            or not all(isinstance(v, str) for v in values):
        raise InvalidInputError(field, f"expected a non-empty list of strings, got {values!r}")
    return ", ".join(sql_literal(v, field) for v in values)


def metadata_filter(where: dict[str, Any] | None = None) -> str | None:
    """The SQL predicate for the optional recall filters alone (None: no filter).

    ``where`` keys: ``agent_role`` / ``agent_id`` (str), ``canvas_ids`` (list of str; empty means no filter),
    ``start`` / ``end`` (unix seconds or datetime, inclusive), ``success_only`` (bool),
    ``episode_ids`` (list of str: only these episodes, an empty list passes none; what recall makes
    of the filters whose values only the store holds: a session, feedback).
    """
    parts = _where_parts(where)
    if not parts:
        return None
    return " AND ".join(f"({p})" for p in parts)


def build_filter(tenant_id: str, where: dict[str, Any] | None = None) -> str:
    """The SQL predicate for a tenant and the optional recall filters (see ``metadata_filter``).

    The index no longer needs the tenant part (each tenant has its own table); this is kept for
    callers that filter a table holding several tenants.
    """
    parts = [f"tenant_id = {sql_literal(require_tenant_id(tenant_id), 'tenant_id')}"] + _where_parts(where)
    if len(parts) == 1:
        return parts[0]
    return " AND ".join(f"({p})" for p in parts)


def _raise(exc: Exception) -> Any:
    raise exc


def first_per_episode(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """First row of each episode_id (a defensive guard: the table should hold one per id)."""
    seen: set[str] = set()
    out = []
    for r in results:
        if r["episode_id"] not in seen:
            seen.add(r["episode_id"])
            out.append(r)
    return out


def is_commit_conflict(exc: BaseException) -> bool:
    """Whether a failed commit lost a race with another writer (and is worth retrying)."""
    text = str(exc).lower()
    return "conflict" in text or "retryable" in text or "concurrent" in text
