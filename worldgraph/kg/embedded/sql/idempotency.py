"""The idempotency table: the first answer to a write sent with an idempotency key
(``kg/embedded/idempotency.py``). ``refs`` is a space-separated list with a space at each end
(`` id1 id2 env:Kitchen ``), so a forget finds the records that name an episode or an environment
with ``instr``."""

from __future__ import annotations

IDEMPOTENCY_SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency (
  tenant_id TEXT NOT NULL, key TEXT NOT NULL, request_hash TEXT NOT NULL, status TEXT NOT NULL,
  answer TEXT, refs TEXT NOT NULL DEFAULT ' ', started_at TEXT NOT NULL, expires_at TEXT NOT NULL,
  PRIMARY KEY (tenant_id, key));
CREATE INDEX IF NOT EXISTS idempotency_expiry ON idempotency (tenant_id, expires_at);
"""

DELETE_EXPIRED_IDEMPOTENCY = "DELETE FROM idempotency WHERE tenant_id = ? AND expires_at < ?"
GET_IDEMPOTENCY = ("SELECT tenant_id, key, request_hash, status, answer, refs, started_at, expires_at FROM idempotency "
                   "WHERE tenant_id = ? AND key = ?")
PUT_IDEMPOTENCY = ("INSERT OR REPLACE INTO idempotency(tenant_id, key, request_hash, status, answer, refs, started_at, "
                   "expires_at) VALUES (?, ?, ?, 'running', NULL, ' ', ?, ?)")
FINISH_IDEMPOTENCY = ("UPDATE idempotency SET status = 'done', answer = ?, refs = ? WHERE tenant_id = ? AND key = ? "
                      "AND status = 'running'")
ABANDON_IDEMPOTENCY = "DELETE FROM idempotency WHERE tenant_id = ? AND key = ? AND status = 'running'"
# a forget of an episode or an environment: the answers that name it (refs " <id> " / " env:<name> ")
DELETE_IDEMPOTENCY_NAMING = "DELETE FROM idempotency WHERE tenant_id = ? AND instr(refs, ' ' || ? || ' ') > 0"
