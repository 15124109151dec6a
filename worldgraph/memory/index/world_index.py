"""The world index: the sentences of every world record (entities, states, facts, rules) of a
tenant, with their vectors, in the LanceDB sidecar beside the episodes (docs/architecture.md,
"The index").

Derived data, like the episode index: the store is the system of record, and every row can be
written again from it (``WorldIndexer`` in ``world/search/indexing.py``). One table per tenant,
named with the index's own prefixes (``wf-`` / ``wfh-`` / ``wfs-``: none starts with ``ep``, so
the episode index never takes one of these tables for its own). A row is one record of one
environment: ``id`` (the record's id), ``env_name``, ``kind`` (entity, state, fact, rule; a
``marker`` row per environment holds the graph version its rows were written at), ``text``,
``links`` (the ids of the nodes the record links: an edge's ends, a state's entity, a rule's
nodes; what a search reads from the store with it), ``action`` (the action the row names: a
transition's, or the one a containment came after) and ``vector``. What the record says beyond
its text (current or closed, confidence, evidence) is never copied here: a search reads it from
the store.

A world graph is small next to a tenant's episodes (a 10k-node world is a few tens of thousands
of rows), so a search runs in process over a copy of the table (``Snapshot``: unit vectors and
BM25 postings cut by LanceDB's own tokenizer, as ``small.py`` does for small episode tables),
taken at the table's newest version: a write of this or another process, or a forget, is seen by
the next search. No ANN or full-text index is built, so there is no maintenance child; ``purge``
rewrites the fragments holding deleted rows and deletes every older version's files.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import EmbeddingDimensionError, InvalidInputError, ReadOnlyError
from worldgraph.filemodes import private_dir
from worldgraph.locks import file_lock
from worldgraph.memory.index import objectstore
from worldgraph.memory.index.lance_import import import_lancedb
from worldgraph.memory.index.schema import PK_METADATA, VECTOR_VALUE_TYPE, sql_literal, table_name
from worldgraph.memory.index.small import K1, B, terms

log = logging.getLogger(__name__)

TABLE_PREFIXES = ("wf-", "wfh-", "wfs-")
KINDS = ("entity", "state", "fact", "rule")
MARKER = "marker"  # the kind of an environment's marker row (the graph version its rows are of)


def world_table_name(tenant_id: str) -> str:
    """The table that holds ``tenant_id``'s world rows (named as the episode index's, with this
    index's prefixes)."""
    return table_name(tenant_id, TABLE_PREFIXES)


def is_world_table(name: str) -> bool:
    """Whether a table of the index folder holds one tenant's world rows."""
    return name.startswith(TABLE_PREFIXES)


def marker_id(env_name: str) -> str:
    """The id of an environment's marker row (never a record id: those are UUIDs)."""
    return "marker:" + env_name


