"""The Neo4j graph store: the same records as the embedded store, in a real graph.

Every Cypher statement lives in ``worldgraph.kg.neo4j_queries`` (with the graph model). Each
public write is ONE managed transaction (``session.execute_write``: the driver retries
transient errors such as deadlocks), made of batched ``UNWIND $rows ... MERGE`` statements
over rows deduplicated by id; reads use ``execute_read``. Records are stored as JSON strings
beside their queryable properties and decoded on the way out, so both stores return equal
dicts and export identical bytes.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Iterator, TypeVar, cast

from neo4j import Driver, GraphDatabase, ManagedTransaction, Result, unit_of_work
from neo4j.exceptions import AuthError, DriverError, Neo4jError, ServiceUnavailable, SessionExpired

from worldgraph.errors import (CypherQueryError, InvalidInputError, NotFoundError, ReadOnlyError, ReadOnlyQueryError,
                               StoreUnavailableError)
from worldgraph.kg import cypher_guard as guard
from worldgraph.kg import neo4j_queries as q
from worldgraph.kg.neo4j_leases import Neo4jSceneLeases, check_fence
from worldgraph.kg.records import EdgeRecord, GraphView, MergePlan, MetaRecord, NodeRecord, RuleRecord, SceneRecord
from worldgraph.kg.sessions import Link, by_session, new_links, relink
from worldgraph.kg.store import GraphStore, Record

T = TypeVar("T")
BATCH = 5000  # rows per UNWIND statement; one public call still writes in one transaction


class Neo4jGraphStore(Neo4jSceneLeases, GraphStore):
    """GraphStore on a Neo4j 5 server (Community is enough). Thread-safe: the driver pools."""

    name = "neo4j"

    def __init__(self, uri: str, user: str, password: str, database: str = "neo4j",
                 connection_timeout: float = 5.0, read_only: bool = False, cypher_timeout: float = 30.0,
                 cypher_max_rows: int = 10_000) -> None:
        self.uri = uri
        self.database = database
        self.read_only = read_only
        self.cypher_timeout, self.cypher_max_rows = cypher_timeout, cypher_max_rows
        driver: Driver | None = None
        try:
            driver = GraphDatabase.driver(
                uri, auth=(user, password), connection_timeout=connection_timeout,
                max_transaction_retry_time=30.0,
                # the server's hints ("label does not exist yet", ...) are noise for a library
                notifications_min_severity="OFF")
            driver.verify_connectivity()
            # one round trip in the database itself: a name the server does not have fails here,
            # with a message naming the setting, not in the first real query (a routing URI,
            # neo4j://, fetches that database's routing table for it)
            with driver.session(database=database) as session:
                session.run("RETURN 1").consume()
        except AuthError as exc:
            _close(driver)
            raise StoreUnavailableError(
                f"Neo4j at {uri} refused the credentials of user {user!r}: {exc}. "
                "Set NEO4J_USER / NEO4J_PASSWORD (or WORLDGRAPH_NEO4J_USER / WORLDGRAPH_NEO4J_PASSWORD)."
            ) from exc
        except (DriverError, Neo4jError, OSError, ValueError) as exc:
            _close(driver)
            if isinstance(exc, Neo4jError) and exc.code == "Neo.ClientError.Database.DatabaseNotFound":
                raise InvalidInputError("neo4j_database", _no_database(uri, database), database) from exc
            raise StoreUnavailableError(_unreachable(uri, exc)) from exc
        self._driver: Driver = driver
        self._sessions_ready = False  # q.SESSION_SCHEMA ensured (on the first session write)
        if read_only:
            return  # no constraints, indexes or migrations: reads need none of them to be correct
        try:
            self._ensure_schema()
        except BaseException:
            driver.close()
            raise

    # ---------------------------------------------------------------- plumbing
    def _write(self, work: Callable[..., T], *args: Any) -> T:
        if self.read_only:
            raise ReadOnlyError("writing to the graph store", "the Neo4j store was opened read-only")
        try:
            with self._driver.session(database=self.database) as session:
                return session.execute_write(work, *args)
        except (ServiceUnavailable, SessionExpired) as exc:
            raise StoreUnavailableError(_unreachable(self.uri, exc)) from exc

    def _read(self, work: Callable[..., T], *args: Any) -> T:
        try:
            with self._driver.session(database=self.database) as session:
                return session.execute_read(work, *args)
        except (ServiceUnavailable, SessionExpired) as exc:
            raise StoreUnavailableError(_unreachable(self.uri, exc)) from exc

    def _records(self, query: str, **params: Any) -> list[Record]:
        """Run one read query whose rows have a ``record`` column; decode them."""
        def work(tx: ManagedTransaction) -> list[Record]:
            return [json.loads(r["record"]) for r in tx.run(query, params) if r["record"] is not None]
        return self._read(work)

    def _episodes(self, query: str, **params: Any) -> list[Record]:
        """Run one read query returning q.EPISODE_COLUMNS; the episode records, state put back."""
        return self._read(lambda tx: [_episode(r) for r in tx.run(query, params)])

    def _ensure_schema(self) -> None:
        """Constraints first (MERGE seeks their indexes), then indexes, then the version node.
        Schema commands cannot share a transaction with data writes, so each runs on its own."""
        try:
            with self._driver.session(database=self.database) as session:
                current = session.execute_read(lambda tx: tx.run(q.SCHEMA_VERSION_READ).single())
                if current is not None and current["version"] == q.SCHEMA_VERSION:
                    return
                for stmt in (*q.CONSTRAINTS, *q.MIGRATIONS, *q.INDEXES):
                    try:
                        session.run(stmt).consume()
                    except Neo4jError as exc:  # another process created (or dropped) the same rule meanwhile
                        if "AlreadyExists" not in (exc.code or "") and "NotFound" not in (exc.code or ""):
                            raise
                session.run(q.AWAIT_INDEXES, seconds=120).consume()
                session.execute_write(_copy_index_errors)
                session.execute_write(lambda tx: tx.run(q.SCHEMA_VERSION_WRITE, version=q.SCHEMA_VERSION).consume())
        except (ServiceUnavailable, SessionExpired) as exc:
            raise StoreUnavailableError(_unreachable(self.uri, exc)) from exc

    # ---------------------------------------------------------------- episodes
    def add_episodes(self, tenant_id: str, episodes: list[Record], canvases: list[Record], audits: list[Record]) -> None:
        if not self._sessions_ready and any(e.get("session_id") for e in episodes):
            self._ensure_session_schema()
        agents = {e["agent_id"]: {"id": e["agent_id"], "tenant_id": tenant_id, "agent_role": e.get("agent_role", "")}
                  for e in episodes}
        agent_rows = [{"id": a["id"], "agent_role": a["agent_role"], "record": _dumps(a)} for a in agents.values()]
        canvas_rows = [{"id": c["id"], "name": c.get("name"), "record": _dumps(c)} for c in _dedupe(canvases)]
        episode_rows = [{**_row({k: v for k, v in e.items() if k not in q.EPISODE_STATE}, q.EPISODE_PROPS,
                                index_status=e.get("index_status", "pending"), index_error=e.get("index_error")),
                         "agent": e.get("agent_id"), "canvas": e.get("canvas_id")} for e in _dedupe(episodes)]
        audit_rows = [{**_row(a, q.AUDIT_PROPS), "episode": a.get("episode_id")} for a in _dedupe(audits)]

        def work(tx: ManagedTransaction) -> None:
            _run_batched(tx, q.UPSERT_AGENTS, agent_rows, tenant_id=tenant_id)
            _run_batched(tx, q.UPSERT_CANVASES, canvas_rows, tenant_id=tenant_id)
            _run_batched(tx, q.UPSERT_EPISODES, episode_rows, tenant_id=tenant_id)
            _run_batched(tx, q.UPSERT_AUDITS, audit_rows, tenant_id=tenant_id)
            for session_id, eps in by_session(_dedupe(episodes)).items():
                _link_session(tx, tenant_id, session_id, eps)
        self._write(work)

    def _ensure_session_schema(self) -> None:
        """The Session key and the episodes' session index (q.SESSION_SCHEMA), once per store
        object; schema commands cannot share the write's transaction, so they run before it."""
        try:
            with self._driver.session(database=self.database) as session:
                for stmt in q.SESSION_SCHEMA:
                    try:
                        session.run(stmt).consume()
                    except Neo4jError as exc:  # another process created it meanwhile
                        if "AlreadyExists" not in (exc.code or ""):
                            raise
                session.run(q.AWAIT_INDEXES, seconds=120).consume()
        except (ServiceUnavailable, SessionExpired) as exc:
            raise StoreUnavailableError(_unreachable(self.uri, exc)) from exc
        self._sessions_ready = True

    def session_neighbors(self, tenant_id: str, episode_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
        rows = self._read(lambda tx: list(tx.run(q.SESSION_NEIGHBORS, tenant_id=tenant_id,
                                                 ids=list(dict.fromkeys(episode_ids)))))
        return {r["id"]: (r["prev"], r["next"]) for r in rows}

    def session_episode_before(self, tenant_id: str, session_id: str, ts: float) -> Record | None:
        recs = self._episodes(q.SESSION_EPISODE_BEFORE, tenant_id=tenant_id, session_id=session_id, ts=float(ts))
        return recs[0] if recs else None

    def get_episodes(self, tenant_id: str, episode_ids: list[str]) -> dict[str, Record]:
        recs = self._episodes(q.GET_EPISODES, tenant_id=tenant_id, ids=list(dict.fromkeys(episode_ids)))
        return {r["id"]: r for r in recs}

    def episode_ids_with_prefix(self, tenant_id: str, prefix: str, limit: int = 10) -> list[str]:
        return self._read(lambda tx: [r["id"] for r in tx.run(q.EPISODE_IDS_WITH_PREFIX, tenant_id=tenant_id,
                                                                prefix=prefix, limit=int(limit))])

    def agent_episodes(self, tenant_id: str, agent_id: str, limit: int) -> list[Record]:
        return self._episodes(q.AGENT_EPISODES, tenant_id=tenant_id, agent_id=agent_id, limit=int(limit))

    def iter_episodes(self, tenant_id: str | None = None, batch_size: int = 1000) -> Iterator[list[Record]]:
        """Pages of episodes in (tenant_id, id) order, one tenant at a time: each page is one seek on
        the (tenant_id, id) index, which also gives the order, so a page costs its size whatever
        the number of episodes (a cross-tenant cursor scanned every episode for every page)."""
        for tenant in [tenant_id] if tenant_id is not None else self.tenants():
            after_id = ""
            while True:
                rows = self._read(lambda tx, t=tenant, a=after_id: list(
                    tx.run(q.ITER_EPISODES, tenant_id=t, after_id=a, limit=int(batch_size))))
                if rows:
                    yield [_episode(r) for r in rows]
                if len(rows) < batch_size:
                    break
                after_id = rows[-1]["id"]

    def set_index_status(self, tenant_id: str, episode_ids: list[str], status: str, error: str | None = None) -> None:
        # Only the two properties change (see q.EPISODE_STATE): no record is read or rewritten.
        ids = list(dict.fromkeys(episode_ids))

        def work(tx: ManagedTransaction) -> None:
            for chunk in _chunks(ids, BATCH):
                tx.run(q.SET_INDEX_STATUS, tenant_id=tenant_id, ids=chunk, status=status, error=error).consume()
        self._write(work)

    def unindexed_episodes(self, limit: int = 1000) -> list[Record]:
        return self._episodes(q.UNINDEXED_EPISODES, limit=int(limit))

    def tenants(self) -> list[str]:
        rows = self._read(lambda tx: [r["tenant_id"] for r in tx.run(q.TENANTS)])
        return sorted(t for t in rows if t is not None)

    def stats(self, tenant_id: str) -> dict[str, int]:
        row = self._read(lambda tx: tx.run(q.STATS, tenant_id=tenant_id, prefix=q.tenant_prefix(tenant_id)).single())
        assert row is not None
        return {k: int(row[k]) for k in ("episodes", "agents", "feedback", "canvases", "canvas_audits",
                                         "scenes", "nodes", "edges", "rules")}

    # ---------------------------------------------------------------- feedback
    def add_feedback(self, tenant_id: str, feedback: Record) -> None:
        props = {"episode_id": feedback["episode_id"], "category": feedback.get("feedback_category"),
                 "score": feedback["feedback_score"], "created_at": feedback["created_at"]}

        def work(tx: ManagedTransaction) -> int:
            row = tx.run(q.ADD_FEEDBACK, tenant_id=tenant_id, episode_id=feedback["episode_id"],
                         id=feedback["id"], props=props, record=_dumps(feedback)).single()
            return int(row["written"]) if row else 0
        if not self._write(work):
            raise NotFoundError("episode", feedback["episode_id"], f"tenant {tenant_id!r} holds no such episode")

    def feedback_for(self, tenant_id: str, episode_id: str) -> list[Record]:
        return self._records(q.FEEDBACK_FOR, tenant_id=tenant_id, episode_id=episode_id)

    def feedback_stats(self, tenant_id: str, episode_ids: list[str],
                       category: str | None = None) -> dict[str, tuple[float, int]]:
        def work(tx: ManagedTransaction) -> dict[str, tuple[float, int]]:
            rows = tx.run(q.FEEDBACK_STATS, tenant_id=tenant_id, ids=list(dict.fromkeys(episode_ids)),
                          category=category)
            return {r["episode_id"]: (float(r["mean"]), int(r["n"])) for r in rows}
        return self._read(work)

    def episodes_with_feedback(self, tenant_id: str, episode_ids: list[str],
                               category: str | None = None) -> tuple[dict[str, Record], dict[str, tuple[float, int]]]:
        def work(tx: ManagedTransaction) -> tuple[dict[str, Record], dict[str, tuple[float, int]]]:
            episodes: dict[str, Record] = {}
            stats: dict[str, tuple[float, int]] = {}
            for row in tx.run(q.EPISODES_WITH_FEEDBACK, tenant_id=tenant_id, ids=list(dict.fromkeys(episode_ids)),
                              category=category):
                rec = _episode(row)
                episodes[rec["id"]] = rec
                if row["n"]:
                    stats[rec["id"]] = (float(row["mean"]), int(row["n"]))
            return episodes, stats
        return self._read(work)

    # ---------------------------------------------------------------- canvases
    def get_canvas(self, tenant_id: str, canvas_id: str) -> Record | None:
        recs = self._records(q.GET_CANVAS, tenant_id=tenant_id, id=canvas_id)
        return recs[0] if recs else None

    def canvas_audits(self, tenant_id: str, episode_id: str) -> list[Record]:
        return self._records(q.CANVAS_AUDITS, tenant_id=tenant_id, episode_id=episode_id)

    # ---------------------------------------------------------------- world graph
    def load_view(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str] = ()) -> GraphView:  # type: ignore[assignment]
        return self._read(lambda tx: _view(tx, tenant_id, env_name, node_ids, names))

    def merge(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str],
              planner: Callable[[GraphView], MergePlan | None],
              fence: tuple[str, str] | None = None) -> MetaRecord | None:
        def work(tx: ManagedTransaction) -> MetaRecord | None:
            tx.run(q.LOCK_ENV, tenant_id=tenant_id, env_name=env_name).consume()
            check_fence(tx, tenant_id, fence)
            view = _view(tx, tenant_id, env_name, node_ids, names)
            plan = planner(view)
            return view.meta if plan is None else self._apply_plan(tx, plan, view.meta)
        return self._write(work)

    def get_scene_report(self, tenant_id: str, scene_id: str) -> dict[str, Any] | None:
        recs = self._records(q.GET_SCENE_REPORT, tenant_id=tenant_id, id=scene_id)
        return recs[0] if recs else None

    def apply_plan(self, plan: MergePlan) -> MetaRecord:
        def work(tx: ManagedTransaction) -> MetaRecord | None:
            old = _decode(tx.run(q.GET_META, tenant_id=plan.tenant_id, env_name=plan.env_name))
            return self._apply_plan(tx, plan, cast(MetaRecord, old[0]) if old else None)
        return self._write(work)  # type: ignore[return-value]

    def _apply_plan(self, tx: ManagedTransaction, plan: MergePlan, old_meta: MetaRecord | None) -> MetaRecord | None:
        t, env = plan.tenant_id, plan.env_name
        scenes = [plan.scene] if plan.scene is not None else []
        if plan.meta is None and plan.size() == 0:  # nothing merged: only the scene's status moves
            _upsert_scenes(tx, t, scenes)
            meta: MetaRecord | None = old_meta
        else:
            # records go to the store as plain JSON dicts
            self._write_world(tx, t, env, scenes, cast(list[Record], plan.nodes),
                              cast(list[Record], plan.rules), cast(list[Record], plan.edges))
            meta = dict(plan.meta or {})  # type: ignore[assignment]
            meta.update({"tenant_id": t, "env_name": env})  # type: ignore[union-attr]
            counts = tx.run(q.ENV_COUNTS, tenant_id=t, env_name=env, prefix=q.env_prefix(t, env)).single()
            assert counts is not None
            meta["counts"] = {k: int(counts[k]) for k in ("nodes", "edges", "rules", "scenes")}  # type: ignore[index]
            _set_meta(tx, t, env, meta)  # type: ignore[arg-type]
        if plan.scene is not None and plan.report is not None:
            tx.run(q.SET_SCENE_REPORT, tenant_id=t, id=plan.scene["id"], report=_dumps(plan.report)).consume()
        return meta

    @staticmethod
    def _write_world(tx: ManagedTransaction, t: str, env: str, scenes: list[SceneRecord],
                     nodes: Iterable[Record], rules: Iterable[Record], edges: Iterable[Record]) -> None:
        """Upsert scenes, nodes, rules, edges and the scene links, in this order (ends first)."""
        params = {"tenant_id": t, "env_name": env}
        _upsert_scenes(tx, t, scenes)
        node_list, rule_list, edge_list = _dedupe(nodes), _dedupe(rules), _dedupe(edges)
        prefix = q.env_prefix(t, env)
        esc = q._esc

        def key(id: Any) -> str | None:  # the world key of a record of this env (None stays None)
            return None if id is None else prefix + esc(id)
        for kind in q.NODE_LABELS:
            rows = [{**_row(n, q.NODE_PROPS), "key": key(n["id"])}
                    for n in node_list if n.get("kind", "entity") == kind]
            _run_batched(tx, q.upsert_nodes(kind), rows, **params)
        unknown = [n["id"] for n in node_list if n.get("kind", "entity") not in q.NODE_LABELS]
        if unknown:
            raise InvalidInputError("nodes[].kind", f"must be one of {sorted(q.NODE_LABELS)}; nodes {unknown[:5]}")
        rule_rows = [{**_row(r, q.RULE_PROPS), "key": key(r["id"]),
                      "linked": [key(i) for i in dict.fromkeys(r.get("linked_node_ids") or [])]} for r in rule_list]
        _run_batched(tx, q.UPSERT_RULES, rule_rows, **params)
        bad = [e["id"] for e in edge_list if e.get("relation") not in q.EDGE_TYPES]
        if bad:
            raise InvalidInputError("edges[].relation", f"must be one of {list(q.EDGE_TYPES)}; edges {bad[:5]}")
        sent: list[tuple[str, list[dict[str, Any]], list[Result]]] = []
        for relation in q.EDGE_TYPES:
            rows = [{**_row(e, q.EDGE_PROPS), "key": key(e["id"]), "src": key(e.get("src_id")),
                     "dst": key(e.get("dst_id")), "src_id": e.get("src_id"), "dst_id": e.get("dst_id")}
                    for e in edge_list if e.get("relation") == relation]
            sent.append((relation, rows, _run_batched(tx, q.upsert_edges(relation), rows, **params)))
        _run_batched(tx, q.LINK_SCENE_NODES, _scene_links(node_list, key), **params)
        _run_batched(tx, q.LINK_SCENE_RULES, _scene_links(rule_list, key), **params)
        missing: list[str] = []
        for relation, rows, results in sent:
            if sum(_column(results, "written")) < len(rows):  # rare: find which, then roll back
                missing += _column(_run_batched(tx, q.edges_missing_ends(relation), rows, **params), "id")
        if missing:
            raise InvalidInputError(
                "edges[].src_id/dst_id",
                f"every edge must join existing nodes (or a scene) of env {env!r}; these do not: {missing[:5]}")

    def upsert_scene(self, scene: SceneRecord) -> None:
        self._write(lambda tx: _upsert_scenes(tx, scene["tenant_id"], [scene]))

    def get_scene(self, tenant_id: str, scene_id: str) -> SceneRecord | None:
        recs = self._records(q.GET_SCENE, tenant_id=tenant_id, id=scene_id)
        return cast(SceneRecord, recs[0]) if recs else None

    def claim_scene(self, tenant_id: str, scene_id: str) -> bool:
        def work(tx: ManagedTransaction) -> bool:
            row = tx.run(q.LOCK_SCENE, tenant_id=tenant_id, id=scene_id).single()
            if row is None:
                return False
            if row["status"] not in ("pending", "failed"):
                tx.run(q.UNLOCK_SCENE, tenant_id=tenant_id, id=scene_id).consume()
                return False
            scene = json.loads(row["record"])
            scene["status"] = "running"
            tx.run(q.CLAIM_SCENE, tenant_id=tenant_id, id=scene_id, record=_dumps(scene)).consume()
            return True
        return self._write(work)

    def list_scenes(self, tenant_id: str | None = None, env_name: str | None = None,
                    statuses: list[str] | None = None) -> list[SceneRecord]:
        recs = self._records(q.LIST_SCENES, tenant_id=tenant_id, env_name=env_name, statuses=statuses or None)
        return cast(list[SceneRecord], recs)

    def environments(self, tenant_id: str) -> list[str]:
        return sorted(self._read(lambda tx: [r["env_name"] for r in tx.run(q.ENVIRONMENTS, tenant_id=tenant_id)]))

    def world_graph(self, tenant_id: str, env_name: str) -> dict[str, Any]:
        params = {"tenant_id": tenant_id, "env_name": env_name, "prefix": q.env_prefix(tenant_id, env_name)}

        def work(tx: ManagedTransaction) -> dict[str, Any]:
            out: dict[str, Any] = {key: _by_id(_decode(tx.run(query, params))) for key, query in (
                ("nodes", q.ENV_NODES), ("edges", q.ENV_EDGES), ("rules", q.ENV_RULES), ("scenes", q.ENV_SCENES))}
            meta = _decode(tx.run(q.GET_META, params))
            out["meta"] = meta[0] if meta else None
            return out
        return self._read(work)

    def replace_world(self, tenant_id: str, env_name: str, graph: dict[str, Any]) -> None:
        def work(tx: ManagedTransaction) -> None:
            tx.run(q.DELETE_ENV, tenant_id=tenant_id, env_name=env_name,
                   prefix=q.env_prefix(tenant_id, env_name)).consume()
            self._write_world(tx, tenant_id, env_name, list(graph.get("scenes", [])), graph.get("nodes", []),
                              graph.get("rules", []), graph.get("edges", []))
            if graph.get("meta") is not None:
                _set_meta(tx, tenant_id, env_name, graph["meta"])
        self._write(work)

    # ---------------------------------------------------------------- exploration
    def neighborhood(self, tenant_id: str, episode_ids: list[str]) -> dict[str, Record]:
        def work(tx: ManagedTransaction) -> dict[str, Record]:
            out: dict[str, Record] = {}
            for r in tx.run(q.NEIGHBORHOOD, tenant_id=tenant_id, ids=list(dict.fromkeys(episode_ids))):
                out[r["id"]] = {
                    "canvas": json.loads(r["canvas"]) if r["canvas"] is not None else None,
                    "canvas_actions": [json.loads(x) for x in r["canvas_actions"]],
                    "feedback": [json.loads(x) for x in r["feedback"]],
                    "scenes": [json.loads(x) for x in r["scenes"]],
                    "nodes": _by_id([json.loads(x) for x in r["nodes"]]),
                    "rules": _by_id([json.loads(x) for x in r["rules"]]),
                }
            return out
        found = self._read(work)
        return {eid: found[eid] for eid in episode_ids if eid in found}

    def cypher(self, tenant_id: str, query: str, params: dict[str, Any] | None = None) -> list[Record]:
        """Run a read-only query that provably stays in the caller's tenant (``cypher_guard``): its
        EXPLAIN plan is checked, then it runs, in one READ transaction with a timeout."""
        params = guard.bind_params(tenant_id, params)
        guard.check_text(query)
        limit = self.cypher_max_rows

        @unit_of_work(timeout=self.cypher_timeout)
        def work(tx: ManagedTransaction) -> list[Record]:
            summary = tx.run(cast(Any, "EXPLAIN " + query), params).consume()
            guard.check_plan(summary.plan, self.database, summary.query_type)
            rows: list[Record] = []
            for rec in tx.run(cast(Any, query), params):
                if len(rows) == limit:
                    raise InvalidInputError("query", f"returns more than {limit} rows (cypher_max_rows); add LIMIT "
                                                     "or aggregate")
                rows.append({k: guard.plain(v, tenant_id) for k, v in rec.items()})
            return rows
        try:
            return self._read(work)
        except Neo4jError as exc:
            code = exc.code or ""
            if "TransactionTimedOut" in code:
                raise CypherQueryError(f"the query ran longer than {self.cypher_timeout} s (cypher_timeout_seconds); "
                                       "narrow it or add LIMIT") from exc
            if "AccessMode" in code or ".Security." in code:  # the READ transaction refused a write
                raise ReadOnlyQueryError(f"Neo4j refused the query: {exc.message or exc}") from exc
            raise CypherQueryError(f"Neo4j could not run the query: {exc.message or exc}") from exc

    # ---------------------------------------------------------------- API keys
    def add_api_key(self, key: Record) -> None:
        try:
            with self._driver.session(database=self.database) as session:
                session.run(q.API_KEY_CONSTRAINT).consume()
        except (ServiceUnavailable, SessionExpired) as exc:
            raise StoreUnavailableError(_unreachable(self.uri, exc)) from exc
        params = {k: key.get(k) for k in ("id", "tenant_id", "name", "key_hash", "created_at", "revoked_at")}
        self._write(lambda tx: tx.run(q.CREATE_API_KEY, params).consume())

    def get_api_key(self, key_id: str) -> Record | None:
        rows = self._read(lambda tx: [_api_key(r) for r in tx.run(q.GET_API_KEY, id=key_id)])
        return rows[0] if rows else None

    def list_api_keys(self, tenant_id: str | None = None) -> list[Record]:
        return self._read(lambda tx: [_api_key(r) for r in tx.run(q.LIST_API_KEYS, tenant_id=tenant_id)])

    def revoke_api_key(self, key_id: str, revoked_at: str) -> Record:
        rows = self._write(lambda tx: [_api_key(r) for r in tx.run(q.REVOKE_API_KEY, id=key_id, revoked_at=revoked_at)])
        if not rows:
            raise NotFoundError("api key", key_id, "`worldgraph keys list` shows the key ids")
        return rows[0]

    def close(self) -> None:
        self._driver.close()


