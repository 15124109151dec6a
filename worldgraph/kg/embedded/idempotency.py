"""The embedded store's idempotency records (the ``GraphStore`` methods ``begin_idempotent``,
``finish_idempotent``, ``abandon_idempotent``; the rules are in worldgraph.facade.idempotency).
``begin`` is one IMMEDIATE transaction: of two processes sending the same key at once, one writes
the running record and the other reads it."""

from __future__ import annotations

from worldgraph.kg.embedded import sql
from worldgraph.kg.embedded.connection import SqliteConnection
from worldgraph.kg.store import Record

__all__ = ["SqliteIdempotency", "refs_text"]

_COLUMNS = ("tenant_id", "key", "request_hash", "status", "answer", "refs", "started_at", "expires_at")


def refs_text(refs: list[str]) -> str:
    """`` a b c ``: each ref between spaces, as DELETE_IDEMPOTENCY_NAMING looks them up."""
    return " " + " ".join(r for r in refs if r and " " not in r) + " "


class SqliteIdempotency:
    def __init__(self, db: SqliteConnection) -> None:
        self.db = db

    def begin(self, tenant_id: str, key: str, request_hash: str, now: str, expires_at: str,
              stale_before: str) -> Record | None:
        with self.db.transaction() as cur:
            cur.execute(sql.DELETE_EXPIRED_IDEMPOTENCY, (tenant_id, now))
            row = cur.execute(sql.GET_IDEMPOTENCY, (tenant_id, key)).fetchone()
            if row is not None:
                found = dict(zip(_COLUMNS, row))
                stale = found["status"] == "running" and found["started_at"] < stale_before
                if not (stale and found["request_hash"] == request_hash):
                    found["refs"] = found["refs"].split()
                    return found
            cur.execute(sql.PUT_IDEMPOTENCY, (tenant_id, key, request_hash, now, expires_at))
            return None

    def finish(self, tenant_id: str, key: str, answer: str, refs: list[str]) -> None:
        with self.db.transaction() as cur:
            cur.execute(sql.FINISH_IDEMPOTENCY, (answer, refs_text(refs), tenant_id, key))

    def abandon(self, tenant_id: str, key: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(sql.ABANDON_IDEMPOTENCY, (tenant_id, key))
