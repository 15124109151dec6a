"""What any store checks before a ``cypher()`` query reaches it: the query text and the parameters.

Store-independent (no driver, no database): ``WorldModel.cypher`` calls both functions before it
hands the query to its store, whichever store that is, so every surface (Python, CLI, REST, MCP)
refuses the same inputs with the same ``CypherInputError`` (REST: 400 ``invalid_input``, MCP: ``invalid_input``).

* ``check_query_text``: the query is valid Unicode, at most ``cypher_max_query_bytes`` UTF-8
  bytes, and nests brackets (``( [ {``) and ``CASE ... END`` at most ``cypher_max_nesting_depth``
  deep. Neo4j's parser recurses once per level: ``RETURN [[[ ... 900 levels ... ]]]`` (1.8 KB)
  overflows its stack, and the request then hung for minutes. String literals, quoted names and
  comments are skipped, so brackets inside them do not count.
* ``check_params``: walked without recursion (a list nested a million deep is refused, not a
  ``RecursionError``); keys are strings; values are what every store can bind: null, booleans,
  64-bit integers (Cypher's INTEGER; a larger Python int made the driver raise OverflowError),
  finite floats, valid Unicode strings, bytes, lists and maps, and ``datetime`` dates, times,
  datetimes and durations; nesting at most ``cypher_max_nesting_depth`` containers, and the
  whole at most ``cypher_max_params_bytes`` (its text and bytes plus 8 a value). A refusal names
  the parameter's path (``params.x[3].y``), the rule and the setting that raises the limit.

And what every store applies to a query that passed them:

* ``CypherSettings``: the ``cypher_*`` settings a store runs queries with (``from_config``).
* ``ADMISSION``: at most ``cypher_max_in_flight_per_tenant`` queries of one tenant and
  ``cypher_max_in_flight`` of the whole process run at once, on either store; one more is refused
  at once with ``CypherBusyError`` (REST: 429 with ``Retry-After``), so one tenant's slow queries
  never queue another's.
* ``COUNTERS``: what ``/metrics`` reports (queries refused as too many, embedded query children
  killed at their deadline or crashed).
"""

from __future__ import annotations

import datetime as dt
import math
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import CypherBusyError, CypherInputError
from worldgraph.limits import limit_rule, raise_hint, utf8_size

__all__ = ["ADMISSION", "COUNTERS", "CRASHED", "INT64_MAX", "INT64_MIN", "KILLED_AT_DEADLINE", "REFUSED_BUSY", "RETRY_AFTER",
           "Admission", "CypherSettings", "check_params",
           "check_query_text", "json_size", "nesting_depth"]

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# What the depth scan skips whole (as cypher_guard.check_text blanks it) and what it counts.
_SKIP_RE = re.compile(r"'(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|`[^`]*`?|//[^\n]*|/\*.*?(?:\*/|\Z)", re.S)
_TOKEN_RE = re.compile(r"[(\[{]|[)\]}]|(?<![\w$`.])(?:CASE|END)(?![\w`])|['\"`]|//|/\*", re.I)
_SCALARS = (bool, int, float, str, bytes, bytearray, dt.date, dt.time, dt.timedelta)  # dt.datetime is a dt.date


def nesting_depth(query: str) -> int:
    """How deep ``( [ {`` and ``CASE ... END`` nest in ``query``, outside strings, quoted names and
    comments: ``RETURN [[1]]`` is 2. One linear pass (regex search from each token on)."""
    depth = deepest = i = 0
    while True:
        m = _TOKEN_RE.search(query, i)
        if m is None:
            return deepest
        tok = m.group(0)
        if tok in ("'", '"', "`", "//", "/*"):
            skip = _SKIP_RE.match(query, m.start())
            i = skip.end() if skip is not None and skip.end() > m.start() else m.end()
            continue
        if tok in "([{" or tok.upper() == "CASE":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(depth - 1, 0)
        i = m.end()


def check_query_text(query: Any, cfg: WorldGraphConfig) -> None:
    """Refuse, before any store sees it, a query too long or nested too deep for a parser."""
    if not isinstance(query, str) or not query.strip():
        raise CypherInputError("query", "must be a non-empty Cypher string")
    size = utf8_size(query, "query")
    if size > cfg.cypher_max_query_bytes:
        raise CypherInputError("query", limit_rule("is UTF-8 bytes:", size, cfg.cypher_max_query_bytes,
                                                    "cypher_max_query_bytes"))
    depth = nesting_depth(query)
    if depth > cfg.cypher_max_nesting_depth:
        raise CypherInputError(
            "query", f"nests brackets or CASE {depth} levels deep, over the limit of {cfg.cypher_max_nesting_depth} "
            f"({raise_hint('cypher_max_nesting_depth')}); pass deep values as a parameter, or flatten the query")


