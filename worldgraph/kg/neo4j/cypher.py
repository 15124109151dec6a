"""``cypher()`` on Neo4j ends on time, whatever the query.

Neo4j's own transaction timeout is not enough: it is checked between rows (one expression such
as ``reduce(s = 0, i IN range(1, 300000000) | s + i)`` runs to its end first), by a monitor that
wakes every couple of seconds, and not at all while the query is parsed (a parser that overflows
its stack left the request hanging for minutes). So each call runs in a thread of its own and
the caller waits at most ``cypher_timeout``:

1. The worker opens a READ session and ONE explicit transaction (no retries: a query never runs
   twice past its deadline) with the server-side timeout ``cypher_timeout`` and metadata naming
   the call (``{"worldgraph_cypher": <token>}``). EXPLAIN, the plan check (``cypher_guard``) and
   the run all happen in it, so the deadline covers the parse too.
2. Rows are sized (before they are converted) and counted as they arrive: more than
   ``cypher_max_rows`` rows, or more than ``cypher_max_result_bytes`` bytes (their JSON size,
   roughly), stops the read with an
   ``CypherInputError`` and rolls the transaction back. A single row is decoded whole by the
   driver before it can be measured: Neo4j's ``db.memory.transaction.max`` bounds that.
3. At the deadline the caller ends the transaction: ``TERMINATE TRANSACTIONS`` of the ids
   ``SHOW TRANSACTIONS`` lists under the call's token (another session, same user); if the worker
   has still not finished ``AFTER_TERMINATE`` seconds after Neo4j confirmed, or ``END_GRACE``
   seconds after the deadline (a server that does not answer), its connection is killed, which
   frees the thread (Neo4j rolls back a transaction whose connection closed). Then
   the call raises ``CypherQueryError`` naming ``cypher_timeout_seconds``: at most
   ``cypher_timeout + END_GRACE`` (+ a few ms) after it started.

What this cannot do: stop Neo4j's CPU inside one expression before that expression returns. The
transaction is marked terminated at the deadline and Neo4j drops it at its next check; the caller
has long had its answer.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, cast

from neo4j import READ_ACCESS, Driver, Session
from neo4j.exceptions import DriverError, Neo4jError, ServiceUnavailable, SessionExpired

from worldgraph.errors import (
    CypherInputError,
    CypherQueryError,
    ReadOnlyQueryError,
    StoreUnavailableError,
    WorldGraphError,
)
from worldgraph.kg import cypher_guard as guard
from worldgraph.kg.cypher_limits import json_size
from worldgraph.kg.neo4j.connection import unreachable
from worldgraph.kg.store import Record

log = logging.getLogger("worldgraph")

END_GRACE = 1.0  # seconds past the deadline the caller waits for the transaction to end
AFTER_TERMINATE = 0.25  # ... of which at most this long once Neo4j confirmed TERMINATE TRANSACTIONS
META_KEY = "worldgraph_cypher"
FETCH_SIZE = 100  # rows per PULL: the byte cap stops reading within one batch of rows
SHOW = "SHOW TRANSACTIONS YIELD transactionId, metaData WHERE metaData[$key] = $token RETURN transactionId"
TERMINATE = "TERMINATE TRANSACTIONS $ids"


class _Call:
    """One cypher() call, shared by the caller and its worker thread."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.rows: list[Record] | None = None
        self.error: BaseException | None = None
        self.session: Session | None = None  # the worker's, to kill its connection at the deadline
        self.timed_out = False


def run(driver: Driver, uri: str, database: str, tenant_id: str, query: str, params: dict[str, Any], *,
        timeout: float, max_rows: int, max_bytes: int) -> list[Record]:
    """The rows of a checked query, or an error, within ``timeout`` + ``END_GRACE`` seconds."""
    token = uuid.uuid4().hex
    call = _Call()
    worker = threading.Thread(target=_work, name="worldgraph-cypher", daemon=True,
                              args=(call, driver, database, tenant_id, query, params, token, timeout,
                                    max_rows, max_bytes))
    worker.start()
    try:
        finished = call.done.wait(timeout)
    except BaseException:  # e.g. Ctrl-C in the CLI: the query must not run on without its caller
        call.timed_out = True
        _end(call, driver, token)
        raise
    if not finished:
        call.timed_out = True
        _end(call, driver, token)
    if call.error is not None:
        raise _translate(call, uri, timeout)
    if call.rows is None:  # still running: it was ended, or its connection killed
        raise _timed_out(timeout)
    return call.rows