# -------------------------------------------------------------------- helpers
def _unreachable(uri: str, exc: BaseException) -> str:
    return (f"cannot reach Neo4j at {uri} ({type(exc).__name__}: {exc}). Start a server with "
            "`worldgraph neo4j start` (no Docker needed), or `docker compose up -d neo4j`, or point "
            "NEO4J_URI (and NEO4J_USER / NEO4J_PASSWORD) at a running one.")


def _no_database(uri: str, database: str) -> str:
    return (f"Neo4j at {uri} has no database {database!r}. Set NEO4J_DATABASE (or WORLDGRAPH_NEO4J_DATABASE, "
            "config neo4j_database) to one it has (`SHOW DATABASES` lists them); Neo4j Community Edition has "
            "one user database, 'neo4j' (the default)")


def _close(driver: Driver | None) -> None:
    if driver is not None:
        driver.close()


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _dedupe(records: Iterable[Record]) -> list[Record]:
    """One row per id (the last one wins, as successive upserts would), first-seen order."""
    out: dict[str, Record] = {}
    for rec in records:
        out[rec["id"]] = rec
    return list(out.values())


def _row(rec: Record, keys: tuple[str, ...], **props: Any) -> dict[str, Any]:
    """An UNWIND row: id, the scalar properties queries use (``props`` override), the record as JSON."""
    scalars = {k: v for k in keys if _is_property(v := rec.get(k))}
    return {"id": rec["id"], "props": {**scalars, **props}, "record": _dumps(rec)}


