"""Errors that name the field, the rule it broke and what to do about it.

Every error worldgraph raises on purpose is a ``WorldGraphError``; each also subclasses the
built-in exception a caller would expect (a bad value is a ``ValueError``, an unknown id a
``LookupError``), so ``except ValueError`` keeps working. The tree (tests/unit/ground/test_errors.py checks it
against the classes):

* WorldGraphError
  + InvalidInputError (ValueError): a value breaks a rule; ``field`` names it
    - CypherInputError: a Cypher query, its params or its result break a size limit
    - EmbeddingDimensionError: an embedder returned vectors of the wrong shape
  + NotFoundError (LookupError): an id the store does not hold
  + ConflictError: the request clashes with the state of the store (409)
    - AmbiguousIdError (LookupError): the start of an id that several ids share; ``candidates``
  + StoreUnavailableError (ConnectionError): a server the store needs cannot be reached
    - CypherCrashError: the embedded Cypher engine crashed on the query (its child only)
  + CypherBusyError: too many Cypher queries in flight (of the tenant, or of the process)
  + ReadOnlyQueryError (PermissionError): a Cypher query that would write or leave the tenant
    - TenantScopeError: a Cypher query not provably inside the caller's tenant
  + CypherQueryError (ValueError): a query the store could not run (syntax, type, timeout)
  + DeltaValidationError (ValueError): a graph delta that is not well formed
  + NotSupportedError: this store or configuration cannot do what was asked
  + ExtractionError: the LLM gave no valid delta, or could not be reached
  + ReadOnlyError (PermissionError): a write asked of a read-only WorldModel
  + StorageError (OSError): the disk refused a write; the transaction was rolled back
  + LeaseLostError: a world-update worker's lease ran out; its merge was refused
  + PartialWriteError: the first of two writes committed, the second failed

``ERROR_TYPES`` below maps them to the one error vocabulary of every surface (REST, MCP, the
CLI's ``--json``).
"""

from __future__ import annotations


class WorldGraphError(Exception):
    """Base class of every error worldgraph raises on purpose."""


class InvalidInputError(WorldGraphError, ValueError):
    """A caller gave a value that breaks a rule. ``field`` names it, ``rule`` says why."""

    def __init__(self, field: str, rule: str, value: object = None) -> None:
        self.field = field
        self.rule = rule
        self.value = value
        super().__init__(f"{field}: {rule}")


class CypherInputError(InvalidInputError):
    """A Cypher query, its parameters or its result break a limit (text size, nesting, 64-bit
    integers, rows, bytes). Refused before the query reaches a store, or as soon as the result
    passes a cap; REST answers 400 ``invalid_input`` (the request is well-formed JSON whose query
    no store will run), other bad fields stay 422."""


class NotFoundError(WorldGraphError, LookupError):
    """An id (episode, tenant, scene, ...) that the store does not hold."""

    def __init__(self, kind: str, ident: str, hint: str = "", field: str | None = None) -> None:
        self.kind = kind
        self.ident = ident
        # the argument that named it: an environment is named by env_name on every surface
        self.field = field or ("env_name" if kind == "environment" else f"{kind.replace(' ', '_')}_id")
        msg = f"{kind} {ident!r} not found"
        super().__init__(f"{msg}: {hint}" if hint else msg)


class ConflictError(WorldGraphError):
    """The request clashes with the state of the store (REST 409 ``conflict``): e.g. a write whose
    idempotency key another request is still answering. ``field`` names what clashes."""

    def __init__(self, message: str, field: str | None = None) -> None:
        self.field = field
        super().__init__(message)


class AmbiguousIdError(ConflictError, LookupError):
    """The start of an id that several ids share (REST 409 ``ambiguous_id``): ``candidates`` lists
    them (the first few), so the caller can give more characters."""

    def __init__(self, kind: str, text: str, candidates: list[str], field: str) -> None:
        self.kind = kind
        self.candidates = candidates
        shown = ", ".join(candidates[:5]) + (", ..." if len(candidates) > 5 else "")
        super().__init__(f"{text!r} is the start of several {kind} ids ({shown}): give more characters", field)


class EmbeddingDimensionError(InvalidInputError):
    """An embedder returned vectors of the wrong shape."""


class StoreUnavailableError(WorldGraphError, ConnectionError):
    """A server the store needs (Neo4j) cannot be reached; the message says how to start one."""


class CypherCrashError(StoreUnavailableError):
    """The embedded Cypher engine crashed while it ran the query: the query child it ran in ended
    (nothing else did). The first time, try again after ``retry_after`` seconds; a query that
    crashes a fresh child again is refused (``CypherQueryError``)."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class CypherBusyError(WorldGraphError):
    """Too many Cypher queries run at once, of the caller's tenant or of the whole process
    (``cypher_max_in_flight_per_tenant``, ``cypher_max_in_flight``): try again after
    ``retry_after`` seconds. REST answers 429 with ``Retry-After``."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ReadOnlyQueryError(WorldGraphError, PermissionError):
    """A Cypher query that would write, or reach outside the caller's tenant."""


