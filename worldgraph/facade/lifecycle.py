"""The forgetting path of ``WorldModel``: forget an episode, an agent's or a session's episodes, an
environment or a tenant (gone from every read path at once, audited, what other records showed of
them derived again), and purge, which removes the forgotten bytes from the files.

The facade checks the tenant and that it is writable, then hands the call to its ``Lifecycle``,
which owns the background purge (``Purger``, within ``purge_after_seconds`` of a forget) and the
lock that keeps two purges apart.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from worldgraph.clock import now_iso
from worldgraph.config import WorldGraphConfig
from worldgraph.errors import InvalidInputError, NotFoundError, NotSupportedError
from worldgraph.facade.world_search import WorldSearch
from worldgraph.kg.lifecycle import EPISODE_SCOPES, audit_record
from worldgraph.kg.store import GraphStore
from worldgraph.limits import check_text
from worldgraph.memory.conversation import check_session
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.index.indexer import Progress
from worldgraph.memory.lifecycle import ForgetReport, Purger
from worldgraph.names import KNOWN_SHOWN, check_env, known_names
from worldgraph.world.curiosity import RoundHistory

log = logging.getLogger("worldgraph")


class Lifecycle:
    """Forgets and purges records of ``store`` and ``index``; ``history``: the world updater's
    rolling history of rounds, which forgotten rounds, environments and tenants leave too;
    ``reindex(tenant, ids)``: writes stored episodes' index rows again (False: left pending);
    ``purged()``: called after a purge bumped the purged tenants' generations (this process lets
    go of them at once: facade/generations.py)."""

    def __init__(self, store: GraphStore, index: EpisodeIndex, config: WorldGraphConfig, history: RoundHistory,
                 reindex: Callable[[str, list[str]], bool], purged: Callable[[], object] = lambda: None,
                 world: WorldSearch | None = None) -> None:
        self.store = store
        self.world = world
        self.index = index
        self.config = config
        self.history = history
        self.reindex = reindex
        self.purged = purged
        self.purge_lock = threading.Lock()
        self.purger = Purger(self.purge, config.purge_after_seconds)

    def purge_pending_later(self) -> None:
        """Forgets whose bytes an earlier process did not purge are purged in the background."""
        try:
            if self.store.forget_log(unpurged=True):
                self.purger.kick()
        except NotSupportedError:
            pass

    def forget_episode(self, tenant_id: str, episode_id: str, forgotten_by: str | None = None) -> ForgetReport:
        """``WorldModel.forget_episode`` once the tenant and writability are checked."""
        if not isinstance(episode_id, str) or not episode_id:
            raise InvalidInputError("episode_id", "must be a non-empty string", episode_id)
        check_text(episode_id, "episode_id", self.config.max_text_bytes, "max_text_bytes")
        return self._forget_episodes(tenant_id, "episode", episode_id, forgotten_by, lambda: NotFoundError(
            "episode", episode_id, f"tenant {tenant_id!r} holds no such episode"))

    def forget_agent(self, tenant_id: str, agent_id: str, forgotten_by: str | None = None) -> ForgetReport:
        """``WorldModel.forget_agent`` once the tenant and writability are checked."""
        if not isinstance(agent_id, str) or not agent_id:
            raise InvalidInputError("agent_id", "must be a non-empty string", agent_id)
        check_text(agent_id, "agent_id", self.config.max_text_bytes, "max_text_bytes")
        return self._forget_episodes(tenant_id, "agent", agent_id, forgotten_by, lambda: NotFoundError(
            "agent", agent_id, f"tenant {tenant_id!r} has no episodes of this agent; " + known_names(
                self.store.agent_ids(tenant_id, KNOWN_SHOWN + 1), "agents", "nothing to forget"), field="agent_id"))

    def forget_session(self, tenant_id: str, session_id: str, forgotten_by: str | None = None) -> ForgetReport:
        """``WorldModel.forget_session`` once the tenant and writability are checked."""
        sid = check_session(session_id)
        return self._forget_episodes(tenant_id, "session", sid, forgotten_by, lambda: NotFoundError(
            "session", sid, f"tenant {tenant_id!r} has no episodes in this session", field="session_id"))

    def _forget_episodes(self, tenant_id: str, kind: str, target: str, forgotten_by: str | None,
                         missing: Callable[[], NotFoundError]) -> ForgetReport:
        """Forget the episodes ``kind`` names (one transaction of the store, which derives again
        what live records showed of them: kg.derived), then their index rows: the forgotten ones
        deleted, those of the records derived again deleted and written again, so that no search,
        full-text included, ranks by the forgotten words from now on."""
        check_text(forgotten_by, "forgotten_by", self.config.max_text_bytes, "max_text_bytes")
        audit = audit_record(tenant_id, kind, target, forgotten_by, now_iso())
        done = self.store.forget_episodes(tenant_id, kind, target, audit)
        if done is None:
            raise missing()
        removed = dict(done.counts)
        self.history.forget_episodes(tenant_id, done.episode_ids)
        if self.world is not None and removed.get("scenes"):
            try:  # the world rows that quoted a forgotten scene (the action a fact came after) say it no more
                self.world.resync(tenant_id, None)
            except Exception as exc:  # noqa: BLE001 - the store forgot it; purge() syncs those rows
                log.warning("forgot %s %s, but the world rows of its scenes stay until the next purge (%s)",
                            kind, target, exc)
        try:  # recall already drops hits the store no longer holds; purge() deletes rows left here
            self.index.delete([*done.episode_ids, *done.rederived])
            removed["index_rows"] = len(done.episode_ids)
        except Exception as exc:  # noqa: BLE001 - the store forgot them: that decides the call
            log.warning("forgot %s %s, but its index rows stay until the next purge (%s)", kind, target, exc)
            removed["index_rows"] = 0
        if done.rederived and not self.reindex(tenant_id, done.rederived):
            log.warning("forgot %s %s; %d episodes that quoted it are re-indexed later", kind, target,
                        len(done.rederived))
        return self._forget_report(kind, audit, removed)

    def forget_replaced(self, tenant_id: str, episode_ids: list[str]) -> None:
        """The episodes an upsert (``record_experiences(replace=True)``) replaces, each forgotten as
        ``forget_episode`` forgets it, audited as replaced."""
        for episode_id in episode_ids:
            self.forget_episode(tenant_id, episode_id, "replaced by record_experience")

    def forget_environment(self, tenant_id: str, env_name: str, forgotten_by: str | None = None) -> ForgetReport:
        """``WorldModel.forget_environment`` once the tenant and writability are checked."""
        env = check_env(env_name)
        check_text(forgotten_by, "forgotten_by", self.config.max_text_bytes, "max_text_bytes")
        audit = audit_record(tenant_id, "environment", env, forgotten_by, now_iso())
        removed = self.store.forget_environment(tenant_id, env, audit)
        if removed is None:
            known = self.store.environments(tenant_id)
            raise NotFoundError("environment", env, f"tenant {tenant_id!r} has no such environment; " + known_names(
                known, "environments", "nothing to forget"), field="env_name")
        self.history.drop(tenant_id, env)
        if self.world is not None:
            try:
                self.world.forget_environment(tenant_id, env)
            except Exception as exc:  # noqa: BLE001 - the store forgot it; purge() deletes the rows
                log.warning("forgot environment %s, but its world index rows stay until the next purge (%s)", env, exc)
        return self._forget_report("environment", audit, removed)

    def forget_tenant(self, tenant_id: str, forgotten_by: str | None = None) -> ForgetReport:
        """``WorldModel.forget_tenant`` once the tenant and writability are checked."""
        check_text(forgotten_by, "forgotten_by", self.config.max_text_bytes, "max_text_bytes")
        audit = audit_record(tenant_id, "tenant", tenant_id, forgotten_by, now_iso())
        removed = self.store.forget_tenant(tenant_id, audit)
        self.history.drop(tenant_id)
        try:
            self.index.delete_tenant(tenant_id)
            if self.world is not None:
                self.world.forget_tenant(tenant_id)
        except Exception as exc:  # noqa: BLE001 - the store forgot it; purge() drops the table
            log.warning("forgot tenant %s, but its index rows stay until the next purge (%s)", tenant_id, exc)
        return self._forget_report("tenant", audit, removed)

    def purge(self, progress: Progress | None = None) -> dict[str, Any]:
        """``WorldModel.purge`` once writability is checked (and the background purge's run)."""
        with self.purge_lock:
            pending = self.store.forget_log(unpurged=True)
            by_tenant: dict[str, list[str]] = {}
            rederived: dict[str, list[str]] = {}
            for a in pending:
                if a["kind"] in EPISODE_SCOPES:
                    ids = [a["target_id"]] if a["kind"] == "episode" else list(a.get("episode_ids") or [])
                    by_tenant.setdefault(a["tenant_id"], []).extend(ids)
                if a.get("rederived"):  # a forget of episodes, or the upgrade (facade/upgrade.py)
                    rederived.setdefault(a["tenant_id"], []).extend(a["rederived"])
            stale: list[str] = []
            for tenant, ids in by_tenant.items():  # an id recorded again after its forget keeps its row
                alive = self.store.get_episodes(tenant, ids)
                stale.extend(i for i in ids if i not in alive)
            for tenant, ids in rederived.items():
                # a record derived again whose new row is not written yet still has its old one,
                # with the forgotten words: written now, or else deleted (it is indexed later)
                waiting = [i for i, e in self.store.get_episodes(tenant, ids).items()
                           if e.get("index_status") != "indexed"]
                if waiting and not self.reindex(tenant, waiting):
                    stale.extend(waiting)
            drop, rewrite = [], set(by_tenant) | set(rederived)
            for tenant in {a["tenant_id"] for a in pending if a["kind"] == "tenant"}:
                if self.store.stats(tenant)["episodes"] == 0:
                    drop.append(tenant)
                else:  # recorded again since: keep those rows, remove the rest
                    keep = {tenant: {e["id"] for page in self.store.iter_episodes(tenant) for e in page}}
                    self.index.prune(keep, tenant)
                    rewrite.add(tenant)
            stats: dict[str, Any] = {"forgets_purged": len(pending)}
            stats.update(self.index.purge(stale, sorted(rewrite), drop, progress))
            if self.world is not None:
                # every tenant that forgot something: the world rows of what the store no longer
                # holds deleted, then the files rewritten (a forgotten tenant's table dropped)
                touched = sorted({a["tenant_id"] for a in pending} - set(drop))
                stats.update(self.world.purge(touched, drop))
            stats.update(self.store.purge_files())
            if pending:
                # after the files are gone (a process that reopened one meanwhile sees the generation
                # move after), before the forgets are marked purged (a failure here: purged again)
                self.store.bump_purge_generations(sorted({a["tenant_id"] for a in pending}))
                self.store.mark_purged([a["id"] for a in pending], now_iso())
                self.purged()
            return stats

    def _forget_report(self, kind: str, audit: dict[str, Any], removed: dict[str, Any]) -> ForgetReport:
        due = datetime.fromisoformat(audit["forgotten_at"]) + timedelta(seconds=self.config.purge_after_seconds)
        self.purger.kick()
        return ForgetReport(kind, audit["tenant_id"], audit["target_id"], audit["id"], audit["forgotten_at"],
                            audit.get("forgotten_by"), {k: int(v) for k, v in removed.items()}, due.isoformat())

