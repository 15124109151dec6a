"""worldgraph: a world model and long-term memory for LLM agents.

    from worldgraph import WorldModel, AgentExperience, RecallOptions, CanvasContext
    with WorldModel.open("./data") as wm:
        episode_id = wm.record_experience("acme", {...})
        results = wm.recall_experiences("acme", "Finance", "reconcile inventory")

``AsyncWorldModel`` has the same methods as coroutines, for asyncio code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from worldgraph.lazy import lazy_exports

# The public names, imported on first use (PEP 562): ``import worldgraph.kg.embedded...`` (a child
# process of the store, a tool) does not load the service, the recall pipeline and their
# libraries (~1.7 s), and ``from worldgraph import WorldModel`` works as before.
_EXPORTS = {
    "AsyncWorldModel": "worldgraph.aio",
    "WorldGraphConfig": "worldgraph.config",
    "CypherQueryError": "worldgraph.errors",
    "DeltaValidationError": "worldgraph.errors",
    "EmbeddingDimensionError": "worldgraph.errors",
    "ExtractionError": "worldgraph.errors",
    "InvalidInputError": "worldgraph.errors",
    "NotFoundError": "worldgraph.errors",
    "PartialWriteError": "worldgraph.errors",
    "ReadOnlyError": "worldgraph.errors",
    "ReadOnlyQueryError": "worldgraph.errors",
    "StorageError": "worldgraph.errors",
    "StoreUnavailableError": "worldgraph.errors",
    "TenantScopeError": "worldgraph.errors",
    "WorldGraphError": "worldgraph.errors",
    "MergeReport": "worldgraph.kg.records",
    "SceneRecord": "worldgraph.kg.records",
    "Episode": "worldgraph.memory.episode",
    "FeedbackResult": "worldgraph.memory.feedback",
    "ForgetReport": "worldgraph.memory.lifecycle",
    "Page": "worldgraph.memory.lifecycle",
    "AgentExperience": "worldgraph.memory.models",
    "CanvasAction": "worldgraph.memory.models",
    "CanvasAudit": "worldgraph.memory.models",
    "CanvasContext": "worldgraph.memory.models",
    "DateRange": "worldgraph.memory.models",
    "EpisodeFeedback": "worldgraph.memory.models",
    "MetacognitiveInsights": "worldgraph.memory.models",
    "ReasoningChain": "worldgraph.memory.models",
    "RecallOptions": "worldgraph.memory.models",
    "RecallResult": "worldgraph.memory.recall.pipeline",
    "WorldModel": "worldgraph.service",
    "Citation": "worldgraph.world.search.models",
    "Neighbour": "worldgraph.world.search.models",
    "WorldContext": "worldgraph.world.search.models",
    "WorldHit": "worldgraph.world.search.models",
}

if TYPE_CHECKING:
    from worldgraph.aio import AsyncWorldModel
    from worldgraph.config import WorldGraphConfig
    from worldgraph.errors import (
        CypherQueryError,
        DeltaValidationError,
        EmbeddingDimensionError,
        ExtractionError,
        InvalidInputError,
        NotFoundError,
        PartialWriteError,
        ReadOnlyError,
        ReadOnlyQueryError,
        StorageError,
        StoreUnavailableError,
        TenantScopeError,
        WorldGraphError,
    )
    from worldgraph.kg.records import MergeReport, SceneRecord
    from worldgraph.memory.episode import Episode
    from worldgraph.memory.feedback import FeedbackResult
    from worldgraph.memory.lifecycle import ForgetReport, Page
    from worldgraph.memory.models import (
        AgentExperience,
        CanvasAction,
        CanvasAudit,
        CanvasContext,
        DateRange,
        EpisodeFeedback,
        MetacognitiveInsights,
        ReasoningChain,
        RecallOptions,
    )
    from worldgraph.memory.recall.pipeline import RecallResult
    from worldgraph.service import WorldModel
    from worldgraph.world.search.models import Citation, Neighbour, WorldContext, WorldHit


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)

__version__ = "0.1.0"

__all__ = [
    "AgentExperience",
    "AsyncWorldModel",
    "CanvasAction",
    "CanvasAudit",
    "CanvasContext",
    "Citation",
    "CypherQueryError",
    "DateRange",
    "DeltaValidationError",
    "EmbeddingDimensionError",
    "Episode",
    "EpisodeFeedback",
    "ExtractionError",
    "FeedbackResult",
    "ForgetReport",
    "InvalidInputError",
    "MergeReport",
    "MetacognitiveInsights",
    "Neighbour",
    "NotFoundError",
    "Page",
    "PartialWriteError",
    "ReadOnlyError",
    "ReadOnlyQueryError",
    "ReasoningChain",
    "RecallOptions",
    "RecallResult",
    "SceneRecord",
    "StorageError",
    "StoreUnavailableError",
    "TenantScopeError",
    "WorldContext",
    "WorldGraphConfig",
    "WorldGraphError",
    "WorldHit",
    "WorldModel",
    "__version__",
]
