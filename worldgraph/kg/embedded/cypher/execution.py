"""Running a query on a projection within its deadline, row cap and byte cap (the package
docstring, "Deadline"), and the engine's values as the Neo4j store returns them."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import orjson

from worldgraph.errors import CypherInputError, CypherQueryError
from worldgraph.kg import cypher_guard as guard
from worldgraph.kg.codec import loads
from worldgraph.kg.embedded.cypher.model import ENGINE
from worldgraph.kg.embedded.cypher.projection import Projection, ProjectionClosed
from worldgraph.kg.embedded.cypher.text import ALIAS_PREFIX, NAME, blank, translate
from worldgraph.kg.neo4j import schema as q
from worldgraph.kg.store import Record

log = logging.getLogger("worldgraph")
# The deadline (module docstring, "Deadline"): seconds spent interrupting a query past its deadline
# before it is abandoned; abandoned runs the engine may still be running, per process and per tenant
# (past either, new queries fail at once); seconds a world refresh waits for a running query.
GRACE = 1.0
MAX_ABANDONED = 4
MAX_ABANDONED_PER_TENANT = 2


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


class _Call:
    """One query on a projection, shared by its caller and the worker thread that runs it."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.state = threading.Lock()  # guards finished / abandoned
        self.finished = False
        self.abandoned = False
        self.rows: list[Record] | None = None
        self.error: BaseException | None = None


# Runs abandoned past their deadline that the engine has not ended yet, per tenant (see "Deadline").
_abandoned: dict[str, int] = {}
_abandoned_lock = threading.Lock()


def abandoned_runs(tenant_id: str | None = None) -> int:
    """How many abandoned runs (of ``tenant_id``, or of all tenants) are still alive."""
    with _abandoned_lock:
        return _abandoned.get(tenant_id, 0) if tenant_id is not None else sum(_abandoned.values())


def check_abandoned(tenant_id: str, timeout: float) -> None:
    """CypherQueryError when MAX_ABANDONED_PER_TENANT abandoned runs of the tenant, or MAX_ABANDONED
    of all tenants, are still alive: a new query fails at once instead of starting (the store checks
    this before it builds a projection too)."""
    with _abandoned_lock:
        mine, total = _abandoned.get(tenant_id, 0), sum(_abandoned.values())
    if mine >= MAX_ABANDONED_PER_TENANT or total >= MAX_ABANDONED:
        raise CypherQueryError(
            f"{mine if mine >= MAX_ABANDONED_PER_TENANT else total} earlier queries "
            f"{'of this tenant ' if mine >= MAX_ABANDONED_PER_TENANT else ''}ran past cypher_timeout_seconds "
            f"({timeout} s) and the embedded Cypher engine ({ENGINE}) has not ended them yet; try again in a "
            "moment, with a narrower query (smaller lists and strings)")


def _timed_out(timeout: float) -> CypherQueryError:
    return CypherQueryError(f"the query ran longer than {timeout} s (cypher_timeout_seconds); it was stopped. "
                            "Narrow it or add LIMIT")


def run(proj: Projection, tenant_id: str, query: str, params: Mapping[str, Any] | None, *, timeout: float,
        max_rows: int, max_bytes: int, deadline: float | None = None) -> list[Record]:
    """Run a checked, translated query on a tenant's projection, within the limits; rows or an error
    by ``deadline`` (monotonic; default now + ``timeout``) + ``GRACE`` seconds at most."""
    if deadline is None:
        deadline = time.monotonic() + timeout
    bound = guard.bind_params(tenant_id, params)
    for key, value in bound.items():
        try:
            orjson.dumps(value)
        except TypeError as exc:
            raise CypherInputError(f"params.{key}", f"must be JSON data (string, number, boolean, null, list or "
                                    f"object): {exc}") from None
    text = translate(query)
    used = set(re.findall(rf"\$({NAME})", blank(text)))
    args = {k: v for k, v in bound.items() if k in used}
    check_abandoned(tenant_id, timeout)
    if time.monotonic() >= deadline:  # a retry (ProjectionClosed) after the deadline
        raise _timed_out(timeout)
    # one query at a time per projection: wait for the one before until the deadline, or until it is
    # closed (replaced, or abandoned by a query past its deadline: the caller then gets a fresh one)
    while not proj.lock.acquire(timeout=0.05):
        if proj.closed:
            raise ProjectionClosed
        if time.monotonic() >= deadline:
            raise _timed_out(timeout)
    call = _Call()
    try:
        if proj.closed:
            raise ProjectionClosed
        proj.conn.set_query_timeout(max(1, int((deadline - time.monotonic()) * 1000)))
        threading.Thread(target=_work, name="worldgraph-embedded-cypher", daemon=True,
                         args=(call, proj, tenant_id, query, text, args, deadline, timeout, max_rows,
                               max_bytes)).start()
    except BaseException:
        proj.unlock()
        raise
    try:
        finished = call.done.wait(max(0.0, deadline - time.monotonic())) or _interrupt(call, proj)
    except BaseException:  # e.g. Ctrl-C in the CLI: the query must not run on without its caller
        _interrupt(call, proj)
        _abandon(call, proj, tenant_id)
        raise
    if not finished and _abandon(call, proj, tenant_id):
        raise _timed_out(timeout)
    if call.error is not None:
        raise call.error
    assert call.rows is not None
    return call.rows


