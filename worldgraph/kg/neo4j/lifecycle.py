"""The memory lifecycle of the Neo4j store: browsing (episodes by a keyset cursor, agents,
environments) and forgetting (an episode, an agent's or a session's episodes, an environment, a
tenant), each forget ONE managed write transaction, with a ``(:ForgetAudit)`` node as its audit
row; a forget of episodes derives again, in that transaction, what live records showed of them
(``neo4j.derived``). The statements are in
``worldgraph.kg.neo4j.lifecycle_queries`` (through ``q``).

Neo4j has no secure delete: a deleted record's bytes stay in the store files until Neo4j reuses
the space (docs/forget.md); ``purge_files`` says so and does nothing else."""

from __future__ import annotations

from neo4j import ManagedTransaction

from worldgraph.kg import derived
from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.lifecycle import FORGET_COUNTS, DerivedRecords, EpisodeFilter, Forgotten, iso_of, with_ids
from worldgraph.kg.neo4j import derived as neo4j_derived
from worldgraph.kg.neo4j import queries as q
from worldgraph.kg.neo4j.connection import Neo4jConnection
from worldgraph.kg.neo4j.rows import episode_of_row
from worldgraph.kg.store import Record

__all__ = ["Neo4jLifecycle"]

class Neo4jLifecycle:
    """The list / forget / purge methods of Neo4jGraphStore (see the module docstring), on ``db``."""

    def __init__(self, db: Neo4jConnection) -> None:
        self.db = db
        self._lifecycle_ready = False  # q.LIFECYCLE_SCHEMA ensured (on first use)

    def _ensure_lifecycle_schema(self) -> None:
        if self._lifecycle_ready or self.db.read_only:
            return
        self.db.create_schema(q.LIFECYCLE_SCHEMA, q.AWAIT_INDEXES)
        self._lifecycle_ready = True

    # ---------------------------------------------------------------- browse
    def list_episodes(self, tenant_id: str, flt: EpisodeFilter, limit: int,
                      after: tuple[float, str] | None) -> list[Record]:
        self._ensure_lifecycle_schema()
        query, params = q.list_episodes(tenant_id, flt, limit, after)
        return [episode_of_row(r) for r in self.db.rows(query, **params)]

    def list_agents(self, tenant_id: str) -> list[Record]:
        rows = self.db.rows(q.LIST_AGENTS, tenant_id=tenant_id)
        return [{"agent_id": r["id"], "agent_role": r["role"] or "", "episodes": int(r["n"]),
                 "last_seen": iso_of(r["last"])} for r in rows]

    def environment_metas(self, tenant_id: str) -> dict[str, Record | None]:
        rows = self.db.rows(q.ENVIRONMENT_METAS, tenant_id=tenant_id)
        return {r["env"]: loads(r["record"]) if r["record"] is not None else None for r in rows}

    # ---------------------------------------------------------------- forget
    def forget_episodes(self, tenant_id: str, kind: str, target: str, audit: Record) -> Forgotten | None:
        """As the embedded store's (``SqliteLifecycle.forget_episodes``): one managed transaction."""
        self._ensure_lifecycle_schema()

        def work(tx: ManagedTransaction) -> Forgotten | None:
            forgotten = {r["id"]: loads(r["record"]) for r in tx.run(q.EPISODES_TO_FORGET[kind], tenant_id=tenant_id,
                                                                       target=target)}
            if not forgotten:
                return None
            quoting = neo4j_derived.quoting_turns(tx, tenant_id, forgotten)
            counts = dict.fromkeys(FORGET_COUNTS, 0)
            envs: set[str] = set()
            for eid, record in forgotten.items():
                _delete_episode(tx, tenant_id, eid, record, counts, envs)
            for env in envs:
                _recount(tx, tenant_id, env)
            rederived = neo4j_derived.rederive_turns(tx, tenant_id, quoting)
            counts["turn_contexts_rederived"] = len(rederived)
            canvases = {str(r["canvas_id"]) for r in forgotten.values() if r.get("canvas_id")}
            counts["canvases_rederived"], counts["canvases"] = neo4j_derived.rederive_canvases(tx, tenant_id, canvases)
            _create_audit(tx, with_ids(audit, kind, list(forgotten), rederived))
            return Forgotten(counts, list(forgotten), rederived)
        return self.db.write(work)

    def forget_environment(self, tenant_id: str, env_name: str, audit: Record) -> Record | None:
        self._ensure_lifecycle_schema()
        prefix = q.env_prefix(tenant_id, env_name)

        def work(tx: ManagedTransaction) -> Record | None:
            known = tx.run(q.ENV_KNOWN, tenant_id=tenant_id, env_name=env_name).single()
            if known is None or not known["n"]:
                return None
            tx.run(q.LOCK_ENV, tenant_id=tenant_id, env_name=env_name).consume()
            counts = tx.run(q.ENV_COUNTS, tenant_id=tenant_id, env_name=env_name, prefix=prefix).single()
            tx.run(q.DELETE_ENV, tenant_id=tenant_id, env_name=env_name, prefix=prefix).consume()
            tx.run(q.DELETE_IDEMPOTENCY_NAMING, tenant_id=tenant_id, ref=f"env:{env_name}").consume()
            _create_audit(tx, audit)
            return {k: int(counts[k]) if counts else 0 for k in ("nodes", "edges", "rules", "scenes")}
        return self.db.write(work)

    def forget_tenant(self, tenant_id: str, audit: Record) -> Record:
        self._ensure_lifecycle_schema()
        prefix = q.tenant_prefix(tenant_id)

        def work(tx: ManagedTransaction) -> Record:
            counts: Record = {}
            edges = tx.run(q.STATS, tenant_id=tenant_id, prefix=prefix).single()
            counts["edges"] = int(edges["edges"]) if edges else 0
            for key, statement in q.TENANT_DELETES:
                row = tx.run(statement, tenant_id=tenant_id, prefix=prefix).single()
                counts[key] = int(row["n"]) if row else 0
            _create_audit(tx, audit)
            return {k: counts[k] for k in ("episodes", "feedback", "scenes", "nodes", "edges", "rules", "agents",
                                           "canvases", "api_keys")}
        return self.db.write(work)

    def forget_log(self, tenant_id: str | None = None, unpurged: bool = False) -> list[Record]:
        if not self._lifecycle_ready and not self.db.read_only:
            self._ensure_lifecycle_schema()
        rows = self.db.rows(q.forget_log(unpurged), tenant_id=tenant_id)
        out = []
        for r in rows:
            rec = loads(r["record"])
            rec["purged_at"] = r["purged"]
            out.append(rec)
        return out

    def mark_purged(self, audit_ids: list[str], at: str) -> None:
        self.db.write(lambda tx: tx.run(q.MARK_PURGED, ids=list(audit_ids), at=at).consume())

    # ---------------------------------------------------------------- the derived-text upgrade
    def derived_text_upgraded(self) -> bool:
        rows = self.db.rows(q.DERIVED_TEXT_READ)
        return bool(rows and rows[0]["done"])

    def mark_derived_text_upgraded(self) -> None:
        self.db.write(lambda tx: tx.run(q.DERIVED_TEXT_WRITE).consume())

    def canvas_ids(self, tenant_id: str) -> list[str]:
        return [r["id"] for r in self.db.rows(q.CANVAS_IDS, tenant_id=tenant_id)]

    def write_derived(self, tenant_id: str, derived_records: DerivedRecords, audit: Record) -> None:
        """As the embedded store's: one managed transaction."""
        self._ensure_lifecycle_schema()

        def work(tx: ManagedTransaction) -> None:
            for ep in derived_records.episodes:
                record = {k: v for k, v in ep.items() if k not in ("index_status", "index_error")}
                tx.run(q.REWRITE_EPISODE, tenant_id=tenant_id, id=ep["id"], record=dumps(record)).consume()
            for cid, canvas in derived_records.canvases.items():
                if canvas is None:
                    tx.run(q.DELETE_CANVAS, tenant_id=tenant_id, id=cid).consume()
                else:
                    tx.run(q.SET_CANVAS, tenant_id=tenant_id, id=cid, name=canvas.get("name") or "",
                           record=dumps(canvas)).consume()
            for env, meta in derived_records.metas.items():
                tx.run(q.SET_META_RECORD, tenant_id=tenant_id, env_name=env, record=dumps(meta)).consume()
            for scene in derived_records.scenes:
                tx.run(q.SET_SCENE_RECORD, tenant_id=tenant_id, id=scene["id"], record=dumps(scene)).consume()
            _create_audit(tx, audit)
        self.db.write(work)

    def purge_total(self) -> int:
        rows = self.db.rows(q.PURGE_GEN_TOTAL)
        return int(rows[0]["gen"]) if rows and rows[0]["gen"] is not None else 0

    def purge_generations(self) -> dict[str, int]:
        return {r["tenant"]: int(r["gen"]) for r in self.db.rows(q.PURGE_GENS)}

    def bump_purge_generations(self, tenants: list[str]) -> None:
        if tenants:
            self._ensure_lifecycle_schema()
            self.db.write(lambda tx: tx.run(q.BUMP_PURGE_GENS, tenants=["", *sorted(set(tenants))]).consume())

    def purge_files(self) -> Record:
        return {"neo4j": "deleted records stay in the Neo4j store files until their space is reused "
                         "(docs/forget.md)"}


