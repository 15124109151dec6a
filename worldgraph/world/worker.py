"""``worldgraph worker``: world updates in their own processes, fed by the durable packet queue.

The scenes of the graph store are the queue: ``observe_round`` stores a flagged round's packet as
"pending" (app servers run with ``world_background_updates = false`` to leave every packet to the
workers). Each worker thread takes the oldest packet it may (``lease.claimable``: pending, or
running under a lease that ran out), under a lease it renews while the LLM extracts, and merges it
in a transaction fenced by that lease. So with N workers on N machines every packet is merged
exactly once: the claim is atomic, a packet whose worker died (``kill -9``) is taken over once its
lease runs out (``worker_lease_seconds``), and a slow but live worker keeps its packet. Packets of
one environment are taken oldest first and may merge in any order: the merge places each packet's
facts at its round's time, so the graph ends as if they had merged in round order.

Stopping (SIGTERM, SIGINT) is graceful: no new packet is taken, the packets being extracted get
``shutdown_timeout_seconds`` to finish, and any still running then is released back to pending
for another worker.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from worldgraph.errors import InvalidInputError, NotSupportedError
from worldgraph.kg import lease
from worldgraph.world.updater import WorldUpdater, llm_configured, now_iso

log = logging.getLogger("worldgraph.worker")

__all__ = ["WorldWorker", "WorkerStats"]

# Packets released as pending because the LLM was unreachable wait this long before a retry, so
# a worker does not hammer an LLM that is down.
LLM_BACKOFF_SECONDS = 5.0


@dataclass
class WorkerStats:
    merged: list[str] = field(default_factory=list)  # scene ids this worker merged (or ended with nothing to merge)
    failed: list[str] = field(default_factory=list)  # scene ids left failed (invalid deltas)
    deferred: list[str] = field(default_factory=list)  # released as pending (LLM unreachable)
    lost: list[str] = field(default_factory=list)  # taken over by another worker after this one's lease ran out
    released: list[str] = field(default_factory=list)  # handed back as pending at shutdown
    graph_versions: list[int] = field(default_factory=list)  # graph_version of each merge that changed the graph

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) for k, v in self.__dict__.items()}


class WorldWorker:
    """Takes packets of ``tenant_id`` (None: every tenant) and ``env_name`` (None: every
    environment) with ``concurrency`` threads, polling every ``poll_seconds`` when idle."""

    def __init__(self, world: WorldUpdater, tenant_id: str | None = None, env_name: str | None = None,
                 concurrency: int = 1, poll_seconds: float = 1.0) -> None:
        if not llm_configured():
            raise NotSupportedError("worldgraph worker extracts scene packets with an LLM: set OPENAI_BASE_URL "
                                    "(and OPENAI_API_KEY, WORLDGRAPH_LLM_MODEL) for an OpenAI-compatible server")
        if concurrency < 1:
            raise InvalidInputError("concurrency", "must be at least 1", concurrency)
        self.world = world
        self.tenant_id = tenant_id
        self.env_name = env_name
        self.concurrency = concurrency
        self.poll_seconds = poll_seconds
        self.stats = WorkerStats()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._not_before: dict[str, float] = {}  # scene id -> monotonic time before which it is skipped
        self._threads: list[threading.Thread] = []
        self._once = False

    def run(self, once: bool = False) -> WorkerStats:
        """Work until ``stop()`` (or, with ``once``, until nothing is left that this worker may
        take); then give running packets ``shutdown_timeout_seconds`` and release the rest."""
        self._once = once
        self._threads = [threading.Thread(target=self._loop, args=(once,), name=f"worldgraph-worker-{i}", daemon=True)
                         for i in range(self.concurrency)]
        for t in self._threads:
            t.start()
        while any(t.is_alive() for t in self._threads) and not self._stopping.is_set():
            self._stopping.wait(0.2)
        self._finish()
        return self.stats

    def stop(self) -> None:
        """Take no new packet (safe from a signal handler)."""
        self._stopping.set()

    # ------------------------------------------------------------------ internals
    def _finish(self) -> None:
        deadline = time.monotonic() + self.world.config.shutdown_timeout_seconds
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        for hold in self.world.leases.held():
            if self.world.store.release_scene_lease(hold.tenant_id, hold.scene_id, hold.owner, "pending",
                                                 "released by a worker shutting down", now_iso()):
                log.warning("released scene %s back to pending (worker shutting down)", hold.scene_id)
                with self._lock:
                    self.stats.released.append(hold.scene_id)

    def _loop(self, once: bool) -> None:
        while not self._stopping.is_set():
            try:
                taken = self._take()
            except Exception as exc:  # noqa: BLE001 - the store is unreachable: wait and try again
                log.warning("worker could not read the packet queue (%s); retrying in %.1f s", exc, self.poll_seconds)
                self._stopping.wait(self.poll_seconds)
                continue
            if taken is None:
                if once:
                    return
                self._stopping.wait(self.poll_seconds)
                continue
            self._run(*taken)

    def _take(self) -> tuple[Any, str] | None:
        """Claim the oldest packet this worker may take; None when there is none."""
        now, clock = now_iso(), time.monotonic()
        for scene in self.world.store.list_scenes(self.tenant_id, self.env_name, statuses=["pending", "running"]):
            if not lease.claimable(scene, now) or self._not_before.get(scene["id"], 0.0) > clock:
                continue
            owner = lease.new_owner()
            taken = self.world.store.claim_scene_lease(scene["tenant_id"], scene["id"], owner,
                                                    self.world.leases.until(), now)
            if taken is not None:
                return taken, owner
        return None

    def _run(self, scene: Any, owner: str) -> None:
        sid = scene["id"]
        try:
            report = self.world.run_claimed(scene, owner)
        except Exception:  # noqa: BLE001 - run_claimed left the packet failed; the worker goes on
            log.exception("world update of scene %s failed", sid)
            with self._lock:
                self.stats.failed.append(sid)
            return
        current = self.world.store.get_scene(scene["tenant_id"], sid) or {}
        with self._lock:
            if (report.skipped or "").startswith(f"scene {sid} was taken over"):
                self.stats.lost.append(sid)
            elif report.ok:
                self.stats.merged.append(sid)
                if report.graph_version is not None and not report.skipped:
                    self.stats.graph_versions.append(int(report.graph_version))
                log.info("merged scene %s of %s/%s (graph_version %s)", sid, scene["tenant_id"], scene["env_name"],
                         report.graph_version)
            elif current.get("status") == "pending":  # the LLM is unreachable: back off
                self.stats.deferred.append(sid)
                self._not_before[sid] = time.monotonic() + (float("inf") if self._once else
                                                            max(self.poll_seconds, LLM_BACKOFF_SECONDS))
                log.warning("scene %s waits for the LLM: %s", sid, report.error)
            else:
                self.stats.failed.append(sid)
                log.warning("scene %s failed: %s", sid, report.error)
