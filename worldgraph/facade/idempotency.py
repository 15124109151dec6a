"""Idempotent writes: a write sent with an idempotency key (REST's ``Idempotency-Key`` header, the
``idempotency_key`` argument of the Python API, MCP and the TypeScript client) is done once.

- The first request with a key runs, and its answer is kept in the store (both stores, so every
  process and every restart sees it) for ``idempotency_ttl_seconds`` (24 h).
- A retry with the same key and the same request (the same operation and arguments: their SHA-256
  is kept, not the arguments) returns that first answer and stores nothing new.
- The same key with another request is an ``InvalidInputError`` on ``idempotency_key`` (422): a key
  names one request.
- While the first request still runs, a retry is a ``ConflictError`` (409): retry once it returned.
  A first request that failed leaves nothing behind (its retry runs anew); one whose process died
  is taken over after ``idempotency_stale_seconds``.
- Keys belong to a tenant. The kept answers may quote the user's words (a feedback's notes, a
  packet's observations, a dropped delta item), so each names what it is about (episode ids,
  ``env:<name>``) and forgetting an episode, an environment or the tenant deletes them with it.

Writes without a key are not deduplicated.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar, cast

from pydantic import BaseModel

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import ConflictError, InvalidInputError
from worldgraph.kg.store import GraphStore

__all__ = ["Idempotency", "check_key", "flag"]

T = TypeVar("T")
# printable ASCII without spaces (what an HTTP header carries as it is), 1 to 255 characters
_KEY = re.compile(r"[\x21-\x7e]{1,255}")


def check_key(key: Any) -> str:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise InvalidInputError("idempotency_key", "must be 1 to 255 printable ASCII characters without spaces "
                                "(a UUID is a good key)", key)
    return key


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def flag(name: str, value: bool) -> dict[str, bool]:
    """An optional flag in a request: present only when set, so a request without it hashes as it
    did before the flag existed (a key sent before an upgrade still matches its retry)."""
    return {name: True} if value else {}


def request_hash(operation: str, request: dict[str, Any]) -> str:
    text = json.dumps({"operation": operation, "request": request}, sort_keys=True, default=_plain,
                      ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="microseconds")


class Idempotency:
    """``run`` a write once per key (see the module's rules)."""

    def __init__(self, store: GraphStore, config: WorldGraphConfig) -> None:
        self.store = store
        self.config = config

    def run(self, tenant_id: str, key: str | None, operation: str, request: dict[str, Any], call: Callable[[], T],
            encode: Callable[[Any], tuple[Any, list[str]]], decode: Callable[[Any], Any]) -> T:
        """``call()``, once per (tenant, key): ``encode`` turns its answer into JSON and the refs a
        forget deletes it by, ``decode`` turns the kept JSON back into the answer of a retry."""
        if key is None:
            return call()
        check_key(key)
        digest = request_hash(operation, request)
        now = datetime.now(timezone.utc)
        found = self.store.begin_idempotent(
            tenant_id, key, digest, _iso(now), _iso(now + timedelta(seconds=self.config.idempotency_ttl_seconds)),
            _iso(now - timedelta(seconds=self.config.idempotency_stale_seconds)))
        if found is not None:
            if found.get("request_hash") != digest:
                raise InvalidInputError("idempotency_key", "was sent with another request (another operation or "
                                        "body) within the last day: a key names one request, so send a new key "
                                        "for a new request", key)
            if found.get("status") != "done":
                raise ConflictError("a request with this idempotency key is still being answered: retry once it "
                                    "has returned", "idempotency_key")
            return cast(T, decode(json.loads(found["answer"])))
        try:
            result = call()
        except BaseException:
            self.store.abandon_idempotent(tenant_id, key)
            raise
        answer, refs = encode(result)
        self.store.finish_idempotent(tenant_id, key, json.dumps(answer, ensure_ascii=False, default=_plain), refs)
        return result


# ---------------------------------------------------------------- the answers of each write, kept as JSON
Codec = tuple[Callable[[Any], tuple[Any, list[str]]], Callable[[Any], Any]]


def ids_codec() -> Codec:
    """An episode id or a list of them: the answer is the ids, which name themselves."""
    return (lambda ids: (ids, [ids] if isinstance(ids, str) else list(ids)), lambda kept: kept)


def feedback_codec() -> Codec:
    from worldgraph.memory.feedback import FeedbackResult

    return (lambda fb: (dict(fb), [str(fb["episode_id"])]), lambda kept: FeedbackResult(kept))


def packet_codec(env_name: str) -> Codec:
    """A scene packet (or None for an unflagged round): named by its environment, its episode and
    the rounds its history excerpt quotes (forgetting one of them takes the answer that quotes it)."""
    def refs(packet: Any) -> list[str]:
        if not packet:
            return [f"env:{env_name}"]
        quoted = [str(e) for e in packet.get("history_episode_ids") or [] if e]
        return [f"env:{env_name}", *([str(packet["episode_id"])] if packet.get("episode_id") else []), *quoted]
    return (lambda packet: (dict(packet) if packet is not None else None, refs(packet)), lambda kept: kept)


def report_codec(env_name: str) -> Codec:
    from worldgraph.world.rounds import report_from_dict

    return (lambda report: (report.to_dict(), [f"env:{env_name}"]), report_from_dict)