def _delete_episode(tx: ManagedTransaction, tenant_id: str, episode_id: str, record: Record, counts: dict[str, int],
                    envs: set[str]) -> None:
    """One episode of a forget: its neighbours linked to each other, its scenes (``_drop_scene``),
    the episode with its feedback and canvas actions, its agent once idle, for a round its line in
    other scenes' history, and the kept answers of idempotent writes that name it; adds to
    ``counts`` and to ``envs`` (environments recounted)."""
    tx.run(q.RELINK, tenant_id=tenant_id, id=episode_id).consume()
    for r in list(tx.run(q.EPISODE_SCENES, tenant_id=tenant_id, id=episode_id)):
        scene = loads(r["record"])
        counts["scenes"] += 1
        counts["world_records_updated"] += _drop_scene(tx, tenant_id, scene)
        envs.add(scene["env_name"])
    deleted = tx.run(q.DELETE_EPISODE, tenant_id=tenant_id, id=episode_id).single()
    counts["episodes"] += 1
    counts["feedback"] += int(deleted["feedback"]) if deleted else 0
    counts["canvas_audits"] += int(deleted["audits"]) if deleted else 0
    tx.run(q.DELETE_IDLE_AGENT, tenant_id=tenant_id, agent=record["agent_id"]).consume()
    neo4j_derived.rederive_agent(tx, tenant_id, record)
    if record.get("session_id"):
        tx.run(q.DELETE_IDLE_SESSION, tenant_id=tenant_id, session_id=record["session_id"]).consume()
    if record.get("task_type") == derived.ROUND_TASK_TYPE:
        counts["scenes_rederived"] += neo4j_derived.scenes_without_round(tx, tenant_id, episode_id)
    # the first answers to idempotent writes that name it (they may quote its words)
    tx.run(q.DELETE_IDEMPOTENCY_NAMING, tenant_id=tenant_id, ref=episode_id).consume()