def world_schema(dimensions: int) -> pa.Schema:
    return pa.schema([
        pa.field("id", pa.string(), nullable=False, metadata={PK_METADATA: "true"}),
        pa.field("tenant_id", pa.string(), nullable=False),
        pa.field("env_name", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("links", pa.list_(pa.string())),  # the node ids the record links (ends, entity, rule's nodes)
        pa.field("action", pa.string()),  # the action the row names ("" for none)
        pa.field("vector", pa.list_(VECTOR_VALUE_TYPE, dimensions), nullable=False),
    ])


@dataclass
class Snapshot:
    """One version of a tenant's table, in memory: what a search reads."""

    version: int | None
    ids: list[str]
    envs: list[str]
    kinds: list[str]
    texts: list[str]
    links: list[list[str]]
    actions: list[str]
    unit: np.ndarray  # (n, d) float32, rows scaled to length 1
    markers: dict[str, int] = field(default_factory=dict)  # env -> graph version of its rows
    rows_of_env: dict[str, np.ndarray] = field(default_factory=dict)  # env -> searchable rows
    postings: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # term -> (rows, counts)
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    searchable: int = 0
    row_of: dict[str, int] = field(default_factory=dict)  # id -> row
    env_unit: dict[str, np.ndarray] = field(default_factory=dict)  # env -> its rows' unit vectors (a cache)

    @classmethod
    def build(cls, version: int | None, tbl: pa.Table, dimensions: int, cache: dict[str, list[str]]) -> Snapshot:
        n = tbl.num_rows
        ids = tbl.column("id").to_pylist()
        envs = tbl.column("env_name").to_pylist()
        kinds = tbl.column("kind").to_pylist()
        texts = tbl.column("text").to_pylist()
        links = [x or [] for x in tbl.column("links").to_pylist()]
        actions = [x or "" for x in tbl.column("action").to_pylist()]
        if n:
            vec = tbl.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
            vec = np.asarray(vec, dtype=np.float32).reshape(n, dimensions)
        else:
            vec = np.zeros((0, dimensions), np.float32)
        norms = np.linalg.norm(vec, axis=1, keepdims=True)
        snap = cls(version, ids, envs, kinds, texts, links, actions, vec / np.where(norms == 0, 1.0, norms))
        by_env: dict[str, list[int]] = {}
        post: dict[str, tuple[list[int], list[int]]] = {}
        lengths = np.zeros(n, np.float32)
        for i in range(n):
            if kinds[i] == MARKER:
                try:
                    snap.markers[envs[i]] = int(texts[i])
                except ValueError:
                    pass
                continue
            by_env.setdefault(envs[i], []).append(i)
            words = cache.get(texts[i])
            if words is None:
                words = cache[texts[i]] = terms(texts[i])
            lengths[i] = len(words)
            counts: dict[str, int] = {}
            for w in words:
                counts[w] = counts.get(w, 0) + 1
            for w, c in counts.items():
                rows, tfs = post.setdefault(w, ([], []))
                rows.append(i)
                tfs.append(c)
        snap.rows_of_env = {e: np.asarray(r, dtype=np.int64) for e, r in by_env.items()}
        snap.postings = {w: (np.asarray(r, dtype=np.int64), np.asarray(c, dtype=np.float32))
                         for w, (r, c) in post.items()}
        snap.lengths = lengths
        snap.searchable = sum(len(r) for r in by_env.values())
        snap.row_of = {i: n for n, i in enumerate(ids)}
        return snap

    def rows(self, env_names: list[str] | None) -> np.ndarray:
        """The searchable rows of these environments (None: of every one)."""
        names = list(self.rows_of_env) if env_names is None else env_names
        parts = [self.rows_of_env[e] for e in names if e in self.rows_of_env]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def cosine(self, q: np.ndarray, env_names: list[str] | None) -> np.ndarray:
        """The cosine of every searchable row of these environments (``rows``' order) with ``q``.
        One environment's vectors are kept together (a copy per snapshot), so a search reads
        only them; every environment: all the rows, then those searchable. ``einsum`` and not a
        BLAS product: a multi-threaded BLAS matrix-vector product of 20k rows took ~25 ms on a
        loaded 2-core machine, its threads waiting for each other, ~10 ms in one thread."""
        norm = float(np.linalg.norm(q))
        unit = q / norm if norm else q
        if env_names is not None and len(env_names) == 1:
            env = env_names[0]
            block = self.env_unit.get(env)
            if block is None:
                block = self.env_unit[env] = np.ascontiguousarray(self.unit[self.rows_of_env.get(
                    env, np.zeros(0, np.int64))])
            out: np.ndarray = np.einsum("ij,j->i", block, unit)
            return out
        every: np.ndarray = np.einsum("ij,j->i", self.unit, unit)
        picked: np.ndarray = every[self.rows(env_names)]
        return picked

    def bm25(self, text: str, rows: np.ndarray) -> np.ndarray:
        """BM25 of every row of ``rows`` for ``text`` (LanceDB's terms and scoring; 0 for a row
        without a query term). The statistics are those of the whole table."""
        out = np.zeros(len(self.ids), np.float32)
        n = max(self.searchable, 1)
        avg = float(self.lengths.sum()) / n or 1.0
        for w in dict.fromkeys(terms(text)):
            hit = self.postings.get(w)
            if hit is None:
                continue
            where, tf = hit
            idf = math.log(1.0 + (n - len(where) + 0.5) / (len(where) + 0.5))
            out[where] += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * self.lengths[where] / avg))
        picked: np.ndarray = out[rows]
        return picked


