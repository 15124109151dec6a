"""How the stores write records as JSON text, and read them back: one place, so the embedded
store, Neo4j and the lease helpers of both keep the same bytes."""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["dumps", "loads"]


# orjson writes the same JSON as json.dumps(ensure_ascii=False, sort_keys=True, separators=(",", ":")),
# ~7x faster (32 -> 4 us for an episode record: every record written goes through here). The
# bytes are the same but for floats under 1e-4, which it spells 1e-7 where json writes 1e-07
# (the same float when read). Whatever it would write differently is refused by it and handed to
# json: integers beyond 64 bits, non-string keys, lone surrogates, and (the passthrough options)
# datetimes, dataclasses and subclasses of str / int / float / dict / list such as enums and
# numpy floats. A non-finite float would become null instead of json's non-standard NaN; every
# input check refuses those before a record is built (limits.check_value, the delta validator).
_ORJSON_OPTIONS = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
                   | orjson.OPT_PASSTHROUGH_SUBCLASS)


def dumps(obj: Any) -> str:
    """Canonical JSON: keys sorted, no spaces, UTF-8 unescaped (the exact bytes a store keeps)."""
    try:
        return orjson.dumps(obj, option=_ORJSON_OPTIONS).decode("utf-8")
    except TypeError:  # orjson.JSONEncodeError is one: see _ORJSON_OPTIONS
        return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def loads(data: str) -> Any:
    """Reading records is on recall's path (about 100 candidates a query): orjson parses them
    ~4x faster than json. It refuses integers beyond 64 bits, which json.dumps can write (a
    world node's attributes may hold one), so those few fall back to json."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