def _drop_scene(tx: ManagedTransaction, tenant_id: str, scene: Record) -> int:
    """Take the scene out of the sources of the records learned from it, with the evidence that
    came only from it (``kg.derived.strip_scene``), clear the environment's last trigger reason
    when it is the scene's, then delete the scene."""
    env, scene_id = scene["env_name"], scene["id"]
    words = derived.scene_text(scene)
    nodes: list[Record] = []
    rels: list[Record] = []
    for r in tx.run(q.SCENE_SOURCED, tenant_id=tenant_id, scene_id=scene_id, prefix=q.env_prefix(tenant_id, env)):
        rec = loads(r["record"])
        if scene_id not in (rec.get("source_scenes") or []):
            continue  # the id text occurs elsewhere in the record
        row = {"eid": r["eid"], "record": dumps(derived.strip_scene(rec, scene_id, words))}
        (nodes if r["kind"] == "node" else rels).append(row)
    if nodes:
        tx.run(q.SET_NODE_RECORDS, rows=nodes).consume()
    if rels:
        tx.run(q.SET_REL_RECORDS, rows=rels).consume()
    meta = tx.run(q.RECOUNT, tenant_id=tenant_id, env_name=env, prefix=q.env_prefix(tenant_id, env)).single()
    if meta is not None:
        before = loads(meta["record"])
        after = derived.meta_without_scene(before, scene)
        if after is not before:
            tx.run(q.SET_META_RECORD, tenant_id=tenant_id, env_name=env, record=dumps(after)).consume()
    tx.run(q.DELETE_SCENE, tenant_id=tenant_id, scene_id=scene_id).consume()
    return len(nodes) + len(rels)


def _recount(tx: ManagedTransaction, tenant_id: str, env: str) -> None:
    row = tx.run(q.RECOUNT, tenant_id=tenant_id, env_name=env, prefix=q.env_prefix(tenant_id, env)).single()
    if row is None:
        return
    meta = loads(row["record"])
    meta["counts"] = {k: int(row[k]) for k in ("nodes", "edges", "rules", "scenes")}
    tx.run(q.SET_META_RECORD, tenant_id=tenant_id, env_name=env, record=dumps(meta)).consume()


def _create_audit(tx: ManagedTransaction, audit: Record) -> None:
    tx.run(q.CREATE_AUDIT, id=audit["id"], tenant_id=audit["tenant_id"], kind=audit["kind"],
           target_id=audit["target_id"], forgotten_by=audit.get("forgotten_by"),
           forgotten_at=audit["forgotten_at"], record=dumps(audit)).consume()
