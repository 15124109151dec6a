"""The public Python API, guarded by one test: what ``worldgraph`` exports and what the facade
offers. A name added or removed here is an API change; make it on purpose, and update
docs/architecture.md and the README with it."""

from __future__ import annotations

import inspect
import typing

import worldgraph
from worldgraph import AsyncWorldModel, WorldModel

EXPORTED = {
    "AgentExperience", "AsyncWorldModel", "CanvasAction", "CanvasAudit", "CanvasContext", "Citation",
    "CypherQueryError", "DateRange", "DeltaValidationError", "EmbeddingDimensionError", "Episode",
    "EpisodeFeedback", "ExtractionError", "FeedbackResult", "ForgetReport", "InvalidInputError",
    "MergeReport", "MetacognitiveInsights", "Neighbour", "NotFoundError", "Page", "PartialWriteError",
    "ReadOnlyError", "ReadOnlyQueryError", "ReasoningChain", "RecallOptions", "RecallResult",
    "SceneRecord", "StorageError", "StoreUnavailableError", "TenantScopeError", "WorldContext", "WorldGraphConfig",
    "WorldGraphError", "WorldHit", "WorldModel", "__version__",
}

FACADE = {
    "apply_delta", "close", "context", "cypher", "export", "forget_agent", "forget_environment", "forget_episode",
    "forget_session",
    "forget_tenant", "get_agent_episodes", "get_episode", "import_snapshot", "list_agents",
    "list_environments", "list_episodes", "observe_round", "open", "purge", "readiness",
    "recall_experiences", "record_conversation", "record_conversations", "record_experience",
    "record_experiences", "reindex", "retry_indexing", "retry_updates", "search_world", "stats", "submit_feedback",
    "update_world", "wait_for_updates", "world_graph",
}


def _public(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls, callable) if not name.startswith("_")}


def test_the_package_exports_exactly_the_public_names() -> None:
    assert set(worldgraph.__all__) == EXPORTED
    assert len(worldgraph.__all__) == len(EXPORTED), "a name is listed twice in __all__"
    for name in worldgraph.__all__:
        assert hasattr(worldgraph, name), f"worldgraph.__all__ names {name}, which is not importable"


def test_every_exported_class_says_where_it_lives() -> None:
    # Re-exported classes keep their home module (no copies): the name a user imports is the
    # object the library raises or returns.
    for name in EXPORTED - {"__version__"}:
        obj = getattr(worldgraph, name)
        assert obj.__module__.startswith("worldgraph."), f"{name} comes from {obj.__module__}"
        assert obj.__doc__, f"{name} has no docstring"


def test_the_facade_offers_exactly_its_methods() -> None:
    assert _public(WorldModel) == FACADE


def test_the_async_facade_has_every_method_as_a_coroutine() -> None:
    for name in FACADE - {"open"}:
        assert inspect.iscoroutinefunction(getattr(AsyncWorldModel, name)), name
    assert inspect.iscoroutinefunction(AsyncWorldModel.open.__func__)  # type: ignore[attr-defined]


def test_facade_methods_are_typed_and_document_themselves() -> None:
    # A facade that returns Any loses what the layer below knows; every method names its
    # return type, and no result is a bare Any or a list of Any.
    for name in sorted(FACADE):
        method = getattr(WorldModel, name)
        hints = typing.get_type_hints(method)
        assert "return" in hints, f"WorldModel.{name} has no return annotation"
        ret = hints["return"]
        assert ret is not typing.Any, f"WorldModel.{name} returns Any"
        assert typing.get_args(ret) != (typing.Any,), f"WorldModel.{name} returns {ret}"
        assert method.__doc__, f"WorldModel.{name} has no docstring"
