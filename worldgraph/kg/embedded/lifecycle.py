"""The memory lifecycle of the embedded store: browsing (list episodes by a keyset cursor, agents,
environments) and forgetting (an episode, an agent's or a session's episodes, an environment, a
tenant), each forget ONE transaction; a forget of episodes derives again, in that transaction,
what live records showed of them (``embedded.derived``).

Forgetting deletes rows; the bytes go with ``purge_files``: the connection runs with
``PRAGMA secure_delete=ON`` (SQLite overwrites deleted content with zeros in the database pages),
and ``purge_files`` checkpoints the WAL and truncates it, so no older copy of a page survives in
``worldgraph.db-wal``."""

from __future__ import annotations

import sqlite3
import time

from worldgraph.errors import StorageError
from worldgraph.kg import derived
from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.embedded import derived as embedded_derived
from worldgraph.kg.embedded import sql
from worldgraph.kg.embedded.connection import SqliteConnection
from worldgraph.kg.embedded.episode_format import unpack
from worldgraph.kg.embedded.episodes import episode_of_row
from worldgraph.kg.embedded.sql import chunks
from worldgraph.kg.embedded.world import env_counts
from worldgraph.kg.lifecycle import FORGET_COUNTS, DerivedRecords, EpisodeFilter, Forgotten, iso_of, with_ids
from worldgraph.kg.store import Record

__all__ = ["SqliteLifecycle"]