def _is_property(value: Any) -> bool:
    """None, a scalar or a list of strings: what Neo4j can hold as a property."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _run_batched(tx: ManagedTransaction, query: str, rows: list[dict[str, Any]], **params: Any) -> list[Result]:
    """Send ``rows`` as $rows in chunks of BATCH, without waiting for them to run.

    The server executes a statement while Python builds and packs the next one's rows (two
    processes, two cores); it runs a transaction's statements in order, and the driver reads every
    pending result before the commit, so an error still aborts the whole transaction. Reading a
    column of the returned results (``_column``) waits for them."""
    return [tx.run(query, {**params, "rows": chunk}) for chunk in _chunks(rows, BATCH)]


def _column(results: list[Result], column: str) -> list[Any]:
    return [r[column] for result in results for r in result]


def _upsert_scenes(tx: ManagedTransaction, tenant_id: str, scenes: list[SceneRecord]) -> None:
    rows = [{**_row(s, q.SCENE_PROPS), "env": s.get("env_name"), "episode": s.get("episode_id")}
            for s in _dedupe(cast(list[Record], scenes))]
    _run_batched(tx, q.UPSERT_SCENES, rows, tenant_id=tenant_id)


def _scene_links(records: list[Record], key: Callable[[Any], Any]) -> list[dict[str, Any]]:
    """One row per scene: its id and the keys of the records that name it in source_scenes,
    in chunks of BATCH keys (so one scene is looked up once per chunk, not once per record)."""
    by_scene: dict[str, list[Any]] = {}
    for rec in records:
        for s in dict.fromkeys(rec.get("source_scenes") or []):
            by_scene.setdefault(s, []).append(key(rec["id"]))
    return [{"scene_id": s, "keys": chunk} for s, keys in by_scene.items() for chunk in _chunks(keys, BATCH)]


def _set_meta(tx: ManagedTransaction, tenant_id: str, env_name: str, meta: MetaRecord) -> None:
    tx.run(q.SET_META, tenant_id=tenant_id, env_name=env_name, record=_dumps(meta),
           graph_version=meta.get("graph_version"), updated_at=meta.get("updated_at")).consume()


def _link_session(tx: ManagedTransaction, tenant_id: str, session_id: str, episodes: list[Record]) -> None:
    """Link a batch of one session's new episodes (already written in ``tx``) into its time order."""
    row = tx.run(q.SESSION_CLAIM, tenant_id=tenant_id, session_id=session_id, n=len(episodes)).single()
    assert row is not None
    new = new_links(episodes, int(row["last_seq"]))
    first = min(new)
    params = {"tenant_id": tenant_id, "session_id": session_id, "ts": first.ts, "seq": first.seq}
    before = tx.run(q.SESSION_BEFORE, params).single()
    after = [Link(float(r["ts"]), int(r["seq"]), r["id"]) for r in tx.run(q.SESSION_AFTER, params)]
    seqs = {link.id: link.seq for link in new}
    rows = [{"id": eid, "seq": seqs.get(eid), "next": nxt}
            for eid, nxt in relink(Link(float(before["ts"]), int(before["seq"]), before["id"]) if before else None,
                                   after, new)]
    _run_batched(tx, q.SESSION_LINK, rows, tenant_id=tenant_id)


