"""worldgraph: a world model and long-term memory for LLM agents.

    from worldgraph import WorldModel, AgentExperience, RecallOptions, CanvasContext
    with WorldModel.open("./data") as wm:
        episode_id = wm.record_experience("acme", {...})
        results = wm.recall_experiences("acme", "Finance", "reconcile inventory")

``AsyncWorldModel`` has the same methods as coroutines, for asyncio code.
"""

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

__version__ = "0.1.0"

__all__ = [
    "AgentExperience",
    "AsyncWorldModel",
    "CanvasAction",
    "CanvasAudit",
    "CanvasContext",
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
    "WorldGraphConfig",
    "WorldGraphError",
    "WorldModel",
    "__version__",
]