class WorldIndex:
    """The world rows of every tenant at ``path`` (the episode index's folder or URI)."""

    def __init__(self, path: str | Path, dimensions: int, config: WorldGraphConfig | None = None,
                 read_only: bool = False) -> None:
        lancedb = import_lancedb()  # without the REST client it does not need (lance_import.py)

        self.config = config if config is not None else WorldGraphConfig()
        self.path = str(path)
        self.dimensions = int(dimensions)
        self.schema = world_schema(self.dimensions)
        self.read_only = read_only
        self._is_local = "://" not in self.path
        self._absent = read_only and self._is_local and not Path(self.path).is_dir()
        if self._is_local and not read_only:
            private_dir(self.path)
        deadline = self.config.object_store_timeout_seconds
        with objectstore.object_store_errors(self.path, "opening the world index"):
            self._db: Any = None if self._absent else lancedb.connect(
                self.path, read_consistency_interval=timedelta(seconds=0),
                storage_options=objectstore.storage_options(self.path, deadline))
        self._lock = threading.RLock()
        self._tables: dict[str, Any] = {}  # table name -> lancedb table
        self._datasets: dict[str, Any] = {}  # table name -> pylance dataset (a version)
        self._snapshots: dict[str, Snapshot] = {}
        self._terms: dict[str, list[str]] = {}  # text -> its terms (texts repeat across versions)

    # -- tables ------------------------------------------------------------------------------

    def _writable(self, operation: str) -> None:
        if self.read_only:
            raise ReadOnlyError(operation, f"the world index at {self.path} was opened read-only")

    @contextmanager
    def _write_lock(self, name: str) -> Iterator[None]:
        """One writer of a table at a time: this process's threads and, on a local folder, other
        processes (an object store relies on LanceDB's conditional commits)."""
        with self._lock:
            if not self._is_local:
                yield
                return
            with file_lock(Path(self.path) / f".write.{name}.lock"):
                yield

    def _table(self, tenant_id: str, create: bool = False) -> Any | None:
        name = world_table_name(tenant_id)
        table = self._tables.get(name)
        if table is not None:
            return table
        with self._lock:
            if self._db is None or (self._is_local and not (Path(self.path) / f"{name}.lance").is_dir()):
                table = None
            else:
                try:
                    table = self._db.open_table(name)
                except Exception as exc:  # noqa: BLE001 - missing: made below or None
                    if "not found" not in str(exc).lower() and "does not exist" not in str(exc).lower():
                        raise
                    table = None
            if table is not None and self._vector_size(table) != self.dimensions:
                # built with another embedder: derived data, dropped and written again from the store
                log.warning("world index table %s has %s-d vectors, this process %d-d: rebuilding it",
                            name, self._vector_size(table), self.dimensions)
                if self.read_only:
                    return None
                self._db.drop_table(name)
                table = None
            if table is None:
                if not create:
                    return None
                self._writable("creating a world index table")
                table = self._db.create_table(name, schema=self.schema, exist_ok=True)
            self._tables[name] = table
            return table

    @staticmethod
    def _vector_size(table: Any) -> int | None:
        return getattr(table.schema.field("vector").type, "list_size", None)

    def tenant_tables(self) -> list[str]:
        """Names of the world tables that exist."""
        if self._db is None:
            return []
        names: list[str] = []
        token = None
        while True:
            resp = self._db.list_tables(page_token=token)
            names.extend(resp.tables or [])
            token = resp.page_token
            if not token:
                return sorted(n for n in names if is_world_table(n))

    # -- writes ------------------------------------------------------------------------------

    def _arrow(self, tenant_id: str, rows: list[dict[str, Any]]) -> pa.Table:
        d = self.dimensions
        vectors = np.zeros((len(rows), d), np.float32)
        cols: dict[str, list[Any]] = {"id": [], "tenant_id": [], "env_name": [], "kind": [], "text": [], "links": [],
                                     "action": []}
        for i, row in enumerate(rows):
            vec = np.asarray(row["vector"], dtype=np.float32).reshape(-1)
            if vec.shape[0] != d or not np.isfinite(vec).all():
                raise EmbeddingDimensionError(f"rows[{i}].vector", f"expected {d} finite numbers")
            vectors[i] = vec
            cols["id"].append(str(row["id"]))
            cols["tenant_id"].append(tenant_id)
            cols["env_name"].append(str(row["env_name"]))
            cols["kind"].append(str(row["kind"]))
            cols["text"].append(str(row["text"]))
            cols["links"].append([str(x) for x in row.get("links") or []])
            cols["action"].append(str(row.get("action") or ""))
        arrays: list[pa.Array] = [pa.array(cols[f.name], type=f.type) for f in self.schema if f.name != "vector"]
        values = pa.array(vectors.reshape(-1)).cast(VECTOR_VALUE_TYPE)
        arrays.append(pa.FixedSizeListArray.from_arrays(values, d))
        return pa.Table.from_arrays(arrays, schema=self.schema)

    @objectstore.guarded("writing world index rows")
    def write(self, tenant_id: str, rows: list[dict[str, Any]], delete_ids: Iterable[str] = ()) -> None:
        """Insert or replace ``rows`` (id, env_name, kind, text, vector) by id and delete the rows
        of ``delete_ids``, in one table of ``tenant_id``."""
        self._writable("writing world index rows")
        gone = list(dict.fromkeys(delete_ids))
        if not rows and not gone:
            return
        table = self._table(tenant_id, create=True)
        assert table is not None  # made when missing
        name = world_table_name(tenant_id)
        with self._write_lock(name):
            if gone:
                for start in range(0, len(gone), 1000):
                    table.delete("id IN (" + ", ".join(sql_literal(i, "ids") for i in gone[start:start + 1000]) + ")")
            if rows:
                last = {str(r["id"]): r for r in rows}  # the last row of an id wins
                data = self._arrow(tenant_id, list(last.values()))
                if table.count_rows() == 0:
                    table.add(data)
                else:
                    table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(data)

    @objectstore.guarded("deleting world index rows")
    def delete_env(self, tenant_id: str, env_name: str) -> None:
        """Every row of one environment (a forgotten environment, a replaced one)."""
        self._writable("deleting world index rows")
        table = self._table(tenant_id)
        if table is None:
            return
        with self._write_lock(world_table_name(tenant_id)):
            table.delete(f"env_name = {sql_literal(env_name, 'env_name')}")

    def release(self, tenant_id: str) -> None:
        """Let go of the tenant's table: its handle, dataset and in-process copy (a purge in
        another process removed rows they may hold), and the cached terms of every text."""
        name = world_table_name(tenant_id)
        with self._lock:
            self._tables.pop(name, None)
            self._datasets.pop(name, None)
            self._snapshots.pop(name, None)
            self._terms.clear()

    @objectstore.guarded("deleting world index rows")
    def drop_tenant(self, tenant_id: str) -> bool:
        """Drop the tenant's table (a forgotten tenant, a rebuild); whether there was one."""
        self._writable("dropping a world index table")
        name = world_table_name(tenant_id)
        with self._write_lock(name):
            self.release(tenant_id)
            if name not in self.tenant_tables():
                return False
            self._db.drop_table(name)
            return True

    @objectstore.guarded("purging the world index")
    def purge(self, tenants: Iterable[str]) -> int:
        """Rewrite the fragments of these tenants' tables that hold deleted rows and delete every
        older version's files: afterwards no file of the table holds a deleted row. Returns how
        many tables were rewritten."""
        self._writable("purging the world index")
        done = 0
        for tenant in dict.fromkeys(tenants):
            table = self._table(tenant)
            if table is None:
                continue
            with self._write_lock(world_table_name(tenant)):
                ds = table.to_lance()
                if any(f.metadata.deletion_file is not None for f in ds.get_fragments()):
                    ds.optimize.compact_files(materialize_deletions=True, materialize_deletions_threshold=0.0)
                    done += 1
                table.checkout_latest()
                # every file no version names too: what a writer killed before its commit left may
                # copy the deleted rows; under the write lock none is in progress (a local folder;
                # an object store has no lock, and there LanceDB deletes them once 7 days old)
                table.to_lance().cleanup_old_versions(older_than=timedelta(0), delete_unverified=self._is_local)
                table.checkout_latest()
                self._datasets.pop(world_table_name(tenant), None)
                self._snapshots.pop(world_table_name(tenant), None)
        return done

    # -- reads -------------------------------------------------------------------------------

    @objectstore.guarded("reading the world index")
    def snapshot(self, tenant_id: str) -> Snapshot | None:
        """The tenant's rows at the table's newest version (None: no table)."""
        name = world_table_name(tenant_id)
        table = self._table(tenant_id)
        if table is None:
            return None
        with self._lock:
            ds = self._datasets.get(name)
            if ds is None:
                ds = self._datasets[name] = table.to_lance()
            elif ds.latest_version != ds.version:
                ds = self._datasets[name] = ds.checkout_version(ds.latest_version)
            snap = self._snapshots.get(name)
            if snap is not None and snap.version == ds.version:
                return snap
            columns = ["id", "env_name", "kind", "text", "links", "action", "vector"]
            snap = Snapshot.build(ds.version, ds.to_table(columns=columns), self.dimensions, self._terms)
            if len(self._terms) > 4 * max(len(snap.texts), 10_000):
                self._terms.clear()
            self._snapshots[name] = snap
            return snap

    def rows_of_env(self, tenant_id: str, env_name: str) -> dict[str, tuple[str, tuple[str, ...]]]:
        """id -> (text, links) of the environment's rows (markers included), for a sync to compare."""
        snap = self.snapshot(tenant_id)
        if snap is None:
            return {}
        return {i: (t, tuple(ln)) for i, e, t, ln in zip(snap.ids, snap.envs, snap.texts, snap.links)
                if e == env_name}

    def count(self, tenant_id: str) -> int:
        snap = self.snapshot(tenant_id)
        return 0 if snap is None else snap.searchable

    def check_query(self, vector: Any) -> np.ndarray:
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dimensions:
            raise InvalidInputError("vector", f"expected length {self.dimensions}, got {q.shape[0]}")
        return q
