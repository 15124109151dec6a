"""Every Cypher statement of the Neo4j store, and its schema, under one name (``q``).

Five modules hold them, each read top-down: ``neo4j.schema`` (the graph model, keys,
constraints, indexes, migrations), ``neo4j.episode_queries`` (episodes, sessions, feedback,
canvases, neighbourhoods, API keys), ``neo4j.idempotency_queries`` (the first answers of idempotent
writes), ``neo4j.world_queries`` (world nodes, rules, edges,
scenes) and ``neo4j.lifecycle_queries`` (listing, forgetting, the forget audit).
``from worldgraph.kg.neo4j import queries as q`` reaches all of them; no statement name is defined in two of them.
"""

from __future__ import annotations

from worldgraph.kg.neo4j.episode_queries import *  # noqa: F401,F403
from worldgraph.kg.neo4j.idempotency_queries import *  # noqa: F401,F403
from worldgraph.kg.neo4j.lifecycle_queries import *  # noqa: F401,F403
from worldgraph.kg.neo4j.schema import *  # noqa: F401,F403
from worldgraph.kg.neo4j.world_queries import *  # noqa: F401,F403
