"""The one driver the parts of the Neo4j store share (``Neo4jConnection``): one managed
transaction per call (``write`` / ``read``), one-statement reads in a single round trip
(``rows``), and schema statements (``create_schema``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from neo4j import READ_ACCESS, Driver, ManagedTransaction
from neo4j import Record as Row
from neo4j.exceptions import Neo4jError, ServiceUnavailable, SessionExpired, TransientError

from worldgraph.errors import ReadOnlyError, StoreUnavailableError
from worldgraph.kg.codec import loads
from worldgraph.kg.neo4j.rows import episode_of_row
from worldgraph.kg.store import Record

__all__ = ["Neo4jConnection", "unreachable"]

T = TypeVar("T")


class Neo4jConnection:
    """What Neo4jGraphStore's parts (episodes, world graph, snapshot import, leases, lifecycle)
    run their work through: the store's ``driver`` on ``database`` at ``uri``. ``read_only``: every
    ``write`` raises ReadOnlyError."""

    def __init__(self, driver: Driver, uri: str, database: str, read_only: bool) -> None:
        self.driver = driver
        self.uri = uri
        self.database = database
        self.read_only = read_only

    def write(self, work: Callable[..., T], *args: Any) -> T:
        """``work(tx, *args)`` in one managed write transaction (the driver retries transient errors)."""
        if self.read_only:
            raise ReadOnlyError("writing to the graph store", "the Neo4j store was opened read-only")
        try:
            with self.driver.session(database=self.database) as session:
                return session.execute_write(work, *args)
        except (ServiceUnavailable, SessionExpired) as exc:
            raise StoreUnavailableError(unreachable(self.uri, exc)) from exc

    def read(self, work: Callable[..., T], *args: Any) -> T:
        """``work(tx, *args)`` in one managed read transaction."""
        try:
            with self.driver.session(database=self.database) as session:
                return session.execute_read(work, *args)
        except (ServiceUnavailable, SessionExpired) as exc:
            raise StoreUnavailableError(unreachable(self.uri, exc)) from exc

    def create_schema(self, statements: Iterable[str], await_query: str) -> None:
        """Run schema statements (each in its own managed transaction: schema commands cannot
        share a write's), tolerating what another process created meanwhile, then wait (up to
        120 s) for the indexes to come online (``await_query``). Processes that create the same
        constraint at once deadlock on its type's lock and Neo4j aborts all but one
        (``DeadlockDetected``, a transient error): the driver retries the aborted ones, which then
        find it made."""
        try:
            with self.driver.session(database=self.database) as session:
                for stmt in statements:
                    try:
                        session.execute_write(_run_schema, stmt)
                    except Neo4jError as exc:  # another process created it meanwhile
                        if "AlreadyExists" not in (exc.code or ""):
                            raise
                session.run(await_query, seconds=120).consume()
        except (ServiceUnavailable, SessionExpired) as exc:
            raise StoreUnavailableError(unreachable(self.uri, exc)) from exc

    def rows(self, query: str, **params: Any) -> list[Row]:
        """The rows of ONE read statement, in an auto-commit transaction: the driver pipelines RUN
        and PULL, so it is one round trip, where a managed transaction adds BEGIN and COMMIT
        (~1 ms each here; recall makes 2-4 such reads). A transient failure (a cluster member
        going away, a deadlock) falls back to the managed, retried path."""
        try:
            with self.driver.session(database=self.database, default_access_mode=READ_ACCESS) as session:
                return list(session.run(query, params))
        except (TransientError, ServiceUnavailable, SessionExpired):
            return self.read(lambda tx: list(tx.run(query, params)))

    def records(self, query: str, **params: Any) -> list[Record]:
        """Run one read query whose rows have a ``record`` column; decode them."""
        return [loads(r["record"]) for r in self.rows(query, **params) if r["record"] is not None]

    def episodes(self, query: str, **params: Any) -> list[Record]:
        """Run one read query returning q.EPISODE_COLUMNS; the episode records, state put back."""
        return [episode_of_row(r) for r in self.rows(query, **params)]


def _run_schema(tx: ManagedTransaction, statement: str) -> None:
    tx.run(statement).consume()


def unreachable(uri: str, exc: BaseException) -> str:
    """The error message for a Neo4j server that cannot be reached, with the ways to start one."""
    return (f"cannot reach Neo4j at {uri} ({type(exc).__name__}: {exc}). Start a server with "
            "`worldgraph neo4j start` (no Docker needed), or `docker compose up -d neo4j`, or point "
            "NEO4J_URI (and NEO4J_USER / NEO4J_PASSWORD) at a running one.")
