"""``cypher()`` on the embedded store: the Neo4j store's graph model, in LadybugDB, one tenant at a time.

Why LadybugDB (``ladybug`` on PyPI, the maintained fork of Kùzu; MIT): of the embedded Cypher
engines on PyPI it alone ran the README's queries and the contract suite's (parameters, OPTIONAL
MATCH, WITH, aggregation, var-length paths, UNION); ``grand-cypher`` parses only a small subset
(no aliases, parameters or OPTIONAL MATCH) and ``falkordblite`` needs Python >= 3.12 and starts a
Redis server. The measurements are in bench/README.md ("Cypher on the embedded store").

**Sealed by construction.** A query never runs on the SQLite file. It runs on a *projection*: a
LadybugDB database of its own built from the rows ``WHERE tenant_id = ?`` of the caller's tenant
only (saved beside the SQLite file and reopened while current, ``saved``; in memory for a
read-only store), with the Neo4j store's labels, relationship types and property names
(``worldgraph.kg.neo4j.schema``). Whatever the query says, no other tenant's record is in the
database it runs on. ``$tenant_id`` is still bound (``cypher_guard.bind_params``), so a query
written for Neo4j (``{tenant_id: $tenant_id}`` on every node) runs unchanged.

**Read-only.** ``cypher_guard.check_text`` refuses writes, procedure calls and file clauses, and
``check_text`` (``text``) refuses LadybugDB's own statements that write, read files or Python objects,
or change settings (COPY, LOAD FROM, INSTALL, ATTACH, EXPORT, IMPORT, BEGIN / COMMIT, CHECKPOINT,
CALL). A write the checks missed would change only this tenant's projection (and its saved file),
never the store or another tenant; the next episode write rebuilds the projection (a world delta
rewrites only the rows it wrote, so such a change to other rows would stay until then).

**Fresh.** A projection is tagged with the store's generations (``SqliteConnection.version``):
every transaction of any process that writes the tables of the episode part (``EPISODE_SOURCES``)
or the world part (``WORLD_SOURCES``) bumps that part's count in the same transaction. A query
whose tag differs first brings the projection up to date: when only the world part moved (a
delta), by updating the world rows that changed in place when their links stay, or else deleting
and creating them with the relationships touching them (``Projection.update_world``; the rows are
known from this connection's upserts, or else found by comparing the tenant's world rows with
those the projection holds), or by reloading the world part when that change is large or adds an
environment. An episode-part change is applied row by row too (``episodes``: the episode part's
fingerprints compared with the tenant's rows, up to ``INCREMENTAL_MAX`` changes); past that, the
projection is built anew (a tenant of 20,000 episodes or more in a child process, ``build``,
whose memory goes with it). So it sees every committed write. A saved projection whose tag
matches the store's is reopened (~0.1 s at 100k episodes) instead of built.

**The world part alone.** A query that can reach only the world part's tables (``world_only``:
read from its text, conservatively) is answered, for a tenant of ``WORLD_ONLY_MIN_EPISODES``
episodes or more (``opener``), from a projection of the world part alone (``scope`` "world": no
episode table, no FROM_EPISODE), built in a child process (100k episodes + a 10k-node world:
~1.4 s instead of ~3 s) and saved under its own name (``saved``: current while the world part's
generation matches).
The cache hands it only to such queries: the first query that needs more builds the full
projection (or reopens a saved one) and replaces it.

**Deadline.** ``cypher()`` returns or fails within ``cypher_timeout`` + ``GRACE`` (1 s), counted
from when the tenant's projection is ready, whatever the query. LadybugDB's own timeout (set too)
and ``Connection.interrupt()`` are checked only between steps of its pipeline: one expression (a
``list_transform`` over a long list; one building a huge string or list, which ``text`` refuses
before it runs because it also holds gigabytes meanwhile) and its parser on deeply nested brackets
(64 levels ~1 s, 300 levels ~56 s here, the first time) run to their end, seconds to minutes. So
``run`` executes the query in a worker thread and waits until the deadline; then it interrupts the
engine every 50 ms for up to ``GRACE`` s; a query still running then is *abandoned*: its projection
is marked closed (nobody else queues on its busy connection, the cache drops it, the next query of
the tenant builds a fresh one) and the call raises ``CypherQueryError`` naming
``cypher_timeout_seconds``. When the engine returns, the worker drops what it made and closes that
projection's database, freeing its memory. At most ``MAX_ABANDONED_PER_TENANT`` (2) abandoned runs
per tenant and ``MAX_ABANDONED`` (4) per process may be alive (each holds a core and its
allocation); past either, a new query fails at once instead of starting, so a flood of hostile
queries cannot pile up threads or memory. A projection is never waited for under the cache's lock:
closing one a query still runs on is left to that query's thread, and a world refresh that finds a
query running builds a new projection instead.

**Same rows as Neo4j, or a clear error.** The few places where LadybugDB's Cypher differs from
Neo4j's are rewritten (multi-label patterns, ``labels()``, ``type()``, ``toString()`` ...,
relationship uniqueness within a MATCH, trail semantics of var-length paths, column names of
unaliased RETURN items, a RETURN alias ORDER BY names while a variable has its name), or
refused with ``CypherQueryError`` naming the feature (list indexing, which is 1-based in
LadybugDB, named var-length relationships, ``shortestPath``); anything else
LadybugDB cannot run fails with its own message. Differences that remain: the ``merges`` counter
and ``import_incomplete`` flag of (:Environment) (Neo4j-store bookkeeping) are not projected, and
an unbounded ``*`` stops at 30 hops.
"""


