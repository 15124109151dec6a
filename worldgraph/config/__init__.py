"""Settings: the original specification's WorldModelConfig with its defaults, plus every weight recall uses.

``WorldGraphConfig`` (settings.py) is one pydantic-settings model: each field can be set by an
environment variable ``WORLDGRAPH_<FIELD>`` (upper case), keywords win over the environment,
which wins over the defaults. Its fields are declared by area:

- memory.py: embedding and recording episodes, recall and its weights, the readiness exam
- storage.py: the SQLite file, the LanceDB index, the background upkeep, Neo4j and Cypher's limits
- world.py: the world-model pipeline
- server.py: ``worldgraph serve`` and the input limits
- environment.py: the only module of worldgraph that reads or sets the environment (LLM and
  object-store variables included): the command line's defaults (``cli_defaults``), the local
  Neo4j launcher's variables (``LauncherSettings``), library defaults (``set_library_defaults``)
  and the environment of a child process (``child_environment``); a test (test_config_env.py)
  holds every other module to that.

A new setting goes in the group of its area (or a new group, added to ``WorldGraphConfig``'s
bases); a new variable read outside the settings goes in environment.py. Every public name is
importable from ``worldgraph.config``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from worldgraph.lazy import lazy_exports

# The names are imported on first use (PEP 562): the command line's parser needs only
# environment.py (``cli_defaults``), not pydantic and the settings models (~0.15 s on a quiet
# machine, and `worldgraph --help` answers in less than twice that).
_EXPORTS = {
    "AWS_VARIABLES": "environment", "LIBRARY_DEFAULTS": "environment", "LauncherSettings": "environment",
    "PACKAGE_PARENT": "environment",
    "child_environment": "environment", "cli_defaults": "environment", "llm_configured": "environment",
    "malloc_perturb": "environment", "module_command": "environment",
    "object_store_options": "environment", "openai_endpoint": "environment", "set_library_defaults": "environment",
    "HYBRID_MIN_SIMILARITY": "memory", "SEED_MIN_SIMILARITY": "memory",
    "ENV_PREFIX": "settings", "NEO4J_VARIABLES": "settings", "WorldGraphConfig": "settings",
}

if TYPE_CHECKING:
    from worldgraph.config.environment import (
        AWS_VARIABLES,
        LIBRARY_DEFAULTS,
        PACKAGE_PARENT,
        LauncherSettings,
        child_environment,
        cli_defaults,
        llm_configured,
        malloc_perturb,
        module_command,
        object_store_options,
        openai_endpoint,
        set_library_defaults,
    )
    from worldgraph.config.memory import HYBRID_MIN_SIMILARITY, SEED_MIN_SIMILARITY
    from worldgraph.config.settings import ENV_PREFIX, NEO4J_VARIABLES, WorldGraphConfig


__getattr__, __dir__ = lazy_exports(__name__, globals(),
                                    {name: f"worldgraph.config.{area}" for name, area in _EXPORTS.items()})

__all__ = [
    "AWS_VARIABLES",
    "ENV_PREFIX",
    "HYBRID_MIN_SIMILARITY",
    "LIBRARY_DEFAULTS",
    "NEO4J_VARIABLES",
    "PACKAGE_PARENT",
    "SEED_MIN_SIMILARITY",
    "LauncherSettings",
    "WorldGraphConfig",
    "child_environment",
    "cli_defaults",
    "llm_configured",
    "malloc_perturb",
    "module_command",
    "object_store_options",
    "openai_endpoint",
    "set_library_defaults",
]
