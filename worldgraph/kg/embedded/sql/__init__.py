"""Every SQL statement of the embedded store, grouped by table, as the Neo4j store keeps its Cypher
in ``kg/neo4j/*queries.py``: one module per group of tables, every name re-exported here, so a
store module runs ``sql.NAME`` whatever module of this package holds it.

- schema.py: the schema, the connection's pragmas and probes, the projection generations
- episodes.py: episodes, agents, session_links, feedback, canvases and canvas_audits
- world.py: world_nodes, world_edges, world_rules, scene_links, scenes, scene_reports, env_meta
- tenants.py: what spans a tenant's tables, its API keys, the audit of forgets (forget_log)
- idempotency.py: the first answers to writes sent with an idempotency key
- projection.py: the Cypher projection's loads of SQLite rows
- params.py: ``placeholders`` and ``chunks``

A statement is a constant when its text is fixed, or a small function when its text depends on the
call: the number of ``?`` of an ``IN (...)`` list (``placeholders``; ``chunks`` cuts a list to what
SQLite takes as parameters), the table of a statement shared by several tables (the table names
are the module's own, never input), or the optional filters of a listing. Parameters are always
bound with ``?``: no value is ever formatted into a statement.

Conventions the store relies on:
- ``data`` holds the record as JSON (``kg.codec``); the other columns are copies of the fields
  queries filter on.
- The world upserts write ``INSERT INTO <table>(tenant_id, env_name, id ...`` with no space before
  the parenthesis: ``kg/embedded/connection.py`` reads the written world rows off that text to
  refresh a Cypher projection row by row.

The LadybugDB statements that build and refresh the Cypher projection are that engine's Cypher, in
``kg/embedded/cypher/projection.py``, not here.
"""

from __future__ import annotations

from worldgraph.kg.embedded.sql.episodes import *  # noqa: F403
from worldgraph.kg.embedded.sql.idempotency import *  # noqa: F403
from worldgraph.kg.embedded.sql.params import *  # noqa: F403
from worldgraph.kg.embedded.sql.projection import *  # noqa: F403
from worldgraph.kg.embedded.sql.schema import *  # noqa: F403
from worldgraph.kg.embedded.sql.tenants import *  # noqa: F403
from worldgraph.kg.embedded.sql.world import *  # noqa: F403
