"""API keys of ``worldgraph serve``: a key names its tenant, and only its hash is stored.

A key reads ``wg_<id>_<secret>``. ``id`` (16 hex digits) finds the record and is what
``worldgraph keys list`` shows and ``keys revoke`` takes; ``secret`` is 32 random bytes
(``secrets.token_urlsafe``). The store keeps ``sha256(key)`` in hex, never the key. A presented
key is hashed and compared with ``hmac.compare_digest`` (constant time). A fast hash is right
here: with 256 bits of entropy in the secret there is no guessing for a slow password hash to
slow down.

Keys live in the graph store (``GraphStore.add_api_key`` ...), so every server process sharing
one Neo4j, or one data folder, sees a key created or revoked by any of them at once: there is no
cache, a revoked key is refused on its next request.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Any

from worldgraph.clock import now_iso
from worldgraph.errors import InvalidInputError, NotFoundError
from worldgraph.kg.store import GraphStore
from worldgraph.names import check_tenant

PREFIX = "wg"
_KEY_RE = re.compile(r"^wg_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
_ID_RE = re.compile(r"^[0-9a-f]{16}$")
PUBLIC_FIELDS = ("id", "tenant_id", "name", "scopes", "created_at", "revoked_at")
# What a key may do: read (GET, recall, Cypher), write (record, rate, rounds, deltas), forget (every
# DELETE route and the MCP forget tool). Keys made before scopes existed keep read + write.
SCOPES = ("read", "write", "forget")
DEFAULT_SCOPES = ("read", "write")


def check_scopes(scopes: object) -> list[str]:
    """The scopes asked for, each known, in SCOPES order; None means the default (read, write)."""
    if scopes is None:
        return list(DEFAULT_SCOPES)
    if isinstance(scopes, str) or not isinstance(scopes, (list, tuple, set, frozenset)):
        raise InvalidInputError("scopes", f"must be a list of {', '.join(SCOPES)}", scopes)
    wanted = {str(s).strip() for part in scopes for s in str(part).split(",") if str(s).strip()}
    unknown = sorted(wanted - set(SCOPES))
    if unknown or not wanted:
        raise InvalidInputError("scope", f"unknown scope(s) {', '.join(unknown) or '(none given)'}: choose from "
                                f"{', '.join(SCOPES)} (e.g. --scope read for a dashboard)", scopes)
    return [s for s in SCOPES if s in wanted]


def scopes_of(record: dict[str, Any]) -> list[str]:
    """A stored key's scopes (read + write for a key made before scopes existed)."""
    scopes = record.get("scopes")
    return list(scopes) if scopes else list(DEFAULT_SCOPES)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class ApiKeys:
    """Create, check, list and revoke the keys kept in one graph store."""

    def __init__(self, store: GraphStore) -> None:
        self.store = store

    def create(self, tenant_id: str, name: str | None = None,
               scopes: list[str] | None = None) -> tuple[str, dict[str, Any]]:
        """A new key for ``tenant_id`` with ``scopes`` (default read + write): returns (the key,
        shown once; its public record)."""
        check_tenant(tenant_id, "tenant")
        granted = check_scopes(scopes)
        if name is not None and (not isinstance(name, str) or len(name) > 200):
            raise InvalidInputError("name", "must be a string of at most 200 characters", name)
        key_id = secrets.token_hex(8)
        key = f"{PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
        record = {"id": key_id, "tenant_id": tenant_id, "name": name or "", "key_hash": hash_key(key),
                  "scopes": granted, "created_at": now_iso(), "revoked_at": None}
        self.store.add_api_key(record)
        return key, _public(record)

    def tenant_of(self, key: str) -> str | None:
        """The tenant of a valid, unrevoked key; None for anything else."""
        record = self.record_of(key)
        return None if record is None else str(record["tenant_id"])

    def lookup(self, key: str) -> tuple[str, frozenset[str]] | None:
        """(tenant, scopes) of a valid, unrevoked key; None for anything else."""
        record = self.record_of(key)
        return None if record is None else (str(record["tenant_id"]), frozenset(record["scopes"]))

    def record_of(self, key: str) -> dict[str, Any] | None:
        """The public record (id, tenant_id, name, scopes, ...) of a valid, unrevoked key; None for anything else."""
        m = _KEY_RE.fullmatch(key or "")
        if m is None:
            return None
        record = self.store.get_api_key(m.group(1))
        if record is None or record.get("revoked_at") is not None:
            return None
        if not hmac.compare_digest(str(record.get("key_hash", "")), hash_key(key)):
            return None
        return _public(record)

    def list(self, tenant_id: str | None = None) -> list[dict[str, Any]]:
        """Every key (of one tenant, or all), oldest first, without hashes."""
        return [_public(r) for r in self.store.list_api_keys(tenant_id)]

    def resolve_id(self, text: str) -> str:
        """A key id from its full 16 hex digits or a unique start of it (at least 4, as the CLI's
        other ids); an unknown or ambiguous start is an error naming the matches."""
        if not isinstance(text, str) or not re.fullmatch(r"[0-9a-f]{4,16}", text):
            raise InvalidInputError("key_id", "must be the 16 hex digits `worldgraph keys list` shows, or a "
                                    "unique start of them (at least 4)", text)
        if len(text) == 16:
            return text
        matches = [r["id"] for r in self.store.list_api_keys() if str(r["id"]).startswith(text)]
        if len(matches) == 1:
            return str(matches[0])
        if not matches:
            raise NotFoundError("api key", text, "no key id starts with it (`worldgraph keys list` shows the ids)")
        raise InvalidInputError("key_id", f"{text!r} is the start of several key ids ({', '.join(matches[:5])}"
                                f"{', ...' if len(matches) > 5 else ''}); give more digits", text)

    def revoke(self, key_id: str) -> dict[str, Any]:
        """Revoke a key by its id (idempotent); NotFoundError for an unknown id."""
        if not isinstance(key_id, str) or not _ID_RE.fullmatch(key_id):
            raise InvalidInputError("key_id", "must be the 16 hex digits `worldgraph keys list` shows", key_id)
        return _public(self.store.revoke_api_key(key_id, now_iso()))


def _public(record: dict[str, Any]) -> dict[str, Any]:
    out = {k: record.get(k) for k in PUBLIC_FIELDS}
    out["scopes"] = scopes_of(record)
    return out