class CypherQueryError(WorldGraphError, ValueError):
    """A Cypher query the guard allowed but Neo4j could not run: a syntax or type error, or it ran
    past ``cypher_timeout_seconds``. The message carries Neo4j's reason."""


class TenantScopeError(ReadOnlyQueryError):
    """A Cypher query ``cypher()`` cannot prove stays inside the caller's tenant (see
    ``worldgraph.kg.cypher_guard``); the message names the part and how to scope it."""


class DeltaValidationError(WorldGraphError, ValueError):
    """A graph delta that is not an object with four arrays of objects; nothing was written.

    Given to ``apply_delta`` by a caller, or returned by the LLM and still invalid after the
    repair round (then ``raw`` holds the answer's start)."""

    def __init__(self, errors: list[str], raw: str | None = None) -> None:
        self.errors = errors
        self.raw = raw
        what = "invalid graph delta" if raw is None else "the LLM returned an invalid graph delta twice (answer and repair)"
        super().__init__(f"{what}: " + "; ".join(errors[:10]))


class NotSupportedError(WorldGraphError):
    """This store or configuration cannot do what was asked (e.g. a world-update worker without
    an LLM configured); the message names what to use instead."""


class ExtractionError(WorldGraphError):
    """The LLM could not produce a valid delta (after the repair round), or could not be reached."""


class ReadOnlyError(WorldGraphError, PermissionError):
    """A write asked of a WorldModel opened read-only. ``operation`` names the call; the message
    says why the model is read-only and how to open it writable."""

    def __init__(self, operation: str, reason: str = "the WorldModel was opened with read_only=True") -> None:
        self.operation = operation
        self.reason = reason
        super().__init__(
            f"{operation} writes, but {reason}: nothing was written. To write, open the folder with "
            "WorldModel.open(path) (read_only=False, the default; `worldgraph` without --read-only) "
            "on a writable folder with free space")


class StorageError(WorldGraphError, OSError):
    """The disk refused a write (full, read-only, I/O error). That transaction was rolled back:
    nothing of it is stored."""


class LeaseLostError(WorldGraphError):
    """A world-update worker's lease on a scene packet ran out and another worker took the packet
    over (or it was released): this worker's merge of it was refused, nothing was written."""


class PartialWriteError(WorldGraphError):
    """A call made of two writes whose first committed and second failed. ``committed`` says
    exactly what is stored (e.g. ``{"episode_ids": [...]}``), so a retry does not duplicate it."""

    def __init__(self, message: str, committed: dict[str, list[str]]) -> None:
        self.committed = committed
        super().__init__(f"{message}; already committed: {committed}")


# The one error vocabulary of every surface (REST bodies, MCP tool errors, the CLI's --json):
# ``{"error": {"type", "message", "field"}}`` with these types. First match wins: subclasses
# before their bases. The status is REST's (worldgraph.server.errors documents the table).
ERROR_TYPES: tuple[tuple[type[BaseException], int, str], ...] = (
    (EmbeddingDimensionError, 500, "embedder_error"),
    (CypherInputError, 400, "invalid_input"),
    (InvalidInputError, 422, "invalid_input"),
    (DeltaValidationError, 422, "invalid_delta"),
    (NotFoundError, 404, "not_found"),
    (AmbiguousIdError, 409, "ambiguous_id"),
    (ConflictError, 409, "conflict"),
    (ReadOnlyQueryError, 403, "query_refused"),
    (CypherQueryError, 400, "invalid_query"),
    (NotSupportedError, 501, "not_supported"),
    (StoreUnavailableError, 503, "store_unavailable"),
    (CypherBusyError, 429, "too_many_requests"),
    (ExtractionError, 502, "extraction_failed"),
    (ReadOnlyError, 403, "read_only"),
    (StorageError, 507, "storage_full_or_failed"),
    (PartialWriteError, 500, "partial_write"),
    (WorldGraphError, 400, "bad_request"),
)


def classify(exc: BaseException) -> tuple[int, str, str | None] | None:
    """``(status, type, field)`` of a worldgraph error (see ERROR_TYPES), None for any other
    exception (REST answers those 500 ``internal``)."""
    for cls, status, type_ in ERROR_TYPES:
        if isinstance(exc, cls):
            return status, type_, error_field(exc)
    return None


def error_field(exc: BaseException) -> str | None:
    """The field an error names, as a caller writes it (``experiences[0].outcome``, ``episode_id``)."""
    if isinstance(exc, InvalidInputError):
        return exc.field
    if isinstance(exc, DeltaValidationError):
        first = exc.errors[0] if exc.errors else ""
        path = first.split(":", 1)[0].strip()
        return None if path in ("", "$") else path
    if isinstance(exc, (NotFoundError, ConflictError)):
        return exc.field
    if isinstance(exc, (ReadOnlyQueryError, CypherQueryError)):
        return "query"
    return None
