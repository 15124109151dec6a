"""The projection: one tenant's graph in a LadybugDB database, filled from the loaded columns with
COPY FROM Arrow tables; the few-row writes a world refresh makes (``refresh``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from worldgraph.errors import CypherQueryError
from worldgraph.filemodes import PRIVATE_FILE
from worldgraph.kg.embedded.cypher.child import reader_lock, writer_lock
from worldgraph.kg.embedded.cypher.heap import blank_allocations
from worldgraph.kg.embedded.cypher.load import WorldPart, WorldRows
from worldgraph.kg.embedded.cypher.model import (
    EDGE_REL_TYPES,
    ENGINE,
    NODE_TABLES,
    REL_KINDS,
    REL_TABLES,
    WORLD_NODE_TABLES,
    WORLD_REL_TABLES,
    Columns,
    Gens,
    Nodes,
    Rels,
    node_names,
    rel_names,
)
from worldgraph.kg.embedded.cypher.saved import claim, release

# A table (or a relationship table's pair of ends) of at most this many rows is filled with one
# UNWIND ... CREATE instead of COPY: COPY sets up buffers for a whole node group whatever the rows
# (~20 MB per table: a tenant of a few rows held ~145 MB in memory; ~4 MB per table this way), and
# up to ~150 rows the statement is no slower (5 rows: 11 ms against 23; 1,000: 87 ms against 24).
INSERT_MAX = 200
# A refresh's writes stay in the database's log (children read it) until it passes this size: a
# checkpoint of a 100k-episode projection took ~0.3 s, the refresh of a 20-item delta ~0.03 s.
CHECKPOINT_LOG_BYTES = 16 << 20


_KUZU_TYPES = {"string": "STRING", "int64": "INT64", "double": "DOUBLE", "bool": "BOOLEAN",
               "list<item: string>": "STRING[]"}
_ARROW_TYPES = {"STRING": "string", "INT64": "int64", "DOUBLE": "float64", "BOOLEAN": "bool", "STRING[]": "list<string>"}


def _array(name: str, values: list[Any], kind: str | None = None) -> tuple[Any, str]:
    """One column as an Arrow array and its LadybugDB type, each value as Neo4j holds it (ints and
    floats mixed become doubles; all-null columns are strings). With ``kind`` (a table's existing
    column), the values must fit it: CypherQueryError if they do not."""
    import pyarrow as pa

    try:
        arr = values if isinstance(values, pa.Array) else pa.array(values)  # (load.arrow_episodes' columns)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise CypherQueryError(f"cannot project the property {name!r} into {ENGINE}: its values mix types ({exc})") \
            from None
    t = arr.type
    if pa.types.is_null(t):
        arr = arr.cast(pa.string())
    elif pa.types.is_integer(t):
        arr = arr.cast(pa.int64())
    elif pa.types.is_floating(t):
        arr = arr.cast(pa.float64())
    elif pa.types.is_large_string(t):
        arr = arr.cast(pa.string())
    elif pa.types.is_list(t) and pa.types.is_null(t.value_type):
        arr = arr.cast(pa.list_(pa.string()))
    got = _KUZU_TYPES.get(str(arr.type))
    if got is None:
        raise CypherQueryError(f"cannot project the property {name!r} ({arr.type}) into {ENGINE}")
    if kind is not None and got != kind:
        if arr.null_count == len(arr) or (got, kind) == ("INT64", "DOUBLE"):
            arr = arr.cast(pa.list_(pa.string()) if kind == "STRING[]" else _ARROW_TYPES[kind])
        else:
            raise CypherQueryError(f"the property {name!r} is {got} in new rows, {kind} in the projection")
        got = kind
    return arr, got


class Projection:
    """One tenant's graph in a LadybugDB database file (see the package docstring), written by this
    process and read by query children (``pool``). It is written only in a write window
    (``writing``): built by ``fill`` when new, then brought up to date by a refresh; between writes
    it is *sealed* (checkpointed, unlocked; the engine's handle stays open here, idle), so the
    children that open it read-only see a whole file."""

    def __init__(self, tenant_id: str, path: Path, kinds: dict[str, dict[str, str]] | None = None,
                 buffer_pool_bytes: int = 0, writer: bool = True) -> None:
        """The database at ``path``: opened for writing (``writer``: a new one, to be filled) or left
        sealed (a saved one, with the ``kinds`` of its columns). Its world part's rows and index
        are not in memory (``world`` None) until its first world refresh loads them (from
        ``opened_raw`` when the opener read the rows it holds, else by reloading that part).
        RuntimeError (LadybugDB's) if it cannot be opened for writing; ProjectionBusy when query
        children (of any process) hold it."""
        self.tenant_id = tenant_id
        self.path = path
        self.buffer_pool_bytes = buffer_pool_bytes
        self.db: Any = None
        self.conn: Any = None
        self._lock_fd: int | None = None
        self.closed = False  # replaced or dropped: hand it out no more
        self.kinds: dict[str, dict[str, str]] = dict(kinds or {})  # table -> column -> LadybugDB type
        self.episodes: set[str] | None = None  # ids, for the world part's (:Scene)-[:FROM_EPISODE]->(:Episode)
        self.world: WorldPart | None = None
        # what the episode part holds, as its last row-by-row refresh left it (cypher.episodes)
        self.episode_state: Any = None
        # opened from a file: the world rows it holds, read when it was opened (``know_world``)
        self.opened_raw: WorldRows | None = None
        self.gens: Gens = ((0, ""), (0, ""))  # the store's generations it holds
        # "full", or "world": the world part alone (no episode tables, no FROM_EPISODE), for the
        # queries that reach nothing else (reach.world_only); a full projection serves every query
        self.scope = "full"
        # reopened from a file whose episode part is behind the store's: checked record by record
        # at its first refresh (cypher.episodes), and rebuilt if another history wrote it
        self.episodes_unverified = False
        # reopened from a file whose world part is behind: its rows are read from its own tables
        # (held_world_rows) and its first refresh compares them with all of the tenant's rows
        self.world_unverified = False
        if writer:
            self._open_writer()

    def _open_writer(self) -> None:
        """Open the file for writing (and hold it locked for writing, ``_lock``): no query child may
        hold it (their shared lock, ``child``), nor another writer (``claim`` in this process, the
        engine's lock across processes)."""
        import ladybug

        if not claim(self.path):
            raise RuntimeError(f"{self.path} is open in this process already")
        try:
            if self.path.exists():  # (a new file has no reader yet: it is locked once made)
                self._lock()
            # buffer_pool_bytes bounds the engine's memory (0: LadybugDB's default, most of the
            # machine's memory; it is allocated as pages are used). Not bounded by default: a
            # 20k-episode tenant (13 MiB SQLite file) did not load in 8x its file size (bench/README.md).
            # The engine never checkpoints by itself: the file changes only in a write window
            # (``writing``), while no child holds it.
            with blank_allocations():  # a new file's first pages are written now (cypher/heap.py)
                self.db = ladybug.Database(str(self.path), buffer_pool_size=self.buffer_pool_bytes,
                                           auto_checkpoint=False)
                self.conn = ladybug.Connection(self.db)
            if self._lock_fd is None:
                self._lock()
        except BaseException:
            self._close_writer()
            raise
        self.conn.set_max_threads_for_exec(2)

    def _lock(self) -> None:
        """Hold the file exclusively (ProjectionBusy when a query child, of any process, holds it)."""
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        if not writer_lock(fd):
            os.close(fd)
            raise ProjectionBusy
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _close_writer(self) -> None:
        with blank_allocations():  # closing checkpoints what the log holds (cypher/heap.py)
            for handle in (self.conn, self.db):
                if handle is not None:
                    handle.close()
        self.conn = self.db = None
        self._unlock()
        release(self.path)

    def seal(self, checkpoint: bool = False) -> None:
        """End a write and let go of the file's lock, so children may open it (they read the log
        too: a refresh's few rows cost no checkpoint); the log is checkpointed into the file after
        a build (``checkpoint``) or once it passes CHECKPOINT_LOG_BYTES. The engine's handle stays
        open here for the next write (it changes nothing between writes: no checkpoint of its own)."""
        if self.conn is not None:
            try:
                log_file = self.path.with_name(self.path.name + ".wal")
                if checkpoint or (log_file.exists() and log_file.stat().st_size > CHECKPOINT_LOG_BYTES):
                    with blank_allocations():  # the checkpoint writes pages it never filled (cypher/heap.py)
                        self.conn.execute("CHECKPOINT")
            except BaseException:
                self._close_writer()
                raise
        self._unlock()

    @contextmanager
    def writing(self, pause: Callable[[Path], int], copy_path: Callable[[], Path]) -> Iterator[None]:
        """A write window: the query children of this process on the file let go of it first
        (``pause``: the idle ones now), the file is locked for writing, and sealed at the end. If
        children still hold it (busy ones, or another process's), or another process writes it,
        the file is copied to ``copy_path()`` (under a shared lock, so never half written) and the
        copy is written instead (``path`` then names it; the old file stays for its readers).
        Re-entrant."""
        if self._lock_fd is not None:
            yield
            return
        if not self.path.exists():  # deleted: another store object named a newer copy current (or a purge)
            self.close()
            raise ProjectionBusy
        pause(self.path)
        try:
            if self.conn is None:
                self._open_writer()
            else:
                self._lock()
        except (ProjectionBusy, RuntimeError):
            self._close_writer()
            new = copy_path()
            _copy_whole(self.path, new)
            self.path = new
            self._open_writer()
        try:
            yield
        finally:
            self.seal()

    def fill(self, nodes: Nodes, rels: Rels, episodes: set[str], world: WorldPart) -> None:
        """Create and fill the tables of a new database (the columns are consumed), then seal it."""
        self.episodes = episodes
        self.world = world
        # the engine does not checkpoint by itself (``_open_writer``): one checkpoint for the whole
        # build (100k episodes: 2.5 s instead of 2.5-3.4 s; a small tenant's ~20 tables: no fsync
        # per table), in seal()
        self._create(nodes, rels)
        self._create(world.nodes, world.rels)
        world.nodes, world.rels = {}, {}  # loaded: only raw and the index stay
        self.seal(checkpoint=True)

    def held_world_rows(self) -> tuple[WorldRows, set[str]]:
        """The world rows its tables were loaded from, as ``read_world_rows`` reads them (each
        node, rule, edge, scene and environment keeps its row's data in ``record``; a scene its
        report), and the episode ids it holds. Rows the loader left out (an edge whose ends are
        not in the world) are not there: a refresh finds them new and leaves them out again."""
        raw: WorldRows = {"scene_reports": {}, "scenes": {}, "env_meta": {}, "world_nodes": {}, "world_rules": {},
                          "world_edges": {}}

        def rows(statement: str) -> list[list[Any]]:
            result: Any = self.conn.execute(statement)
            return [list(r) for r in result.get_all()]
        for sid, data, report in rows("MATCH (s:Scene) RETURN s.id, s.record, s.report"):
            raw["scenes"][sid] = data
            if report is not None:
                raw["scene_reports"][sid] = report
        for env, data in rows("MATCH (e:Environment) WHERE e.record IS NOT NULL RETURN e.env_name, e.record"):
            raw["env_meta"][env] = data
        for label in ("Entity", "State"):
            for env, nid, data in rows(f"MATCH (n:{label}) RETURN n.env_name, n.id, n.record"):
                raw["world_nodes"][(env, nid)] = data
        for env, rid, data in rows("MATCH (r:Rule) RETURN r.env_name, r.id, r.record"):
            raw["world_rules"][(env, rid)] = data
        for rtype in sorted(EDGE_REL_TYPES):
            for env, eid, data in rows(f"MATCH ()-[e:{rtype}]->() RETURN e.env_name, e.id, e.record"):
                raw["world_edges"][(env, eid)] = data
        episodes = {eid for (eid,) in rows("MATCH (e:Episode) RETURN e.id")} if "Episode" in self.kinds else set()
        return raw, episodes

    def know_world(self, world: WorldPart, episodes: set[str]) -> None:
        """Take the world part's rows and index of a projection opened from its file, whose tables
        hold exactly them (loaded from ``opened_raw``: the columns made are dropped)."""
        world.nodes, world.rels = {}, {}
        self.world, self.episodes, self.opened_raw = world, episodes, None

    @contextmanager
    def refreshing(self) -> Iterator[None]:
        """A refresh's writes: the file must be open for writing (``writing``)."""
        if self.conn is None or self.closed:
            raise ProjectionBusy
        yield

    def replace_world(self, world: WorldPart, episodes: set[str]) -> None:
        """Drop the world part's tables and load them again (the episode part stays)."""
        with self.refreshing():
            self._drop_world()
            self._create(world.nodes, world.rels)
            world.nodes, world.rels = {}, {}
            self.world = world
            self.episodes = episodes

    def _drop_world(self) -> None:
        for rtype in WORLD_REL_TABLES:
            self.conn.execute(f"DROP TABLE IF EXISTS {rtype}")
        for label in WORLD_NODE_TABLES:
            self.conn.execute(f"DROP TABLE IF EXISTS {label}")

    def _create(self, nodes: Nodes, rels: Rels) -> None:
        """Create and fill the node tables of ``nodes`` and the relationship tables of ``rels``."""
        for label, columns in nodes.items():
            cols = {n: _array(n, columns[n]) for n in node_names(label)}
            columns.clear()  # consumed: the Python values go before the engine's copy is made
            self.kinds[label] = {n: kind for n, (_, kind) in cols.items()}
            ddl = ", ".join(f"{n} {kind}" for n, (_, kind) in cols.items())
            self.conn.execute(f"CREATE NODE TABLE {label}({ddl}, PRIMARY KEY ({NODE_TABLES[label][0]}))")
            self._copy_nodes(label, {n: arr for n, (arr, _) in cols.items()})
        for rtype, by_pair in list(rels.items()):
            if any(a not in self.kinds or b not in self.kinds for a, b in REL_TABLES[rtype]):
                # an end's table is not in this projection (FROM_EPISODE in the world part alone)
                if any(c["from"] for c in rels.pop(rtype).values()):
                    raise CypherQueryError(f"{rtype} rows without a table for their ends")
                continue
            names = rel_names(rtype)[2:]
            joined: dict[str, list[Any]] = {n: [v for c in by_pair.values() for v in c.get(n, [])] for n in names}
            # a column with no value yet takes its declared type, so the first values to come fit it
            kinds = {n: _array(n, values, None if any(v is not None for v in values) else
                               REL_KINDS.get(rtype, {}).get(n))[1] for n, values in joined.items()}
            self.kinds[rtype] = kinds
            ddl = "".join(f", {n} {kind}" for n, kind in kinds.items())
            self.conn.execute(f"CREATE REL TABLE {rtype}("
                              f"{', '.join(f'FROM {a} TO {b}' for a, b in REL_TABLES[rtype])}{ddl})")
        self._copy_rels(rels)

    def _copy_nodes(self, label: str, arrays: Mapping[str, Any]) -> None:
        import pyarrow as pa

        n = len(next(iter(arrays.values()))) if arrays else 0
        if 0 < n <= INSERT_MAX:
            self.insert_nodes(label, {k: a.to_pylist() for k, a in arrays.items()})
        elif n:
            arrow_rows = pa.table(dict(arrays))  # noqa: F841 - read by COPY
            self.conn.execute(f"COPY {label} FROM arrow_rows")

    def _copy_rels(self, rels: Rels) -> None:
        """Append the relationships of ``rels`` to their (existing) tables."""
        import pyarrow as pa

        for rtype, by_pair in rels.items():
            kinds = self.kinds[rtype]
            for (a, b), columns in by_pair.items():
                if not columns["from"]:
                    continue
                if len(columns["from"]) <= INSERT_MAX:
                    self.insert_rels(rtype, (a, b), columns)
                    continue
                arrow_rows = pa.table({"from": columns["from"], "to": columns["to"],  # noqa: F841 - read by COPY
                                       **{n: _array(n, columns[n], kinds[n])[0] for n in kinds}})
                self.conn.execute(f"COPY {rtype} FROM arrow_rows (from='{a}', to='{b}')")

    # A few rows are written with UNWIND statements: each COPY costs 10-40 ms whatever its size.
    def delete_nodes(self, label: str, pks: list[Any]) -> None:
        if pks:
            self.conn.execute(f"UNWIND $pks AS k MATCH (n:{label} {{{NODE_TABLES[label][0]}: k}}) DETACH DELETE n",
                              {"pks": pks})

    def _typed(self, table: str, columns: Columns, names: Iterable[str]) -> tuple[list[dict[str, Any]], str]:
        """The rows as parameters (each value as its column's type) and the property map that sets them."""
        kinds = self.kinds[table]
        values = {n: _array(n, columns[n], kinds[n])[0].to_pylist() for n in names}
        rows = [dict(zip(values, row, strict=True)) for row in zip(*values.values(), strict=True)]
        props = ", ".join(f"`{n}`: CAST(r.`{n}` AS {kinds[n]})" for n in values)
        return rows, props

    def insert_nodes(self, label: str, columns: Columns) -> None:
        if columns[NODE_TABLES[label][0]]:
            rows, props = self._typed(label, columns, self.kinds[label])
            self.conn.execute(f"UNWIND $rows AS r CREATE (:{label} {{{props}}})", {"rows": rows})

    def update_nodes(self, label: str, columns: Columns) -> None:
        pk = NODE_TABLES[label][0]
        if columns[pk]:
            rows, _ = self._typed(label, columns, self.kinds[label])
            sets = ", ".join(f"n.`{c}` = CAST(r.`{c}` AS {kind})" for c, kind in self.kinds[label].items() if c != pk)
            self.conn.execute(f"UNWIND $rows AS r MATCH (n:{label} {{{pk}: r.`{pk}`}}) SET {sets}", {"rows": rows})

    def update_rels(self, rtype: str, pair: tuple[str, str], columns: Columns) -> None:
        if not columns["from"]:
            return
        a, b = pair
        rows, _ = self._typed(rtype, columns, self.kinds[rtype])
        rows = [{**row, "_from": src} for row, src in zip(rows, columns["from"], strict=True)]
        sets = ", ".join(f"e.`{c}` = CAST(r.`{c}` AS {kind})" for c, kind in self.kinds[rtype].items() if c != "key")
        self.conn.execute(f"UNWIND $rows AS r MATCH (a:{a} {{{NODE_TABLES[a][0]}: r._from}})-[e:{rtype}]->(:{b}) "
                          f"WHERE e.key = r.key SET {sets}", {"rows": rows})

    def insert_rels(self, rtype: str, pair: tuple[str, str], columns: Columns) -> None:
        if not columns["from"]:
            return
        a, b = pair
        rows, props = self._typed(rtype, columns, self.kinds[rtype])
        rows = [{**row, "_from": src, "_to": dst} for row, src, dst in
                zip(rows or [{}] * len(columns["from"]), columns["from"], columns["to"], strict=True)]
        self.conn.execute(f"UNWIND $rows AS r MATCH (a:{a} {{{NODE_TABLES[a][0]}: r._from}}) "
                          f"MATCH (b:{b} {{{NODE_TABLES[b][0]}: r._to}}) "
                          f"CREATE (a)-[:{rtype} {{{props}}}]->(b)", {"rows": rows})

    def close(self) -> None:
        """Hand it out no more (and close it here if it is open for writing); its query children
        are the pool's to end."""
        self.closed = True
        if self.conn is not None:
            self._close_writer()

    def __del__(self) -> None:
        # dropped while open for writing: closed here, where the engine's last checkpoint is
        # written with blank memory (cypher/heap.py), not when the engine's handle is collected
        if getattr(self, "conn", None) is not None:
            try:
                self._close_writer()
            except Exception:  # noqa: BLE001 - at interpreter exit, say: the engine closes it itself
                pass


def _copy_whole(src: Path, dst: Path) -> None:
    """Copy a projection file and its log while no writer changes them (a shared lock, as a query
    child's; a writer holds the file only for its write window)."""
    fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            reader_lock(fd, 30.0)
        except TimeoutError as exc:
            raise RuntimeError(str(exc)) from None
        for a, b in ((src, dst), (src.with_name(src.name + ".wal"), dst.with_name(dst.name + ".wal"))):
            if a.exists():
                shutil.copyfile(a, b)
                os.chmod(b, PRIVATE_FILE)
    finally:
        os.close(fd)


class ProjectionBusy(Exception):
    """Query children hold the file (so it is not written in place), or it is not open for writing."""

