"""The forgetting path of ``WorldModel``: forget an episode, an environment or a tenant (gone from
every read path at once, audited), and purge, which removes the forgotten bytes from the files.

The facade checks the tenant and that it is writable, then hands the call to its ``Lifecycle``,
which owns the background purge (``Purger``, within ``purge_after_seconds`` of a forget) and the
lock that keeps two purges apart.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Any

from worldgraph.clock import now_iso
from worldgraph.config import WorldGraphConfig
from worldgraph.errors import InvalidInputError, NotFoundError, NotSupportedError
from worldgraph.kg.lifecycle import audit_record
from worldgraph.kg.store import GraphStore
from worldgraph.limits import check_text
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.index.indexer import Progress
from worldgraph.memory.lifecycle import ForgetReport, Purger
from worldgraph.names import check_env, known_names
from worldgraph.world.curiosity import RoundHistory

log = logging.getLogger("worldgraph")


class Lifecycle:
    """Forgets and purges records of ``store`` and ``index``; ``history``: the world updater's
    rolling history of rounds, which a forgotten environment or tenant leaves too."""

    def __init__(self, store: GraphStore, index: EpisodeIndex, config: WorldGraphConfig, history: RoundHistory) -> None:
        self.store = store
        self.index = index
        self.config = config
        self.history = history
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
        check_text(forgotten_by, "forgotten_by", self.config.max_text_bytes, "max_text_bytes")
        audit = audit_record(tenant_id, "episode", episode_id, forgotten_by, now_iso())
        removed = self.store.forget_episode(tenant_id, episode_id, audit)
        if removed is None:
            raise NotFoundError("episode", episode_id, f"tenant {tenant_id!r} holds no such episode")
        try:  # recall already drops hits the store no longer holds; purge() deletes rows left here
            self.index.delete([episode_id])
            removed["index_rows"] = 1
        except Exception as exc:  # noqa: BLE001 - the store forgot it: that decides the call
            log.warning("forgot episode %s, but its index row stays until the next purge (%s)", episode_id, exc)
            removed["index_rows"] = 0
        return self._forget_report("episode", audit, removed)

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
        return self._forget_report("environment", audit, removed)

    def forget_tenant(self, tenant_id: str, forgotten_by: str | None = None) -> ForgetReport:
        """``WorldModel.forget_tenant`` once the tenant and writability are checked."""
        check_text(forgotten_by, "forgotten_by", self.config.max_text_bytes, "max_text_bytes")
        audit = audit_record(tenant_id, "tenant", tenant_id, forgotten_by, now_iso())
        removed = self.store.forget_tenant(tenant_id, audit)
        self.history.drop(tenant_id)
        try:
            self.index.delete_tenant(tenant_id)
        except Exception as exc:  # noqa: BLE001 - the store forgot it; purge() drops the table
            log.warning("forgot tenant %s, but its index rows stay until the next purge (%s)", tenant_id, exc)
        return self._forget_report("tenant", audit, removed)

    def purge(self, progress: Progress | None = None) -> dict[str, Any]:
        """``WorldModel.purge`` once writability is checked (and the background purge's run)."""
        with self.purge_lock:
            pending = self.store.forget_log(unpurged=True)
            by_tenant: dict[str, list[str]] = {}
            for a in pending:
                if a["kind"] == "episode":
                    by_tenant.setdefault(a["tenant_id"], []).append(a["target_id"])
            stale: list[str] = []
            for tenant, ids in by_tenant.items():  # an id recorded again after its forget keeps its row
                alive = self.store.get_episodes(tenant, ids)
                stale.extend(i for i in ids if i not in alive)
            drop, rewrite = [], set(by_tenant)
            for tenant in {a["tenant_id"] for a in pending if a["kind"] == "tenant"}:
                if self.store.stats(tenant)["episodes"] == 0:
                    drop.append(tenant)
                else:  # recorded again since: keep those rows, remove the rest
                    keep = {tenant: {e["id"] for page in self.store.iter_episodes(tenant) for e in page}}
                    self.index.prune(keep, tenant)
                    rewrite.add(tenant)
            stats: dict[str, Any] = {"forgets_purged": len(pending)}
            stats.update(self.index.purge(stale, sorted(rewrite), drop, progress))
            stats.update(self.store.purge_files())
            if pending:
                self.store.mark_purged([a["id"] for a in pending], now_iso())
            return stats

    def _forget_report(self, kind: str, audit: dict[str, Any], removed: dict[str, Any]) -> ForgetReport:
        due = datetime.fromisoformat(audit["forgotten_at"]) + timedelta(seconds=self.config.purge_after_seconds)
        self.purger.kick()
        return ForgetReport(kind, audit["tenant_id"], audit["target_id"], audit["id"], audit["forgotten_at"],
                            audit.get("forgotten_by"), {k: int(v) for k, v in removed.items()}, due.isoformat())

