"""``cypher()`` on the embedded store: the Neo4j store's graph model, in LadybugDB, one tenant at a time.

Why LadybugDB (``ladybug`` on PyPI, the maintained fork of Kùzu; MIT): of the embedded Cypher
engines on PyPI it alone ran the README's queries and the contract suite's (parameters, OPTIONAL
MATCH, WITH, aggregation, var-length paths, UNION); ``grand-cypher`` parses only a small subset
(no aliases, parameters or OPTIONAL MATCH) and ``falkordblite`` needs Python >= 3.12 and starts a
Redis server. The measurements are in bench/README.md ("Cypher on the embedded store").

**Sealed by construction.** A query never runs on the SQLite file. It runs on a *projection*: a
LadybugDB database of its own built from the rows ``WHERE tenant_id = ?`` of the caller's tenant
only (saved beside the SQLite file and reopened while current, ``saved``; a small tenant's, or any
of a read-only store, in a private temporary folder of the store), with the Neo4j store's labels,
relationship types and property names (``worldgraph.kg.neo4j.schema``). Whatever the query says, no
other tenant's record is in the database it runs on. ``$tenant_id`` is still bound
(``cypher_guard.bind_params``), so a query written for Neo4j (``{tenant_id: $tenant_id}`` on every
node) runs unchanged.

**Sealed by the operating system.** The server never runs the query. A query child (``child``,
``pool``) does: a new interpreter, inheriting no file of the server, that confines itself while it
still has one thread (Landlock: it may open the caller's projection file alone, read-only, and no
TCP port; seccomp: no socket of any kind, no exec), opens the projection in the engine's
read-only mode and is killed at the deadline. Whatever the query says, it reads no other file,
writes nothing, reaches no network, and a crash ends that child only. The text checks
(``cypher_guard`` and ``text``: a token-level guard with allow-lists, one statement, no CALL of
table functions) refuse the plain cases first with clear messages; they are not the proof
(``docs/cypher.md``).

**Fresh.** A projection is tagged with the store's generations (``SqliteConnection.version``):
every transaction of any process that writes the tables of the episode part (``EPISODE_SOURCES``)
or the world part (``WORLD_SOURCES``) bumps that part's count in the same transaction. A query
whose tag differs first brings the projection up to date: when only the world part moved (a
delta), by updating the world rows that changed in place when their links stay, or else deleting
and creating them with the relationships touching them (``worldpart.update_world``; the rows are
known from this connection's upserts, or else found by comparing the tenant's world rows with
those the projection holds), or by reloading the world part when that change is large or adds an
environment. An episode-part change is applied row by row too (``episodes``: the episode part's
fingerprints compared with the tenant's rows, up to ``INCREMENTAL_MAX`` changes); past that, the
projection is built anew (a tenant of 20,000 episodes or more in a child process, ``build``,
whose memory goes with it). So it sees every committed write. A saved projection whose tag
matches the store's is reopened (~0.1 s at 100k episodes) instead of built.

**The world part alone.** A query that can reach only the world part's tables (``reach.world_only``:
read from its text, conservatively) is answered, for a tenant of ``WORLD_ONLY_MIN_EPISODES``
episodes or more (``opener``), from a projection of the world part alone (``scope`` "world": no
episode table, no FROM_EPISODE), built in a child process (100k episodes + a 10k-node world:
~1.4 s instead of ~3 s) and saved under its own name (``saved``: current while the world part's
generation matches).
The cache hands it only to such queries: the first query that needs more builds the full
projection (or reopens a saved one) and replaces it.

**Deadline.** ``cypher()`` returns or fails within ``cypher_timeout`` (+ the moment a kill takes),
counted from the call without the time a projection or a child took to be ready: the engine's
own timeout is set, and at the deadline the child is killed with SIGKILL (``pool``) and replaced.
A projection is written only while no child reads it (or a copy is written and swapped in), so
a refresh never waits for a query.

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
# its refresh; ``worldpart`` the world part's rows), ``episodes`` (the episode part's refresh),
# ``saved`` (projections kept on disk between opens), ``build`` (a build in a child process),
# ``cache`` (the projections kept), ``opener`` (which projection a query gets), ``text`` (the
# translation), ``reach`` (what a query reaches), ``guard`` and ``dialect`` (the text guard), ``confine`` (Landlock, seccomp),
# ``child`` (the query child), ``pool`` (the query children) and ``execution`` (a query run by a
# child within its deadline and caps). Nothing is imported here: the query child imports this
# package, and must load no more than it needs before it confines itself.
