"""The world-graph update flow: round -> (flag) -> durable scene packet -> LLM delta -> merge.

A flagged round's packet is written to the store (status ``pending``) before any LLM call, so
a crash or an LLM outage loses nothing: ``retry`` re-runs pending and failed packets. The
scenes table is the durable queue: whoever claims a packet (``claim_scene``: pending/failed ->
running, atomically, across processes) extracts and merges it, exactly once; the background
threads (config ``world_workers``), ``update_world``, ``world retry`` and other processes (a
``worldgraph worker`` too) all go through that claim. Merges are ordered by round without
waiting for one another: the merge places a packet's facts at the round's time (the scene's
``created_at``), so whatever order extractions finish in, the graph ends as if they had merged in
round order (``merge.state``). Each merge reads its view and writes its plan in one store
transaction holding the environment's write lock (``WorldStore.merge``), so two processes never
plan from the same graph and no update is lost. The MergeReport is kept with the scene:
``update_world`` on a packet another worker holds waits for that merge and returns its report.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, cast

from worldgraph.clock import now_iso, seconds_left
from worldgraph.config import WorldGraphConfig, llm_configured
from worldgraph.errors import (
    DeltaValidationError,
    ExtractionError,
    InvalidInputError,
    LeaseLostError,
    NotFoundError,
    PartialWriteError,
)
from worldgraph.kg import lease
from worldgraph.kg.records import DroppedItem, MergePlan, MergeReport, SceneRecord
from worldgraph.kg.store import WorldStore
from worldgraph.names import check_env, check_tenant
from worldgraph.world.curiosity import AgentRound, RoundHistory, build_scene_packet, parse_curiosity
from worldgraph.world.delta.parse import ParsedDelta, parse_delta
from worldgraph.world.lease_keeper import LeaseKeeper
from worldgraph.world.merge.engine import plan_merge, referenced
from worldgraph.world.rounds import packet_ids, report_from_dict, round_experience

__all__ = ["WorldUpdater", "RecordRound", "round_experience", "llm_configured", "now_iso"]

log = logging.getLogger("worldgraph.world")



# Records an agent round's experience (tenant_id, experience dict) and returns its episode id:
# the service's record_experience, so a round is stored, embedded and indexed like any episode.
RecordRound = Callable[[str, dict[str, Any]], str]
# Which of a tenant's episodes (ids) are still stored: the rounds of the history that were not forgotten.
Alive = Callable[[str, list[str]], set[str]]


class WorldUpdater:
    """Turns flagged rounds into merged world-graph updates. It needs the store, the settings and
    a way to record a round as an episode, nothing more: the service hands it those."""

    def __init__(self, store: WorldStore, config: WorldGraphConfig, record_round: RecordRound,
                 alive: Alive | None = None) -> None:
        self.store = store
        self.config = config
        self.record_round = record_round
        self.alive = alive
        self.history = RoundHistory(config.history_rounds)
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()
        self._extractor: Any = None
        self._warned_no_llm = False
        self.auto_update = True  # hand flagged packets to the background worker
        self.leases = LeaseKeeper(store, config.worker_lease_seconds)
        # called after every merge that changed the graph, with its plan and the new graph
        # version (the service indexes the plan's records for search_world)
        self.on_merged: Callable[[MergePlan, int | None], None] | None = None

    # ------------------------------------------------------------------ helpers
    check_env = staticmethod(check_env)  # the one rule (worldgraph.names); kept as a method for callers

    @property
    def extractor(self) -> Any:
        if self._extractor is None:
            from worldgraph.world.extractor import DeltaExtractor

            self._extractor = DeltaExtractor(self.config)
        return self._extractor

    # ------------------------------------------------------------------ rounds
    def observe_round(self, tenant_id: str, env_name: str, raw_round: Any) -> SceneRecord | None:
        check_tenant(tenant_id)
        self.check_env(env_name)
        rnd = AgentRound.from_input(raw_round)
        flagged, reason = parse_curiosity(rnd.response)
        agent_id = raw_round.get("agent_id") if isinstance(raw_round, dict) else None
        episode_id = self.record_round(tenant_id, round_experience(env_name, rnd, reason, agent_id))
        if flagged and self.alive is not None:
            # a round forgotten meanwhile (by any process) leaves the history before a scene quotes it
            kept = self.history.episode_ids(tenant_id, env_name)
            alive = self.alive(tenant_id, kept) if kept else set()
            self.history.forget_episodes(tenant_id, [e for e in kept if e not in alive])
        excerpt, quoted_rounds = self.history.history_of(tenant_id, env_name)
        self.history.add(tenant_id, env_name, rnd, episode_id)
        if not flagged:
            return None
        scene = build_scene_packet(tenant_id, env_name, rnd, reason, excerpt, str(uuid.uuid4()), now_iso(),
                                   episode_id=episode_id, history_episode_ids=quoted_rounds)
        try:
            self.store.upsert_scene(scene)  # durable before any LLM call
        except Exception as exc:  # the episode is committed: say so, so that a retry does not record it twice
            raise PartialWriteError(f"round {rnd.round} was recorded, but its scene packet could not be stored "
                                    f"({exc})", {"episode_ids": [episode_id]}) from exc
        if not self.auto_update:
            pass  # the caller merges it (replay of a log that carries its deltas)
        elif not self.config.world_background_updates:
            pass  # left pending for `worldgraph worker` processes
        elif llm_configured():
            self._enqueue(tenant_id, scene["id"])
        elif not self._warned_no_llm:
            self._warned_no_llm = True
            log.warning("no LLM configured (OPENAI_API_KEY / OPENAI_BASE_URL): scene packets stay pending; "
                        "run `worldgraph world retry` once one is set")
        return scene

    # ------------------------------------------------------------------ background worker
    def _enqueue(self, tenant_id: str, scene_id: str) -> None:
        with self._start_lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            while len(self._threads) < self.config.world_workers:
                thread = threading.Thread(target=self._run, name=f"worldgraph-updates-{len(self._threads)}",
                                          daemon=True)
                thread.start()
                self._threads.append(thread)
        self._queue.put((tenant_id, scene_id))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                scene = self.store.get_scene(*item)
                if scene is not None:
                    self.update(scene)
            except Exception:  # noqa: BLE001 - the scene records the error; the worker lives on
                log.exception("background world update of scene %s failed", item[1] if item else None)
            finally:
                self._queue.task_done()

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def shutdown(self, timeout: float | None = None) -> None:
        """Let the queued and running background updates finish; ``timeout`` (s) bounds the wait:
        then the packets still held by this process go back to ``pending`` (best effort: with
        the store gone too their lease runs out instead, and any worker or ``world retry`` takes
        them over), and the update threads are left to the process's exit (daemons)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        # half the budget waits for the updates, the rest is kept for handing packets back: a
        # wait that used all of it left the hand-back no time on a busy machine
        finished = self.wait(None if timeout is None else timeout / 2)
        alive = [t for t in self._threads if t.is_alive()]
        for _ in alive:
            self._queue.put(None)
        if not finished:
            self._hand_back(deadline)
        for thread in alive:
            thread.join(timeout=10 if deadline is None else max(0.0, deadline - time.monotonic()))
        self.leases.stop()

    def _hand_back(self, deadline: float | None) -> None:
        """Release this process's held packets as pending, in a thread bounded by ``deadline``
        (a store that stopped answering must not hold the shutdown)."""
        def release() -> None:
            for hold in self.leases.held():
                try:
                    if self.store.release_scene_lease(hold.tenant_id, hold.scene_id, hold.owner, "pending",
                                                      "released by a process shutting down", now_iso()):
                        log.warning("released scene %s back to pending (shutting down)", hold.scene_id)
                except Exception as exc:  # noqa: BLE001 - its lease runs out instead
                    log.warning("could not release scene %s (%s); it goes back when its lease runs out",
                                hold.scene_id, exc)

        thread = threading.Thread(target=release, name="worldgraph-hand-back", daemon=True)
        thread.start()
        thread.join(seconds_left(deadline))

    # ------------------------------------------------------------------ updates
    def update(self, packet: Any, wait: bool = True) -> MergeReport:
        """Extract (LLM) and merge one scene packet now, and return its MergeReport. A packet
        another worker holds is not run twice: this waits for that merge and returns its report
        (``wait=False``: returns at once, the report saying it is running elsewhere)."""
        tenant_id, scene_id = packet_ids(packet)
        stored = self.store.get_scene(tenant_id, scene_id)
        if stored is None:
            if not isinstance(packet, dict):
                raise NotFoundError("scene", scene_id, "give the packet returned by observe_round")
            stored = cast(SceneRecord, {"status": "pending", **packet})
            self.store.upsert_scene(stored)
        claimed = self._claim(stored, wait)
        if isinstance(claimed, MergeReport):
            return claimed
        return self.run_claimed(*claimed)

    def run_claimed(self, scene: SceneRecord, owner: str) -> MergeReport:
        """Extract and merge a scene taken with ``claim_scene_lease`` by ``owner``, renewing the
        lease meanwhile; the merge is fenced by the lease, so a holder that lost it writes nothing."""
        tenant_id, scene_id, env = scene["tenant_id"], scene["id"], scene["env_name"]
        report = MergeReport(tenant_id=tenant_id, env_name=env, scene_id=scene_id)
        with self.leases.hold(tenant_id, scene_id, owner):
            try:
                summary = self._summary(tenant_id, env, scene)
                delta = self.extractor.extract(scene, summary,
                                               check=lambda d: self._dry_run(tenant_id, env, d, scene))
                return self._merge(tenant_id, env, delta, scene, fence=(scene_id, owner))
            except LeaseLostError as exc:
                report.ok, report.error = False, str(exc)
                report.skipped = f"scene {scene_id} was taken over by another worker; it is not merged twice"
                return report
            except ExtractionError as exc:
                from worldgraph.world.extractor import LLMUnavailableError

                # Unreachable / not configured: nothing is wrong with the packet, it waits for retry.
                status = "pending" if isinstance(exc, LLMUnavailableError) or not llm_configured() else "failed"
                self.release(scene, owner, status, str(exc))
                report.ok, report.error = False, str(exc)
                return report
            except DeltaValidationError as exc:
                self.release(scene, owner, "failed", str(exc))
                report.ok, report.error = False, str(exc)
                return report
            except BaseException as exc:
                self.release(scene, owner, "failed", f"{type(exc).__name__}: {exc}")
                raise

    def release(self, scene: SceneRecord, owner: str, status: str, error: str | None) -> bool:
        """Let go of ``owner``'s lease on the scene, leaving it ``status``; False if it was lost."""
        return bool(self.store.release_scene_lease(scene["tenant_id"], scene["id"], owner, status, error,
                                                      now_iso()))

    def _dry_run(self, tenant_id: str, env: str, delta: ParsedDelta, scene: SceneRecord) -> list[DroppedItem]:
        """What the merge would drop, beyond what parsing dropped (unresolved refs, ...): asked
        about in the extractor's repair round. A read, no write."""
        ids, names = referenced(tenant_id, env, delta)
        view = self.store.load_view(tenant_id, env, ids, names)
        _, report = plan_merge(view, delta, scene, now_iso(), app_name=self.config.app_name)
        # a state whose entity_ref resolves to nothing is kept without its entity: worth asking too
        loose = [DroppedItem("state", n.index, n.reason, delta.states[n.index].raw) for n in report.notes
                 if n.kind == "state" and n.reason.startswith("entity_ref") and n.index < len(delta.states)]
        return report.dropped + loose

    def _fail(self, scene: SceneRecord, status: str, error: str) -> None:
        scene = dict(scene)  # type: ignore[assignment]
        scene["status"], scene["error"], scene["updated_at"] = status, error, now_iso()
        self.store.upsert_scene(scene)

    def _summary(self, tenant_id: str, env: str, scene: SceneRecord) -> str:
        from worldgraph.world.summary import render_summary, summarize_graph

        graph = self.store.world_graph(tenant_id, env)
        return render_summary(summarize_graph(graph, scene, self.config.summary_max_items))

    def apply_delta(self, tenant_id: str, env_name: str, delta: Any, scene: Any = None) -> MergeReport:
        check_tenant(tenant_id)
        self.check_env(env_name)
        parsed = parse_delta(delta, max_items=self.config.max_delta_items)
        scene_rec: SceneRecord | None = None
        stored = self._stored_scene(tenant_id, scene)
        if stored is not None:
            # A packet from observe_round: merge this delta as its update (claimed, so never twice).
            claimed = self._claim(stored)
            if isinstance(claimed, MergeReport):
                return claimed
            taken, owner = claimed
            try:
                return self._merge(tenant_id, env_name, parsed, taken, fence=(taken["id"], owner))
            except BaseException as exc:
                self.release(taken, owner, "failed", f"{type(exc).__name__}: {exc}")
                raise
        if scene is not None:
            if isinstance(scene, str):
                scene = {"trigger_reason": scene}
            if not isinstance(scene, dict):
                raise InvalidInputError("scene", "must be None, a scene packet dict or a trigger reason string", scene)
            rnd = AgentRound.from_input({"round": scene.get("current_round", 0), **{
                k: scene[k] for k in ("action", "before_observation", "after_observation", "feedback",
                                      "admissible_commands") if k in scene},
                "response": scene.get("latest_response", "")})
            scene_rec = build_scene_packet(
                tenant_id, env_name, rnd, scene.get("trigger_reason"), scene.get("recent_history_excerpt", ""),
                scene.get("id") or str(uuid.uuid4()), scene.get("created_at") or now_iso(),
                episode_id=scene.get("episode_id"), history_episode_ids=_ids(scene.get("history_episode_ids")))
            scene_rec["status"] = "new"  # not stored: written only if the delta changes the graph
        return self._merge(tenant_id, env_name, parsed, scene_rec)

    def _stored_scene(self, tenant_id: str, scene: Any) -> SceneRecord | None:
        if isinstance(scene, dict) and isinstance(scene.get("id"), str):
            return self.store.get_scene(tenant_id, scene["id"])
        return None

    def _merge(self, tenant_id: str, env: str, delta: ParsedDelta, scene: SceneRecord | None,
               fence: tuple[str, str] | None = None) -> MergeReport:
        cfg = self.config
        if scene is not None and any(k in scene for k in lease.LEASE_KEYS):  # the merged scene keeps no lease
            scene = cast(SceneRecord, {k: v for k, v in scene.items() if k not in lease.LEASE_KEYS})
        ids, names = referenced(tenant_id, env, delta)
        made: list[MergeReport] = []

        plans: list[MergePlan] = []

        def planner(view: Any) -> MergePlan:
            plan, report = plan_merge(view, delta, scene, now_iso(), app_name=cfg.app_name)
            plan.report = report.to_dict()
            made[:] = [report]
            plans[:] = [plan]
            return plan

        meta = self.store.merge(tenant_id, env, ids, names, planner, fence=fence)
        report = made[-1]
        report.graph_version = (meta or {}).get("graph_version")
        if self.on_merged is not None and plans and plans[-1].meta is not None:
            self.on_merged(plans[-1], report.graph_version)
        return report

    def _claim(self, scene: SceneRecord, wait: bool = True) -> tuple[SceneRecord, str] | MergeReport:
        """Take the scene under a new lease: (the stored scene, the lease owner); or else the
        report of its merge by another worker (waited for while that one holds a live lease, up to
        ``update_wait_seconds``; a lease that runs out meanwhile is taken over here), or a report
        saying why it is not merged again."""
        tenant_id, scene_id = scene["tenant_id"], scene["id"]
        deadline = time.monotonic() + (self.config.update_wait_seconds if wait else 0)
        delay = 0.01
        while True:
            owner = lease.new_owner()
            taken = self.store.claim_scene_lease(tenant_id, scene_id, owner, self.leases.until(), now_iso())
            if taken is not None:
                return taken, owner
            current = self.store.get_scene(tenant_id, scene_id) or scene
            if current.get("status") != "running" or time.monotonic() >= deadline:
                break
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        stored = self.store.get_scene_report(tenant_id, scene_id)
        if stored is not None and current.get("status") == "merged":
            done = report_from_dict(stored)
            done.skipped = f"scene {scene_id} was merged already (not twice); this is the report of that merge"
            return done
        report = MergeReport(tenant_id=tenant_id, env_name=scene["env_name"], scene_id=scene_id)
        report.ok = current.get("status") == "merged"
        report.error = current.get("error")
        report.skipped = f"scene {scene_id} is {current.get('status')}; it is not merged twice"
        return report

    def retry(self, tenant_id: str | None = None, env_name: str | None = None,
              stale_after: float | None = 600.0) -> list[MergeReport]:
        """Re-run pending and failed packets, and running ones whose lease ran out (their worker
        died); with ``stale_after`` (seconds), also packets left "running" without a lease longer
        than that (by a version without leases)."""
        if stale_after is not None:
            cutoff = datetime.fromtimestamp(time.time() - stale_after, timezone.utc).isoformat(timespec="microseconds")
            for scene in self.store.list_scenes(tenant_id, env_name, statuses=["running"]):
                if "lease_until" not in scene and scene.get("updated_at", "") < cutoff:
                    self._fail(scene, "pending", f"interrupted while running (no progress since "
                                                 f"{scene.get('updated_at')}); queued again by retry")
        now = now_iso()
        scenes = self.store.list_scenes(tenant_id, env_name, statuses=["pending", "failed", "running"])
        return [self.update(s, wait=False) for s in scenes if lease.claimable(s, now)]


def _ids(value: Any) -> list[str | None] | None:
    """A packet's ``history_episode_ids`` as given (a list of strings), or None."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return None