def _work(call: _Call, driver: Driver, database: str, tenant_id: str, query: str, params: dict[str, Any],
          token: str, timeout: float, max_rows: int, max_bytes: int) -> None:
    try:
        with driver.session(database=database, default_access_mode=READ_ACCESS, fetch_size=FETCH_SIZE) as session:
            call.session = session
            with session.begin_transaction(metadata={META_KEY: token}, timeout=timeout) as tx:
                summary = tx.run(cast(Any, "EXPLAIN " + query), params).consume()
                guard.check_plan(summary.plan, database, summary.query_type)
                rows: list[Record] = []
                size = 0
                for rec in tx.run(cast(Any, query), params):
                    if call.timed_out:
                        return
                    if len(rows) == max_rows:
                        raise CypherInputError("query", f"returns more than {max_rows} rows (cypher_max_rows); "
                                                         "add LIMIT or aggregate")
                    raw = dict(cast(Any, rec).items())
                    size += json_size(raw, max_bytes - size)  # before converting: a huge row is not converted
                    if size > max_bytes:
                        raise CypherInputError("query", f"returns more than {max_bytes} bytes of rows "
                                                         "(cypher_max_result_bytes); return fewer or smaller "
                                                         "values, add LIMIT or aggregate")
                    rows.append({k: guard.plain(v, tenant_id) for k, v in raw.items()})
                call.rows = rows
    except BaseException as exc:  # noqa: BLE001 - handed to the caller, which raises it
        call.error = exc
    finally:
        call.done.set()


def _end(call: _Call, driver: Driver, token: str) -> None:
    """At the deadline: terminate the call's transaction on the server; if the worker is still not
    done ``AFTER_TERMINATE`` seconds after the server confirmed (Neo4j answers a terminated query
    only at its next check), or ``END_GRACE`` seconds after the deadline, kill its connection."""
    started = time.monotonic()
    terminated: list[float] = []  # when Neo4j confirmed the TERMINATE
    ender = threading.Thread(target=_terminate, args=(driver, token, terminated), name="worldgraph-cypher-end",
                             daemon=True)
    ender.start()
    kill_at = started + END_GRACE
    while not call.done.wait(0.02):
        if terminated:
            kill_at = min(kill_at, terminated[0] + AFTER_TERMINATE)
        if time.monotonic() >= kill_at:
            break
    else:
        return
    session = call.session
    connection = getattr(session, "_connection", None)  # the driver has no public cancel for a sync session
    if connection is not None:
        log.info("cypher(): Neo4j had not ended a query %.1f s after its deadline; closing its connection",
                 time.monotonic() - started)
        try:
            connection.kill()
        except Exception:  # noqa: BLE001 - best effort: the worker thread is a daemon either way
            log.debug("cypher(): killing the connection failed", exc_info=True)
    call.done.wait(0.2)


def _terminate(driver: Driver, token: str, terminated: list[float]) -> None:
    try:
        with driver.session(database="system") as session:
            ids = [r["transactionId"] for r in session.run(SHOW, key=META_KEY, token=token)]
            if ids:
                session.run(TERMINATE, ids=ids).consume()
        terminated.append(time.monotonic())
    except Exception:  # noqa: BLE001 - the connection kill is the fallback
        log.debug("cypher(): terminating the transaction failed", exc_info=True)


def _timed_out(timeout: float) -> CypherQueryError:
    return CypherQueryError(f"the query ran longer than {timeout} s (cypher_timeout_seconds); it was stopped. "
                            "Narrow it or add LIMIT")


def _translate(call: _Call, uri: str, timeout: float) -> BaseException:
    exc = call.error
    assert exc is not None
    if isinstance(exc, WorldGraphError):
        return exc
    if isinstance(exc, Neo4jError):
        code = exc.code or ""
        if "TransactionTimedOut" in code or (call.timed_out and "Terminated" in code):
            return _chain(_timed_out(timeout), exc)
        if "AccessMode" in code or ".Security." in code:  # the READ transaction refused a write
            return _chain(ReadOnlyQueryError(f"Neo4j refused the query: {exc.message or exc}"), exc)
        return _chain(CypherQueryError(f"Neo4j could not run the query: {exc.message or exc}"), exc)
    if call.timed_out:  # the connection was killed at the deadline
        return _chain(_timed_out(timeout), exc)
    if isinstance(exc, (ServiceUnavailable, SessionExpired)):
        return _chain(StoreUnavailableError(unreachable(uri, exc)), exc)
    if isinstance(exc, RecursionError):
        return _chain(CypherQueryError("a result value is nested too deep to read; return it flatter"), exc)
    if isinstance(exc, DriverError):
        return _chain(CypherQueryError(f"the Neo4j driver could not run the query: {exc}"), exc)
    return exc


def _chain(err: BaseException, cause: BaseException) -> BaseException:
    err.__cause__ = cause
    return err