def _copy_index_errors(tx: ManagedTransaction) -> None:
    """Schema 3: give episodes written before it their index_error property (it was in the JSON)."""
    rows = []
    for r in tx.run(q.EPISODES_WITHOUT_ERROR_PROPERTY):
        error = json.loads(r["record"]).get("index_error")
        if error is not None:
            rows.append({"tenant_id": r["tenant_id"], "id": r["id"], "error": error})
    _run_batched(tx, q.SET_INDEX_ERRORS, rows)


def _api_key(row: Any) -> Record:
    """Neo4j drops null properties: every field of a key record is put back."""
    props = dict(row["key"])
    return {k: props.get(k) for k in ("id", "tenant_id", "name", "key_hash", "created_at", "revoked_at")}


def _episode(row: Any) -> Record:
    """An episode record from its ``record`` JSON and its indexing state (q.EPISODE_COLUMNS)."""
    rec: Record = json.loads(row["record"])
    rec["index_status"], rec["index_error"] = row["index_status"], row["index_error"]
    return rec


def _view(tx: ManagedTransaction, tenant_id: str, env_name: str, node_ids: list[str], names: Any) -> GraphView:
    """``load_view`` inside a transaction (the merge's write transaction, or a read)."""
    ids = list(dict.fromkeys(node_ids))
    if names:
        found = tx.run(q.VIEW_IDS_BY_NAME, tenant_id=tenant_id, env_name=env_name, names=list(dict.fromkeys(names)))
        ids = list(dict.fromkeys([*ids, *(r["id"] for r in found)]))
    params = {"tenant_id": tenant_id, "env_name": env_name, "ids": ids,
              "keys": [q.world_key(tenant_id, env_name, i) for i in ids], "prefix": q.env_prefix(tenant_id, env_name)}
    view = GraphView(tenant_id=tenant_id, env_name=env_name)
    view.nodes = {r["id"]: cast(NodeRecord, r) for r in _decode(tx.run(q.VIEW_NODES, params))}
    view.edges = {r["id"]: cast(EdgeRecord, r) for r in _decode(tx.run(q.VIEW_EDGES, params))}
    for r in _decode(tx.run(q.VIEW_ANCESTOR_EDGES, params)):
        view.edges.setdefault(r["id"], cast(EdgeRecord, r))
    view.rules = {r["id"]: cast(RuleRecord, r) for r in _decode(tx.run(q.ENV_RULES, params))}
    meta = _decode(tx.run(q.GET_META, params))
    view.meta = cast(MetaRecord, meta[0]) if meta else None
    return view


def _decode(result: Iterable[Any]) -> list[Record]:
    return [json.loads(r["record"]) for r in result if r["record"] is not None]


def _by_id(records: list[Record]) -> list[Record]:
    """Sorted by id in code-point order, exactly as SQLite's ORDER BY id sorts UTF-8 text."""
    return sorted(records, key=lambda r: r["id"])