# The package's modules, along the seams of the above: ``model`` (labels, relationship types and
# columns), ``load`` (a tenant's rows read into columns), ``projection`` (the LadybugDB database and
# its refresh), ``episodes`` (the episode part's refresh), ``saved`` (projections kept on disk
# between opens), ``build`` (a build in a child
# process), ``cache`` (the projections kept open), ``text`` (what is refused, the translation) and
# ``execution`` (a query run within its deadline and caps).
from worldgraph.kg.embedded.cypher.cache import PROJECTIONS_KEPT, ProjectionCache
from worldgraph.kg.embedded.cypher.episodes import update_episodes
from worldgraph.kg.embedded.cypher.execution import (
    GRACE,
    MAX_ABANDONED,
    MAX_ABANDONED_PER_TENANT,
    abandoned_runs,
    check_abandoned,
    plain,
    run,
)
from worldgraph.kg.embedded.cypher.load import (
    WorldPart,
    WorldRows,
    load_episode_part,
    load_tenant,
    load_world_part,
    read_world_keys,
    read_world_rows,
)
from worldgraph.kg.embedded.cypher.model import (
    ENGINE,
    EPISODE_SOURCES,
    LABELS,
    NODE_TABLES,
    REL_TABLES,
    WORLD_SOURCES,
)
from worldgraph.kg.embedded.cypher.projection import REFRESH_WAIT, Projection, ProjectionBusy, ProjectionClosed
from worldgraph.kg.embedded.cypher.text import MAX_QUERY_CHARS, MAX_RANGE, check_text, translate, world_only

__all__ = [
    "ENGINE", "EPISODE_SOURCES", "GRACE", "LABELS", "MAX_ABANDONED", "MAX_ABANDONED_PER_TENANT", "MAX_QUERY_CHARS",
    "MAX_RANGE", "NODE_TABLES", "PROJECTIONS_KEPT", "REFRESH_WAIT", "REL_TABLES", "WORLD_SOURCES", "Projection",
    "ProjectionBusy", "ProjectionCache", "ProjectionClosed", "WorldPart", "WorldRows", "abandoned_runs",
    "check_abandoned", "check_text", "load_episode_part", "load_tenant", "load_world_part", "plain", "read_world_keys",
    "read_world_rows", "run", "translate", "update_episodes", "world_only",
]
