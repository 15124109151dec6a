"""Running a query on a projection in a query child (``pool``), within its deadline, row cap and
byte cap, and the engine's values as the Neo4j store returns them."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

from worldgraph.errors import CypherInputError, CypherQueryError, ReadOnlyQueryError
from worldgraph.kg import cypher_guard as guard
from worldgraph.kg.codec import loads
from worldgraph.kg.embedded.cypher.child import encode_params
from worldgraph.kg.embedded.cypher.model import ENGINE
from worldgraph.kg.embedded.cypher.pool import ChildPool, ChildTimeout
from worldgraph.kg.embedded.cypher.text import ALIAS_PREFIX, NAME, blank
from worldgraph.kg.neo4j import schema as q
from worldgraph.kg.store import Record

# The engine's buffer pool of a query child: four times its projection file, within [MIN_POOL,
# the setting cypher_child_memory_mb] (pages are allocated as queries read them; a pool of 64 MiB
# could not sort a small tenant's episodes); the child's address space beyond what the engine
# reserves (its database size, rounded up to a power of two, and ~256 MiB of its own) is capped at
# the setting too (RLIMIT_DATA).
MIN_POOL = 256 << 20
ENGINE_RESERVED = 256 << 20


def plain(value: Any) -> Any:
    """An engine value as the Neo4j store's ``cypher_guard.plain`` returns the same value."""
    if isinstance(value, dict):
        if "_nodes" in value and "_rels" in value:  # a path: [node, rel, node, ...]
            nodes, rels = value["_nodes"], value["_rels"]
            out: list[Any] = [plain(nodes[0])] if nodes else []
            for k, rel in enumerate(rels):
                out += [plain(rel), plain(nodes[k + 1])]
            return out
        label = value.get("_LABEL")
        entity = "_ID" in value and label is not None
        props = {k: plain(v) for k, v in value.items() if not (entity and (k.startswith("_") or v is None))}
        if entity and isinstance(props.get("record"), str):
            try:
                props["record"] = loads(props["record"])
            except ValueError:
                pass
            if label == "Episode" and isinstance(props["record"], dict):
                props["record"].update({k: props.get(k) for k in q.EPISODE_STATE})
        return props
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def timed_out(timeout: float) -> CypherQueryError:
    return CypherQueryError(f"the query ran longer than {timeout} s (cypher_timeout_seconds); it was stopped. "
                            "Narrow it or add LIMIT")


def sizes(path: Path, memory_cap: int) -> tuple[int, int, int]:
    """(buffer pool, database size, RLIMIT_DATA) of a child that opens ``path`` (see MIN_POOL)."""
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    pool = min(max(MIN_POOL, 4 * size), max(MIN_POOL, memory_cap))
    db_size = 1 << max(28, (2 * size).bit_length())
    return pool, db_size, db_size + ENGINE_RESERVED + memory_cap


def check_params(bound: Mapping[str, Any]) -> None:
    """What the engine cannot bind, named: a value JSON cannot hold, a list whose elements are not
    all of one type, nested lists and maps included (its lists have one element type; Neo4j's do
    not)."""
    for key, value in bound.items():
        try:
            orjson.dumps(value)
        except TypeError as exc:
            if not isinstance(value, (bytes, bytearray)) and "not JSON serializable" in str(exc):
                raise CypherInputError(f"params.{key}", f"must be JSON data (string, number, boolean, null, list "
                                        f"or object): {exc}") from None
        _kind(value, f"params.{key}")


