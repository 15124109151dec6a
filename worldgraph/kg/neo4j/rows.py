"""Helpers of the Neo4j store modules: UNWIND rows, batching, JSON records in and out."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from neo4j import ManagedTransaction, Result

from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.neo4j import queries as q
from worldgraph.kg.records import MetaRecord
from worldgraph.kg.store import Record

BATCH = 5000  # rows per UNWIND statement; one public call still writes in one transaction


def dedupe(records: Iterable[Record]) -> list[Record]:
    """One row per id (the last one wins, as successive upserts would), first-seen order."""
    out: dict[str, Record] = {}
    for rec in records:
        out[rec["id"]] = rec
    return list(out.values())


def unwind_row(rec: Record, keys: tuple[str, ...], **props: Any) -> dict[str, Any]:
    """An UNWIND row: id, the scalar properties queries use (``props`` override), the record as JSON."""
    scalars = {k: v for k in keys if _is_property(v := rec.get(k))}
    return {"id": rec["id"], "props": {**scalars, **props}, "record": dumps(rec)}


def _is_property(value: Any) -> bool:
    """None, a scalar or a list of strings: what Neo4j can hold as a property."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def run_batched(tx: ManagedTransaction, query: str, rows: list[dict[str, Any]], **params: Any) -> list[Result]:
    """Send ``rows`` as $rows in chunks of BATCH, without waiting for them to run.

    The server executes a statement while Python builds and packs the next one's rows (two
    processes, two cores); it runs a transaction's statements in order, and the driver reads every
    pending result before the commit, so an error still aborts the whole transaction. Reading a
    column of the returned results (``column``) waits for them."""
    return [tx.run(query, {**params, "rows": chunk}) for chunk in chunks(rows, BATCH)]


def column(results: list[Result], name: str) -> list[Any]:
    """The values of column ``name`` in every row of ``results`` (waits for them)."""
    return [r[name] for result in results for r in result]


def episode_of_row(row: Any) -> Record:
    """An episode record from its ``record`` JSON and its indexing state (q.EPISODE_COLUMNS)."""
    rec: Record = loads(row["record"])
    rec["index_status"], rec["index_error"] = row["index_status"], row["index_error"]
    return rec


def decode(result: Iterable[Any]) -> list[Record]:
    return [loads(r["record"]) for r in result if r["record"] is not None]


def by_id(records: list[Record]) -> list[Record]:
    """Sorted by id in code-point order, exactly as SQLite's ORDER BY id sorts UTF-8 text."""
    return sorted(records, key=lambda r: r["id"])


def set_meta(tx: ManagedTransaction, tenant_id: str, env_name: str, meta: MetaRecord) -> None:
    tx.run(q.SET_META, tenant_id=tenant_id, env_name=env_name, record=dumps(meta),
           graph_version=meta.get("graph_version"), updated_at=meta.get("updated_at")).consume()