class SqliteLifecycle:
    """The list / forget / purge methods of EmbeddedGraphStore (see the module docstring), on ``db``."""

    def __init__(self, db: SqliteConnection) -> None:
        self.db = db

    # ---------------------------------------------------------------- browse
    def list_episodes(self, tenant_id: str, flt: EpisodeFilter, limit: int,
                      after: tuple[float, str] | None) -> list[Record]:
        """Newest first in (ts, id) order, strictly after ``after`` in that order (a keyset seek)."""
        statement, params = sql.list_episodes(tenant_id, flt, limit, after)
        return [episode_of_row(row) for row in self.db.query(statement, params)]

    def list_agents(self, tenant_id: str) -> list[Record]:
        rows = self.db.query(sql.LIST_AGENTS, (tenant_id,))
        return [{"agent_id": aid, "agent_role": loads(d).get("agent_role", ""), "episodes": int(n),
                 "last_seen": iso_of(ts)} for aid, d, n, ts in rows]

    def environment_metas(self, tenant_id: str) -> dict[str, Record | None]:
        """env name -> its meta record (None for an environment with scenes but no merge yet)."""
        out: dict[str, Record | None] = {r[0]: None for r in self.db.query(sql.ENVS_WITH_SCENES, (tenant_id,))}
        for env, d in self.db.query(sql.ENV_METAS, (tenant_id,)):
            out[env] = loads(d)
        return dict(sorted(out.items()))

    # ---------------------------------------------------------------- forget
    def forget_episodes(self, tenant_id: str, kind: str, target: str, audit: Record) -> Forgotten | None:
        """Delete the episodes ``kind`` (``episode``, ``agent`` or ``session``) names by ``target``,
        each with its feedback, canvas actions, session place (its neighbours are linked to each
        other) and scene packets; strip those scenes from the sources of the world records learned
        from them; derive again what live records showed of them (``kg.derived``: the turns that
        quoted them, the canvases they carried, the scenes whose history quoted a round); write
        ``audit``. One transaction. None if there is no such episode (nothing written)."""
        with self.db.transaction() as cur:
            forgotten = _episodes_of(cur, tenant_id, kind, target)
            if not forgotten:
                return None
            quoting = embedded_derived.quoting_turns(cur, tenant_id, forgotten)
            counts = dict.fromkeys(FORGET_COUNTS, 0)
            envs: set[str] = set()
            for eid, record in forgotten.items():
                _delete_episode(cur, tenant_id, eid, record, counts, envs)
            for env in envs:
                _recount(cur, tenant_id, env)
            rederived = embedded_derived.rederive_turns(cur, tenant_id, quoting)
            counts["turn_contexts_rederived"] = len(rederived)
            canvases = {str(r["canvas_id"]) for r in forgotten.values() if r.get("canvas_id")}
            counts["canvases_rederived"], counts["canvases"] = embedded_derived.rederive_canvases(cur, tenant_id,
                                                                                                 canvases)
            with_ids(audit, kind, list(forgotten), rederived)
            _audit(cur, audit)
            return Forgotten(counts, list(forgotten), rederived)

    def forget_environment(self, tenant_id: str, env_name: str, audit: Record) -> Record | None:
        """Delete one environment's world graph, scenes (packets), reports and meta; one
        transaction. The episodes of its rounds stay (forget them one by one). None if the tenant
        has no such environment."""
        with self.db.transaction() as cur:
            if cur.execute(sql.ENV_KNOWN, (tenant_id, env_name, tenant_id, env_name)).fetchone() is None:
                return None
            counts = {}
            for key, table in (("nodes", "world_nodes"), ("edges", "world_edges"), ("rules", "world_rules"),
                               ("scenes", "scenes"), ("scene_reports", "scene_reports"),
                               ("scene_links", "scene_links"), ("meta", "env_meta")):
                counts[key] = cur.execute(sql.delete_in_env(table), (tenant_id, env_name)).rowcount
            counts.pop("scene_links")
            counts.pop("meta")
            cur.execute(sql.DELETE_IDEMPOTENCY_NAMING, (tenant_id, f"env:{env_name}"))  # answers naming it
            _audit(cur, audit)
            return counts

    def forget_tenant(self, tenant_id: str, audit: Record) -> Record:
        """Delete every record of the tenant, its API keys and idempotency records included; one
        transaction."""
        with self.db.transaction() as cur:
            counts = {table: cur.execute(sql.delete_of_tenant(table), (tenant_id,)).rowcount
                      for table in sql.TENANT_TABLES}
            _audit(cur, audit)
            return {"episodes": counts["episodes"], "feedback": counts["feedback"], "scenes": counts["scenes"],
                    "nodes": counts["world_nodes"], "edges": counts["world_edges"], "rules": counts["world_rules"],
                    "agents": counts["agents"], "canvases": counts["canvases"], "api_keys": counts["api_keys"]}

    def forget_log(self, tenant_id: str | None = None, unpurged: bool = False) -> list[Record]:
        """Audit rows of forgets (one tenant's, or all), oldest first; ``unpurged``: only those whose
        bytes ``purge()`` has not removed yet."""
        params = [] if tenant_id is None else [tenant_id]
        out = []
        for d, purged in self.db.query(sql.forget_log(tenant_id is not None, unpurged), params):
            rec = loads(d)
            rec["purged_at"] = purged
            out.append(rec)
        return out

    def mark_purged(self, audit_ids: list[str], at: str) -> None:
        with self.db.transaction() as cur:
            for chunk in chunks(list(audit_ids)):
                cur.execute(sql.mark_purged(len(chunk)), [at, *chunk])

    # ---------------------------------------------------------------- the derived-text upgrade
    def derived_text_upgraded(self) -> bool:
        try:
            return bool(self.db.query(sql.DERIVED_TEXT_READ))
        except sqlite3.OperationalError:  # a read-only open of a file with no schema_info yet
            return False

    def mark_derived_text_upgraded(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(sql.DERIVED_TEXT_WRITE)

    def canvas_ids(self, tenant_id: str) -> list[str]:
        return [r[0] for r in self.db.query(sql.CANVAS_IDS, (tenant_id,))]

    def write_derived(self, tenant_id: str, derived_records: DerivedRecords, audit: Record) -> None:
        """Write records whose derived text was derived again (episodes marked for re-indexing,
        canvases rewritten or deleted, metas, scenes) and ``audit``, in one transaction."""
        with self.db.transaction() as cur:
            for ep in derived_records.episodes:
                record = {k: v for k, v in ep.items() if k not in ("index_status", "index_error")}
                cur.execute(sql.REWRITE_EPISODE, (dumps(record), tenant_id, ep["id"]))
            for cid, canvas in derived_records.canvases.items():
                if canvas is None:
                    cur.execute(sql.DELETE_CANVAS, (tenant_id, cid))
                else:
                    cur.execute(sql.UPSERT_CANVAS, (tenant_id, cid, dumps(canvas)))
            for env, meta in derived_records.metas.items():
                cur.execute(sql.UPDATE_META, (dumps(meta), tenant_id, env))
            for scene in derived_records.scenes:
                cur.execute(sql.UPDATE_SCENE_DATA, (dumps(scene), tenant_id, scene["id"]))
            _audit(cur, audit)

    def purge_total(self) -> int:
        try:
            rows = self.db.query(sql.PURGE_GEN_TOTAL)
        except sqlite3.OperationalError:  # a read-only open of a file written before purge_gens
            return 0
        return int(rows[0][0]) if rows else 0

    def purge_generations(self) -> dict[str, int]:
        try:
            return {t: int(g) for t, g in self.db.query(sql.PURGE_GENS)}
        except sqlite3.OperationalError:
            return {}

    def bump_purge_generations(self, tenants: list[str]) -> None:
        if not tenants:
            return
        with self.db.transaction() as cur:
            cur.executemany(sql.BUMP_PURGE_GEN, [(t,) for t in ["", *sorted(set(tenants))]])

    def purge_files(self, timeout: float = 30.0) -> Record:
        """Remove the bytes of deleted rows from the files: deleted content is already zeroed in the
        database pages (secure_delete); a TRUNCATE checkpoint copies the WAL into the database and
        empties the WAL file, which still holds the pages as they were before the delete. Retried
        while another connection's read holds an old snapshot; StorageError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            with self.db.lock:
                busy, _log, _done = self.db.conn.execute(sql.CHECKPOINT_TRUNCATE).fetchone()
            if not busy:
                return {"sqlite_checkpoint": "truncated"}
            if time.monotonic() > deadline:
                raise StorageError(f"purge could not empty the WAL of the graph store in {timeout:.0f} s: another "
                                   "process keeps a read open; run `worldgraph purge` again once it is idle")
            time.sleep(0.05)


def _episodes_of(cur: sqlite3.Cursor, tenant_id: str, kind: str, target: str) -> dict[str, Record]:
    """id -> record of the episodes a forget takes, oldest first."""
    if kind == "episode":
        row = cur.execute(sql.EPISODE_DATA, (tenant_id, target)).fetchone()
        return {} if row is None else {target: unpack(row[0])}
    statement = sql.AGENT_EPISODE_ROWS if kind == "agent" else sql.SESSION_EPISODE_ROWS
    return {eid: unpack(d) for eid, d in cur.execute(statement, (tenant_id, target)).fetchall()}


def _delete_episode(cur: sqlite3.Cursor, tenant_id: str, episode_id: str, record: Record, counts: dict[str, int],
                    envs: set[str]) -> None:
    """One episode of a forget: the episode, its feedback, canvas actions, session place, its
    agent once idle, its scenes (``_drop_scene``), for a round its line in other scenes' history,
    and the kept answers of idempotent writes that name it; adds to ``counts`` and to ``envs``
    (the environments whose counts changed)."""
    counts["episodes"] += cur.execute(sql.DELETE_EPISODE, (tenant_id, episode_id)).rowcount
    counts["feedback"] += cur.execute(sql.DELETE_FEEDBACK_OF_EPISODE, (tenant_id, episode_id)).rowcount
    counts["canvas_audits"] += cur.execute(sql.DELETE_AUDITS_OF_EPISODE, (tenant_id, episode_id)).rowcount
    link = cur.execute(sql.SESSION_NEXT_OF, (tenant_id, episode_id)).fetchone()
    if link is not None:
        cur.execute(sql.SESSION_SKIP, (link[0], tenant_id, episode_id))
        cur.execute(sql.DELETE_SESSION_LINK, (tenant_id, episode_id))
    if cur.execute(sql.AGENT_HAS_EPISODE, (tenant_id, record["agent_id"])).fetchone() is None:
        cur.execute(sql.DELETE_AGENT, (tenant_id, record["agent_id"]))
    else:
        embedded_derived.rederive_agent(cur, tenant_id, record)
    for (data,) in cur.execute(sql.SCENES_OF_EPISODE, (tenant_id, episode_id)).fetchall():
        scene = loads(data)
        counts["scenes"] += 1
        counts["world_records_updated"] += _drop_scene(cur, tenant_id, scene)
        envs.add(scene["env_name"])
    if record.get("task_type") == derived.ROUND_TASK_TYPE:
        counts["scenes_rederived"] += embedded_derived.scenes_without_round(cur, tenant_id, episode_id)
    # the first answers to idempotent writes that name it (they may quote its words)
    cur.execute(sql.DELETE_IDEMPOTENCY_NAMING, (tenant_id, episode_id))


def _drop_scene(cur: sqlite3.Cursor, tenant_id: str, scene: Record) -> int:
    """Delete one scene (packet, report, links, the episodic edges that join it), take it out of
    the sources of every node, rule and edge that names it, with the evidence that came only from
    it (``kg.derived.strip_scene``), and clear the environment's last trigger reason when it is the
    scene's; returns how many records were rewritten."""
    env, scene_id = scene["env_name"], scene["id"]
    words = derived.scene_text(scene)
    cur.execute(sql.DELETE_SCENE, (tenant_id, scene_id))
    cur.execute(sql.DELETE_SCENE_REPORT, (tenant_id, scene_id))
    cur.execute(sql.DELETE_EDGES_OF_SCENE, (tenant_id, env, scene_id, scene_id))
    links = cur.execute(sql.SCENE_LINKS, (tenant_id, scene_id)).fetchall()
    cur.execute(sql.DELETE_SCENE_LINKS, (tenant_id, scene_id))
    changed = 0
    for kind, rid in links:
        table = "world_nodes" if kind == "node" else "world_rules"
        got = cur.execute(sql.record_in_env(table), (tenant_id, env, rid)).fetchone()
        if got is not None:
            rec = derived.strip_scene(loads(got[0]), scene_id, words)
            cur.execute(sql.update_record_in_env(table), (dumps(rec), tenant_id, env, rid))
            changed += 1
    # edges keep their sources only in the record (no link table): the env's edges naming it
    for eid, d in cur.execute(sql.EDGES_NAMING, (tenant_id, env, scene_id)).fetchall():
        rec = loads(d)
        if scene_id in (rec.get("source_scenes") or []):
            cur.execute(sql.update_record_in_env("world_edges"),
                        (dumps(derived.strip_scene(rec, scene_id, words)), tenant_id, env, eid))
            changed += 1
    meta = cur.execute(sql.GET_META, (tenant_id, env)).fetchone()
    if meta is not None:
        before = loads(meta[0])
        after = derived.meta_without_scene(before, scene)
        if after is not before:
            cur.execute(sql.UPDATE_META, (dumps(after), tenant_id, env))
    return changed


def _recount(cur: sqlite3.Cursor, tenant_id: str, env: str) -> None:
    """The environment's meta counts again after a forget (no meta yet: nothing to recount)."""
    row = cur.execute(sql.GET_META, (tenant_id, env)).fetchone()
    if row is None:
        return
    meta = loads(row[0])
    meta["counts"] = env_counts(cur, tenant_id, env)
    cur.execute(sql.UPDATE_META, (dumps(meta), tenant_id, env))


def _audit(cur: sqlite3.Cursor, audit: Record) -> None:
    cur.execute(sql.INSERT_FORGET_AUDIT, (audit["id"], audit["tenant_id"], audit["kind"], audit["target_id"],
                                          audit.get("forgotten_by"), audit["forgotten_at"], dumps(audit)))
