"""The Neo4j graph store: the same records as the embedded store, in a real graph.

Every Cypher statement lives in ``worldgraph.kg.neo4j.queries`` (with the graph model). The
store is composed (``kg.composed``): it owns its parts, each built on one ``Neo4jConnection``
(``neo4j.connection``: the driver, sessions and transactions): ``episodes`` (``neo4j.episodes``:
episodes, sessions, feedback, canvases, neighbourhoods), ``world`` (``neo4j.world``: the world
graph and scenes), which is given ``snapshot_import`` (``neo4j.snapshot_import``: whole
environments in bounded transactions), ``leases`` (``neo4j.leases``) and ``lifecycle``
(``neo4j.lifecycle``: list, forget, purge). This module connects, keeps the schema current, and
runs tenants, stats, ``cypher()`` and the API keys. Each
public write is ONE managed transaction (``session.execute_write``: the driver retries
transient errors such as deadlocks), made of batched ``UNWIND $rows ... MERGE`` statements
over rows deduplicated by id; reads use ``execute_read``. Records are stored as JSON strings
beside their queryable properties and decoded on the way out, so both stores return equal
dicts and export identical bytes.
"""

from __future__ import annotations

from typing import Any

from neo4j import Driver, GraphDatabase, ManagedTransaction
from neo4j.exceptions import (
    AuthError,
    DriverError,
    Neo4jError,
    ServiceUnavailable,
    SessionExpired,
)

from worldgraph.errors import (
    InvalidInputError,
    NotFoundError,
    StoreUnavailableError,
)
from worldgraph.kg import cypher_guard as guard
from worldgraph.kg.codec import loads
from worldgraph.kg.composed import ComposedStore
from worldgraph.kg.cypher_limits import ADMISSION, CypherSettings
from worldgraph.kg.neo4j import cypher as neo4j_cypher
from worldgraph.kg.neo4j import queries as q
from worldgraph.kg.neo4j.connection import Neo4jConnection, unreachable
from worldgraph.kg.neo4j.episodes import Neo4jEpisodes, tenant_ids
from worldgraph.kg.neo4j.idempotency import Neo4jIdempotency
from worldgraph.kg.neo4j.leases import Neo4jSceneLeases
from worldgraph.kg.neo4j.lifecycle import Neo4jLifecycle
from worldgraph.kg.neo4j.rows import run_batched
from worldgraph.kg.neo4j.snapshot_import import Neo4jSnapshotImport
from worldgraph.kg.neo4j.world import Neo4jWorld
from worldgraph.kg.store import Record
from worldgraph.schema import needs_upgrade


