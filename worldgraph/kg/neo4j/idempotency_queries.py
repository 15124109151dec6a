"""The Cypher of idempotency records: (:IdempotencyKey {id: tenant_id + US + key, tenant_id, key,
request_hash, status, answer, refs: [episode ids and "env:<name>"], started_at, expires_at}), the
first answer to a write sent with an idempotency key (worldgraph.facade.idempotency). Made lazily,
with their constraint, on the first idempotent write; a forget deletes the records whose refs name
what it forgets (the answer may quote the user's words)."""

from __future__ import annotations

IDEMPOTENCY_CONSTRAINT = ("CREATE CONSTRAINT wg_idempotency_id IF NOT EXISTS "
                          "FOR (k:IdempotencyKey) REQUIRE k.id IS UNIQUE")
IDEMPOTENCY_TENANT_INDEX = ("CREATE INDEX wg_idempotency_tenant IF NOT EXISTS "
                            "FOR (k:IdempotencyKey) ON (k.tenant_id, k.expires_at)")

DELETE_EXPIRED_IDEMPOTENCY = """
MATCH (k:IdempotencyKey) WHERE k.tenant_id = $tenant_id AND k.expires_at < $now DELETE k
"""

# MERGE on the unique id, and a write on a match too: the record's lock is held to the end of the
# transaction, so of two requests with one key the second sees what the first wrote
LOCK_IDEMPOTENCY = """
MERGE (k:IdempotencyKey {id: $id})
ON CREATE SET k.tenant_id = $tenant_id, k.key = $key, k.status = 'new', k.refs = []
SET k.locked_at = $now
RETURN properties(k) AS record
"""

START_IDEMPOTENCY = """
MATCH (k:IdempotencyKey {id: $id})
SET k.request_hash = $request_hash, k.status = 'running', k.answer = null, k.refs = [],
    k.started_at = $now, k.expires_at = $expires_at
"""

FINISH_IDEMPOTENCY = """
MATCH (k:IdempotencyKey {id: $id}) WHERE k.status = 'running'
SET k.status = 'done', k.answer = $answer, k.refs = $refs
"""

ABANDON_IDEMPOTENCY = "MATCH (k:IdempotencyKey {id: $id}) WHERE k.status = 'running' DELETE k"

# a forget of an episode or an environment ($ref: its id, or "env:<name>")
DELETE_IDEMPOTENCY_NAMING = """
MATCH (k:IdempotencyKey) WHERE k.tenant_id = $tenant_id AND $ref IN k.refs DELETE k
"""