def _interrupt(call: _Call, proj: Projection) -> bool:
    """Past the deadline: interrupt the engine (again and again: an interrupt that arrives while the
    query is still being compiled is cleared when it starts) for up to ``GRACE`` seconds. Whether
    the query has ended."""
    until = time.monotonic() + GRACE
    while True:
        try:
            proj.conn.interrupt()
        except Exception:  # noqa: BLE001 - the abandon below is the fallback
            pass
        if call.done.wait(min(0.05, max(0.0, until - time.monotonic()))):
            return True
        if time.monotonic() >= until:
            return False


def _abandon(call: _Call, proj: Projection, tenant_id: str) -> bool:
    """Give up on a query the engine did not end: mark its projection closed (nobody else queues on
    its busy connection; the cache builds a fresh one for the next query; the worker frees the
    database when the engine returns) and count it until then. False when it ended meanwhile."""
    with call.state:
        if call.finished:
            return False
        call.abandoned = True
    proj.closed = True
    with _abandoned_lock:
        _abandoned[tenant_id] = _abandoned.get(tenant_id, 0) + 1
    log.warning("cypher() on the embedded store: the engine did not stop a query of tenant %r %.1f s after "
                "its deadline; abandoned it (its projection is freed when the engine returns)", tenant_id, GRACE)
    return True


def _work(call: _Call, proj: Projection, tenant_id: str, query: str, text: str, args: dict[str, Any],
          deadline: float, timeout: float, max_rows: int, max_bytes: int) -> None:
    """The worker: runs the query, holding ``proj.lock`` (taken by the caller) until it ends."""
    try:
        call.rows = _execute(call, proj, query, text, args, deadline, timeout, max_rows, max_bytes)
    except BaseException as exc:  # noqa: BLE001 - handed to the caller, which raises it
        call.error = exc
    finally:
        with call.state:
            call.finished = True
            abandoned = call.abandoned
        if abandoned:  # nobody waits for it: drop what it made before freeing the projection
            call.rows = call.error = None
        try:
            proj.unlock()  # closes the projection's database if it was closed or abandoned meanwhile
        finally:
            if abandoned:
                with _abandoned_lock:
                    _abandoned[tenant_id] -= 1
                    if not _abandoned[tenant_id]:
                        del _abandoned[tenant_id]
                log.info("cypher() on the embedded store: an abandoned query of tenant %r has ended", tenant_id)
            call.done.set()


def _execute(call: _Call, proj: Projection, query: str, text: str, args: dict[str, Any], deadline: float,
             timeout: float, max_rows: int, max_bytes: int) -> list[Record]:
    try:
        result = proj.conn.execute(text, args)
    except RuntimeError as exc:
        msg = str(exc)
        if "interrupt" in msg.lower() or "timeout" in msg.lower():
            raise _timed_out(timeout) from None
        hint = ""
        word = re.search(r"mismatched input '([A-Za-z_]\w*)'", msg)
        if word and re.search(rf"(?<![\w`]){re.escape(word.group(1))}(?![\w`])", query):
            hint = (f" ({word.group(1)!r} is a reserved word in {ENGINE}: write it in backticks, "
                    f"`{word.group(1)}`, or use another name)")
        raise CypherQueryError(f"the embedded store's Cypher engine ({ENGINE}) could not run the query: "
                               f"{msg.splitlines()[0] if msg else exc!r}{hint}") from None
    if isinstance(result, list):  # several statements: refused (one query at a time)
        for r in result:
            r.close()
        raise CypherQueryError("cypher() runs one query at a time: remove the ';' between statements")
    try:
        # a RETURN alias renamed by translate() (ALIAS_PREFIX) is named as the query wrote it
        names = [n[len(ALIAS_PREFIX):] if n.startswith(ALIAS_PREFIX) else n for n in result.get_column_names()]
        rows: list[Record] = []
        size = 0
        while result.has_next():
            if len(rows) >= max_rows:
                raise CypherInputError("query", f"returns more than {max_rows} rows (cypher_max_rows); add LIMIT "
                                        "or aggregate")
            # RETURN * would also show the names translate() gave anonymous relationships
            row = {k: plain(v) for k, v in zip(names, result.get_next(), strict=True) if not k.startswith("_wg_")}
            size += len(orjson.dumps(row, default=str))
            if size > max_bytes:
                raise CypherInputError("query", f"returns more than {max_bytes} bytes (cypher_max_result_bytes); "
                                       "return fewer or smaller values (e.g. properties instead of whole "
                                       "nodes), or add LIMIT")
            if call.abandoned or time.monotonic() > deadline:
                raise _timed_out(timeout)
            rows.append(row)
    finally:
        result.close()
    return rows