class Neo4jGraphStore(ComposedStore):
    """GraphStore on a Neo4j 5 server (Community is enough). Thread-safe: the driver pools."""

    name = "neo4j"

    def __init__(self, uri: str, user: str, password: str, database: str = "neo4j",
                 connection_timeout: float = 5.0, read_only: bool = False, cypher_timeout: float = 30.0,
                 cypher_max_rows: int = 10_000, import_batch: int = 10_000,
                 cypher_max_result_bytes: int = 16 * 1024 * 1024, cypher: CypherSettings | None = None) -> None:
        """``cypher``: the ``cypher_*`` settings (without it, the three ``cypher_*`` arguments
        and the other defaults)."""
        self.uri = uri
        self.database = database
        self.read_only = read_only
        self.cypher_settings = cypher or CypherSettings(timeout=cypher_timeout, max_rows=cypher_max_rows,
                                                        max_bytes=cypher_max_result_bytes)
        self.cypher_timeout, self.cypher_max_rows = self.cypher_settings.timeout, self.cypher_settings.max_rows
        self.cypher_max_result_bytes = self.cypher_settings.max_bytes
        driver: Driver | None = None
        try:
            driver = GraphDatabase.driver(
                uri, auth=(user, password), connection_timeout=connection_timeout,
                max_transaction_retry_time=30.0,
                # the server's hints ("label does not exist yet", ...) are noise for a library
                notifications_min_severity="OFF")
            driver.verify_connectivity()
            # one round trip in the database itself: a name the server does not have fails here,
            # with a message naming the setting, not in the first real query (a routing URI,
            # neo4j://, fetches that database's routing table for it)
            with driver.session(database=database) as session:
                session.run("RETURN 1").consume()
        except AuthError as exc:
            _close(driver)
            raise StoreUnavailableError(
                f"Neo4j at {uri} refused the credentials of user {user!r}: {exc}. "
                "Set NEO4J_USER / NEO4J_PASSWORD (or WORLDGRAPH_NEO4J_USER / WORLDGRAPH_NEO4J_PASSWORD)."
            ) from exc
        except (DriverError, Neo4jError, OSError, ValueError) as exc:
            _close(driver)
            if isinstance(exc, Neo4jError) and exc.code == "Neo.ClientError.Database.DatabaseNotFound":
                raise InvalidInputError("neo4j_database", _no_database(uri, database), database) from exc
            raise StoreUnavailableError(unreachable(uri, exc)) from exc
        self.db = Neo4jConnection(driver, uri, database, read_only)
        self.snapshot_import = Neo4jSnapshotImport(self.db, import_batch)
        self.episodes = Neo4jEpisodes(self.db)
        self.world = Neo4jWorld(self.db, self.snapshot_import)
        self.leases = Neo4jSceneLeases(self.db)
        self.lifecycle = Neo4jLifecycle(self.db)
        self.idempotency = Neo4jIdempotency(self.db)
        if read_only:
            return  # no constraints, indexes or migrations: reads need none of them to be correct
        try:
            self._ensure_schema()
        except BaseException:
            driver.close()
            raise

    # ---------------------------------------------------------------- schema
    def _ensure_schema(self) -> None:
        """Constraints first (MERGE seeks their indexes), then indexes, then the version node.
        Schema commands cannot share a transaction with data writes, so each runs on its own."""
        try:
            with self.db.driver.session(database=self.database) as session:
                current = session.execute_read(lambda tx: tx.run(q.SCHEMA_VERSION_READ).single())
                # raises StorageError for a database a newer worldgraph has migrated
                if not needs_upgrade("neo4j", current["version"] if current is not None else None):
                    return
                for stmt in (*q.CONSTRAINTS, *q.MIGRATIONS, *q.INDEXES):
                    try:
                        session.run(stmt).consume()
                    except Neo4jError as exc:  # another process created (or dropped) the same rule meanwhile
                        if "AlreadyExists" not in (exc.code or "") and "NotFound" not in (exc.code or ""):
                            raise
                session.run(q.AWAIT_INDEXES, seconds=120).consume()
                session.execute_write(_copy_index_errors)
                session.execute_write(lambda tx: tx.run(q.SCHEMA_VERSION_WRITE, version=q.SCHEMA_VERSION).consume())
        except (ServiceUnavailable, SessionExpired) as exc:
            raise StoreUnavailableError(unreachable(self.uri, exc)) from exc

    def tenants(self) -> list[str]:
        return tenant_ids(self.db)

    def stats(self, tenant_id: str) -> dict[str, int]:
        row = self.db.read(lambda tx: tx.run(q.STATS, tenant_id=tenant_id, prefix=q.tenant_prefix(tenant_id)).single())
        assert row is not None
        return {k: int(row[k]) for k in ("episodes", "agents", "feedback", "canvases", "canvas_audits",
                                         "scenes", "nodes", "edges", "rules", "indexed")}

    def cypher(self, tenant_id: str, query: str, params: dict[str, Any] | None = None) -> list[Record]:
        """Run a read-only query that provably stays in the caller's tenant (``cypher_guard``): its
        EXPLAIN plan is checked, then it runs, in one READ transaction that ends by
        ``cypher_timeout`` (``neo4j.cypher``: the call returns or fails by then, + ~1 s)."""
        params = guard.bind_params(tenant_id, params)
        guard.check_text(query)
        with ADMISSION.admit(tenant_id, self.cypher_settings):  # at most so many in flight (cypher_limits)
            return neo4j_cypher.run(self.db.driver, self.uri, self.database, tenant_id, query, params,
                                    timeout=self.cypher_timeout, max_rows=self.cypher_max_rows,
                                    max_bytes=self.cypher_max_result_bytes)

    def cypher_sandbox(self) -> str:
        """How Cypher queries are confined: by the query plan check and Neo4j's READ transactions."""
        return "neo4j-plan"

    # ---------------------------------------------------------------- API keys
    def add_api_key(self, key: Record) -> None:
        try:
            with self.db.driver.session(database=self.database) as session:
                session.run(q.API_KEY_CONSTRAINT).consume()
        except (ServiceUnavailable, SessionExpired) as exc:
            raise StoreUnavailableError(unreachable(self.uri, exc)) from exc
        params = {k: key.get(k) for k in ("id", "tenant_id", "name", "key_hash", "scopes", "created_at", "revoked_at")}
        self.db.write(lambda tx: tx.run(q.CREATE_API_KEY, params).consume())

    def get_api_key(self, key_id: str) -> Record | None:
        rows = self.db.read(lambda tx: [_api_key(r) for r in tx.run(q.GET_API_KEY, id=key_id)])
        return rows[0] if rows else None

    def list_api_keys(self, tenant_id: str | None = None) -> list[Record]:
        return self.db.read(lambda tx: [_api_key(r) for r in tx.run(q.LIST_API_KEYS, tenant_id=tenant_id)])

    def revoke_api_key(self, key_id: str, revoked_at: str) -> Record:
        rows: list[Record] = self.db.write(
            lambda tx: [_api_key(r) for r in tx.run(q.REVOKE_API_KEY, id=key_id, revoked_at=revoked_at)])
        if not rows:
            raise NotFoundError("api key", key_id, "`worldgraph keys list` shows the key ids")
        return rows[0]

    def close(self) -> None:
        self.db.driver.close()


# -------------------------------------------------------------------- helpers
def _no_database(uri: str, database: str) -> str:
    return (f"Neo4j at {uri} has no database {database!r}. Set NEO4J_DATABASE (or WORLDGRAPH_NEO4J_DATABASE, "
            "config neo4j_database) to one it has (`SHOW DATABASES` lists them); Neo4j Community Edition has "
            "one user database, 'neo4j' (the default)")


def _close(driver: Driver | None) -> None:
    if driver is not None:
        driver.close()


def _copy_index_errors(tx: ManagedTransaction) -> None:
    """Schema 3: give episodes written before it their index_error property (it was in the JSON)."""
    rows = []
    for r in tx.run(q.EPISODES_WITHOUT_ERROR_PROPERTY):
        error = loads(r["record"]).get("index_error")
        if error is not None:
            rows.append({"tenant_id": r["tenant_id"], "id": r["id"], "error": error})
    run_batched(tx, q.SET_INDEX_ERRORS, rows)


def _api_key(row: Any) -> Record:
    """Neo4j drops null properties: every field of a key record is put back."""
    props = dict(row["key"])
    return {k: props.get(k) for k in ("id", "tenant_id", "name", "key_hash", "scopes", "created_at", "revoked_at")}