def check_params(params: Any, cfg: WorldGraphConfig) -> None:
    """Refuse parameters no store can bind, or too deep or too big (module docstring)."""
    if params is None:
        return
    if not isinstance(params, Mapping):
        raise CypherInputError("params", f"must be a map of parameter names to values, got {type(params).__name__}")
    max_depth, limit = cfg.cypher_max_nesting_depth, cfg.cypher_max_params_bytes
    total = 0
    # (value, path, depth); paths are short strings built as the walk goes (params are small)
    stack: list[tuple[Any, str, int]] = [(params, "params", 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, (Mapping, list, tuple)):
            total += 8 + 8 * len(value)  # counted before the items are listed: a huge container stops here
            if total > limit:
                break
            if value and depth >= max_depth:
                raise CypherInputError(path, f"nests lists and maps deeper than {max_depth} levels "
                                        f"({raise_hint('cypher_max_nesting_depth')})")
            if isinstance(value, Mapping):
                for k, v in value.items():
                    if not isinstance(k, str):
                        raise CypherInputError(path, f"map keys must be strings, got {type(k).__name__} {k!r}")
                    total += utf8_size(k, f"{path}.{k!r}")
                    stack.append((v, f"{path}.{k}", depth + 1))
            else:
                stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
        else:
            total += 8 + _scalar_size(value, path)
        if total > limit:
            break
    if total > limit:
        raise CypherInputError("params", f"are more than {limit} bytes ({raise_hint('cypher_max_params_bytes')})")


def _scalar_size(value: Any, path: str) -> int:
    if not isinstance(value, _SCALARS) and value is not None:
        raise CypherInputError(path, f"a {type(value).__name__} is not a Cypher value (use null, a boolean, a number, "
                                "a string, bytes, a list, a map, or a datetime date / time / timedelta)")
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise CypherInputError(path, f"is an integer outside Cypher's 64-bit range [{INT64_MIN}, {INT64_MAX}] "
                                    f"({value.bit_length()} bits); pass it as a string or a float")
        return 0
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CypherInputError(path, f"must be a finite number, got {value!r}")
        return 0
    if isinstance(value, str):
        return utf8_size(value, path)
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    return 0


def json_size(value: Any, budget: int) -> int:
    """Roughly the bytes of a result value as JSON: strings by their length, 8 for any other
    scalar, 2 a container and its keys. Walked without recursion, and stopped as soon as the size
    passes ``budget`` (the rest of a result's byte cap), so a huge value costs no more than the
    cap to measure. Besides lists and maps it sizes a store's graph values before they are
    converted: anything with ``items()`` (a node, a relationship) as a map, anything with
    ``nodes`` and ``relationships`` (a path) as their list."""
    size = 0
    stack = [value]
    while stack and size <= budget:
        v = stack.pop()
        if isinstance(v, str):
            size += len(v) + 2
        elif isinstance(v, (list, tuple)):
            size += 2 + len(v)
            if size <= budget:
                stack.extend(v)
        elif isinstance(v, Mapping) or callable(getattr(v, "items", None)):
            size += 2
            for k, x in v.items():
                size += len(k) + 4 if isinstance(k, str) else 8
                stack.append(x)
        elif hasattr(v, "relationships") and hasattr(v, "nodes"):
            stack.extend(v.nodes)
            stack.extend(v.relationships)
        else:
            size += 8
    return size


@dataclass(frozen=True)
class CypherSettings:
    """The ``cypher_*`` settings a store runs queries with (the config's defaults when not given)."""

    timeout: float = float(WorldGraphConfig.model_fields["cypher_timeout_seconds"].default)
    max_rows: int = int(WorldGraphConfig.model_fields["cypher_max_rows"].default)
    max_bytes: int = int(WorldGraphConfig.model_fields["cypher_max_result_bytes"].default)
    per_tenant: int = int(WorldGraphConfig.model_fields["cypher_max_in_flight_per_tenant"].default)
    in_flight: int = int(WorldGraphConfig.model_fields["cypher_max_in_flight"].default)
    child_memory: int = int(WorldGraphConfig.model_fields["cypher_child_memory_mb"].default) << 20
    allow_unsandboxed: bool = False
    guard_off: bool = False  # tests only: see WorldGraphConfig.testing_cypher_guard_off
    no_landlock: bool = False  # tests only: see WorldGraphConfig.testing_no_landlock

    @classmethod
    def from_config(cls, cfg: WorldGraphConfig) -> CypherSettings:
        return cls(timeout=cfg.cypher_timeout_seconds, max_rows=cfg.cypher_max_rows,
                   max_bytes=cfg.cypher_max_result_bytes, per_tenant=cfg.cypher_max_in_flight_per_tenant,
                   in_flight=cfg.cypher_max_in_flight, child_memory=cfg.cypher_child_memory_mb << 20,
                   allow_unsandboxed=cfg.cypher_allow_unsandboxed, guard_off=cfg.testing_cypher_guard_off,
                   no_landlock=cfg.testing_no_landlock)


class _Counters:
    """Counts since the process started, by name (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + n

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts.get(name, 0)


COUNTERS = _Counters()
# the names COUNTERS keeps
REFUSED_BUSY, KILLED_AT_DEADLINE, CRASHED = "refused_busy", "killed_at_deadline", "crashed"
RETRY_AFTER = 1  # seconds a refused caller is told to wait


class Admission:
    """How many Cypher queries run now, per tenant and in all (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}

    @contextmanager
    def admit(self, tenant_id: str, settings: CypherSettings) -> Iterator[None]:
        """Hold one of the tenant's places (and one of the process's) while the block runs;
        CypherBusyError at once when none is free."""
        with self._lock:
            mine, total = self._running.get(tenant_id, 0), sum(self._running.values())
            if mine >= settings.per_tenant or total >= settings.in_flight:
                COUNTERS.add(REFUSED_BUSY)
                who = (f"this tenant already has {mine} (cypher_max_in_flight_per_tenant)"
                       if mine >= settings.per_tenant else f"the server already runs {total} (cypher_max_in_flight)")
                raise CypherBusyError(f"too many Cypher queries at once: {who}; retry in {RETRY_AFTER} s, or "
                                      "wait for your running queries to end", retry_after=RETRY_AFTER)
            self._running[tenant_id] = mine + 1
        try:
            yield
        finally:
            with self._lock:
                self._running[tenant_id] -= 1
                if not self._running[tenant_id]:
                    del self._running[tenant_id]

    def running(self, tenant_id: str | None = None) -> int:
        with self._lock:
            return self._running.get(tenant_id, 0) if tenant_id is not None else sum(self._running.values())


ADMISSION = Admission()
