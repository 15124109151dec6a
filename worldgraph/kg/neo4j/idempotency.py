"""The Neo4j store's idempotency records (``begin_idempotent`` and the rest; the rules are in
worldgraph.facade.idempotency): one write transaction per call, the record locked first."""

from __future__ import annotations

from neo4j import ManagedTransaction

from worldgraph.kg.neo4j import queries as q
from worldgraph.kg.neo4j.connection import Neo4jConnection
from worldgraph.kg.store import Record

__all__ = ["Neo4jIdempotency", "record_id"]


def record_id(tenant_id: str, key: str) -> str:
    return f"{tenant_id}\x1f{key}"


class Neo4jIdempotency:
    def __init__(self, db: Neo4jConnection) -> None:
        self.db = db
        self._schema_ready = False

    def _schema(self) -> None:
        if not self._schema_ready:
            for statement in (q.IDEMPOTENCY_CONSTRAINT, q.IDEMPOTENCY_TENANT_INDEX):
                self.db.write(lambda tx, s=statement: tx.run(s).consume())
            self._schema_ready = True

    def begin(self, tenant_id: str, key: str, request_hash: str, now: str, expires_at: str,
              stale_before: str) -> Record | None:
        self._schema()
        rid = record_id(tenant_id, key)

        def work(tx: ManagedTransaction) -> Record | None:
            tx.run(q.DELETE_EXPIRED_IDEMPOTENCY, tenant_id=tenant_id, now=now).consume()
            row = tx.run(q.LOCK_IDEMPOTENCY, id=rid, tenant_id=tenant_id, key=key, now=now).single()
            found: Record = dict(row["record"]) if row is not None else {"status": "new"}
            stale = (found["status"] == "running" and str(found.get("started_at")) < stale_before
                     and found.get("request_hash") == request_hash)
            if found["status"] != "new" and not stale:
                found["refs"] = list(found.get("refs") or [])
                return found
            tx.run(q.START_IDEMPOTENCY, id=rid, request_hash=request_hash, now=now, expires_at=expires_at).consume()
            return None
        return self.db.write(work)

    def finish(self, tenant_id: str, key: str, answer: str, refs: list[str]) -> None:
        self.db.write(lambda tx: tx.run(q.FINISH_IDEMPOTENCY, id=record_id(tenant_id, key), answer=answer,
                                        refs=list(refs)).consume())

    def abandon(self, tenant_id: str, key: str) -> None:
        self.db.write(lambda tx: tx.run(q.ABANDON_IDEMPOTENCY, id=record_id(tenant_id, key)).consume())