def _kind(v: Any, path: str) -> Any:
    """The engine's type of ``v`` (None for null), refusing a list that mixes types. Walked with a
    stack of its own: check_params has bounded the nesting."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, dict):
        return ("map", tuple(sorted((k, _kind(x, f"{path}.{k}")) for k, x in v.items())))
    if isinstance(v, (list, tuple)):
        kinds = {_kind(x, f"{path}[{i}]") for i, x in enumerate(v)} - {None}
        if len(kinds) > 1:
            raise CypherInputError(path, f"mixes values of different types ({', '.join(sorted(map(_name, kinds)))}); "
                                   f"the embedded store's engine ({ENGINE}) holds lists of one type: pass one list "
                                   "per type, or strings")
        return ("list", next(iter(kinds), None))
    return "string" if isinstance(v, str) else type(v).__name__


def _name(kind: Any) -> str:
    if isinstance(kind, str):
        return kind
    return f"list of {_name(kind[1]) if kind[1] is not None else 'nulls'}" if kind[0] == "list" else "map"


def run(pool: ChildPool, path: Path, tenant_id: str, query: str, text: str, params: Mapping[str, Any] | None, *,
        timeout: float, deadline: float, max_rows: int, max_bytes: int, memory_cap: int) -> list[Record]:
    """Rows of ``text`` (``query`` checked and translated) on the projection file ``path``, run by a
    query child of ``pool`` by ``deadline`` (monotonic): ``CypherQueryError`` at the deadline, and
    the pool's ``ChildCrashed`` / ``ChildClosed`` for the store to handle."""
    bound = guard.bind_params(tenant_id, params)
    check_params(bound)
    used = set(re.findall(rf"\$({NAME})", blank(text)))
    args = encode_params({k: v for k, v in bound.items() if k in used})
    if time.monotonic() >= deadline:
        raise timed_out(timeout)
    buffer_pool, db_size, memory = sizes(path, memory_cap)
    try:
        answer = pool.query(tenant_id, path, {"op": "query", "text": text, "params": args, "max_rows": max_rows,
                                              "max_bytes": max_bytes},
                            deadline=deadline, limit=2 * max_bytes + (1 << 20),
                            opening={"buffer_pool": buffer_pool, "max_db_size": db_size, "memory": memory})
    except ChildTimeout:
        raise timed_out(timeout) from None
    if "error" in answer:
        raise _error(answer, query, timeout, max_rows, max_bytes)
    # a RETURN alias renamed by translate() (ALIAS_PREFIX) is named as the query wrote it; RETURN *
    # would also show the names translate() gave anonymous relationships
    names = [n[len(ALIAS_PREFIX):] if n.startswith(ALIAS_PREFIX) else n for n in answer["columns"]]
    return [{k: plain(v) for k, v in zip(names, row, strict=True) if not k.startswith("_wg_")}
            for row in answer["rows"]]


def _error(answer: Mapping[str, Any], query: str, timeout: float, max_rows: int, max_bytes: int) -> Exception:
    kind, msg = answer.get("kind"), str(answer.get("error", ""))
    if kind == "rows":
        return CypherInputError("query", f"returns more than {max_rows} rows (cypher_max_rows); add LIMIT or aggregate")
    if kind == "bytes":
        return CypherInputError("query", f"returns more than {max_bytes} bytes (cypher_max_result_bytes); return "
                                "fewer or smaller values (e.g. properties instead of whole nodes), or add LIMIT")
    if kind == "statements":
        return CypherQueryError(msg)
    low = msg.lower()
    if "codec can't decode" in low or "surrogate" in low:
        return CypherQueryError("the query makes a string that is not valid Unicode (a lone surrogate such as "
                                "'\\uD800' in a string literal?); write whole characters, or pairs of surrogates")
    if "interrupt" in low or "timeout" in low:
        return timed_out(timeout)
    if "read-only database" in low:
        return ReadOnlyQueryError("cypher() is read-only: the query would write, and the projection it runs on is "
                                  "opened read-only. Use the WorldModel API to change data.")
    hint = ""
    word = re.search(r"mismatched input '([A-Za-z_]\w*)'", msg)
    if word and re.search(rf"(?<![\w`]){re.escape(word.group(1))}(?![\w`])", query):
        hint = (f" ({word.group(1)!r} is a reserved word in {ENGINE}: write it in backticks, "
                f"`{word.group(1)}`, or use another name)")
    return CypherQueryError(f"the embedded store's Cypher engine ({ENGINE}) could not run the query: "
                            f"{msg or 'no reason given'}{hint}")
