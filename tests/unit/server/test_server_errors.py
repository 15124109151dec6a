"""The one table from worldgraph's exceptions to HTTP statuses and error bodies."""

from __future__ import annotations

import pytest

from worldgraph.errors import (
    CypherQueryError,
    DeltaValidationError,
    EmbeddingDimensionError,
    ExtractionError,
    InvalidInputError,
    NotFoundError,
    NotSupportedError,
    ReadOnlyQueryError,
    StoreUnavailableError,
    WorldGraphError,
)
from worldgraph.server.errors import describe, field_path


@pytest.mark.parametrize("exc, status, type_, field", [
    (InvalidInputError("experience.outcome", "must be success or failure"), 422, "invalid_input", "experience.outcome"),
    (DeltaValidationError(["edges[3]: must be an object, got string", "rules: missing"]), 422, "invalid_delta",
     "edges[3]"),
    (DeltaValidationError(["$: must be a JSON object"]), 422, "invalid_delta", None),
    (NotFoundError("episode", "e1"), 404, "not_found", "episode_id"),
    (NotFoundError("api key", "k1"), 404, "not_found", "api_key_id"),
    (ReadOnlyQueryError("cypher() is read-only: DELETE is not allowed"), 403, "query_refused", "query"),
    (CypherQueryError("Neo4j could not run the query: Invalid input ')'"), 400, "invalid_query", "query"),
    (NotSupportedError("Cypher needs the Neo4j store"), 501, "not_supported", None),
    (StoreUnavailableError("cannot reach Neo4j"), 503, "store_unavailable", None),
    (ExtractionError("the LLM failed"), 502, "extraction_failed", None),
    (EmbeddingDimensionError("embedder", "returned 12 dimensions, expected 384"), 500, "embedder_error", "embedder"),
    (WorldGraphError("something the caller can fix"), 400, "bad_request", None),
    (RuntimeError("secret internals"), 500, "internal", None),
])
def test_describe(exc: BaseException, status: int, type_: str, field: str | None) -> None:
    err = describe(exc)
    assert (err.status, err.type, err.field) == (status, type_, field)
    assert set(err.body()["error"]) == {"type", "message", "field"}
    if type_ == "internal":
        assert "secret" not in err.message  # details stay in the server log
    else:
        assert err.message == str(exc)


@pytest.mark.parametrize("loc, path", [
    (("body", "experiences", 0, "outcome"), "experiences[0].outcome"),
    (("body", "batch", "experiences", 2, "canvas_action_ids", 1), "experiences[2].canvas_action_ids[1]"),
    (("body", "experience", "outcome"), "experience.outcome"),
    (("body", "options", "date_range", "start"), "options.date_range.start"),
    (("query", "limit"), "limit"),
    (("path", "episode_id"), "episode_id"),
    (("body",), "body"),
])
def test_field_path(loc: tuple[object, ...], path: str) -> None:
    assert field_path(loc) == path
