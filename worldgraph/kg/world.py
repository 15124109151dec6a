"""The world-graph update flow: round -> (flag) -> durable scene packet -> LLM delta -> merge.

A flagged round's packet is written to the store (status ``pending``) before any LLM call, so
a crash or an LLM outage loses nothing: ``retry`` re-runs pending and failed packets. The
scenes table is the durable queue: whoever claims a packet (``claim_scene``: pending/failed ->
running, atomically, across processes) extracts and merges it, exactly once; the background
threads (config ``world_workers``), ``update_world``, ``world retry`` and other processes (a
``worldgraph worker`` too) all go through that claim. Merges are ordered by round without
waiting for one another: the merge places a packet's facts at the round's time (the scene's
``created_at``), so whatever order extractions finish in, the graph ends as if they had merged in
round order (``merge_base``). Each merge reads its view and writes its plan in one store
transaction holding the environment's write lock (``GraphStore.merge``), so two processes never
plan from the same graph and no update is lost. The MergeReport is kept with the scene:
``update_world`` on a packet another worker holds waits for that merge and returns its report.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from worldgraph.errors import (DeltaValidationError, ExtractionError, InvalidInputError, NotFoundError,
                               PartialWriteError)
from worldgraph.kg.curiosity import AgentRound, RoundHistory, build_scene_packet, parse_curiosity
from worldgraph.kg.delta import ParsedDelta, parse_delta
from worldgraph.kg.merge import plan_merge, referenced
from worldgraph.kg.records import DroppedItem, MergePlan, MergeReport, SceneRecord
from worldgraph.memory.record import check_tenant

if TYPE_CHECKING:
    from worldgraph.service import WorldModel

log = logging.getLogger("worldgraph.world")

ENV_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_FAILURE_RE = re.compile(
    r"\b(can't|cannot|can not|couldn't|fail(?:s|ed)?|nothing happens|not possible|invalid|"
    r"don't understand|unknown command|is locked|won't)\b", re.I)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


class WorldUpdater:
    def __init__(self, wm: "WorldModel") -> None:
        self.wm = wm
        self.history = RoundHistory(wm.config.history_rounds)
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()
        self._extractor: Any = None
        self._warned_no_llm = False
        self.auto_update = True  # hand flagged packets to the background worker

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def check_env(env_name: Any) -> str:
        if not isinstance(env_name, str) or not ENV_RE.fullmatch(env_name):
            raise InvalidInputError(
                "env_name", "must be 1-128 characters of letters, digits, '_', '-' or '.', starting with a letter "
                "or digit (it names a folder of the snapshot)", env_name)
        return env_name

    @property
    def extractor(self) -> Any:
        if self._extractor is None:
            from worldgraph.kg.extractor import DeltaExtractor

            self._extractor = DeltaExtractor(self.wm.config)
        return self._extractor

    # ------------------------------------------------------------------ rounds
    def observe_round(self, tenant_id: str, env_name: str, raw_round: Any) -> SceneRecord | None:
        check_tenant(tenant_id)
        self.check_env(env_name)
        rnd = AgentRound.from_input(raw_round)
        flagged, reason = parse_curiosity(rnd.response)
        agent_id = raw_round.get("agent_id") if isinstance(raw_round, dict) else None
        episode_id = self.wm.record_experience(tenant_id, round_experience(env_name, rnd, reason, agent_id))
        excerpt = self.history.excerpt(tenant_id, env_name)
        self.history.add(tenant_id, env_name, rnd)
        if not flagged:
            return None
        scene = build_scene_packet(tenant_id, env_name, rnd, reason, excerpt, str(uuid.uuid4()), now_iso(),
                                   episode_id=episode_id)
        try:
            self.wm.store.upsert_scene(scene)  # durable before any LLM call
        except Exception as exc:  # the episode is committed: say so, so that a retry does not record it twice
            raise PartialWriteError(f"round {rnd.round} was recorded, but its scene packet could not be stored "
                                    f"({exc})", {"episode_ids": [episode_id]}) from exc
        if not self.auto_update:
            pass  # the caller merges it (replay of a log that carries its deltas)
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
            while len(self._threads) < self.wm.config.world_workers:
                thread = threading.Thread(target=self._run, name=f"worldgraph-updates-{len(self._threads)}", daemon=True)
                thread.start()
                self._threads.append(thread)
        self._queue.put((tenant_id, scene_id))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                scene = self.wm.store.get_scene(*item)
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

    def shutdown(self) -> None:
        self.wait()
        alive = [t for t in self._threads if t.is_alive()]
        for _ in alive:
            self._queue.put(None)
        for thread in alive:
            thread.join(timeout=10)

    # ------------------------------------------------------------------ updates
    def update(self, packet: Any) -> MergeReport:
        """Extract (LLM) and merge one scene packet now, and return its MergeReport. A packet
        another worker holds is not run twice: this waits for that merge and returns its report."""
        tenant_id, scene_id = _packet_ids(packet)
        stored = self.wm.store.get_scene(tenant_id, scene_id)
        if stored is None:
            if not isinstance(packet, dict):
                raise NotFoundError("scene", scene_id, "give the packet returned by observe_round")
            stored = cast(SceneRecord, {"status": "pending", **packet})
            self.wm.store.upsert_scene(stored)
        scene: SceneRecord = stored
        env = scene["env_name"]
        report = MergeReport(tenant_id=tenant_id, env_name=env, scene_id=scene_id)
        skipped = self._claim(scene)
        if skipped is not None:
            return skipped
        try:
            summary = self._summary(tenant_id, env, scene)
            delta = self.extractor.extract(scene, summary, check=lambda d: self._dry_run(tenant_id, env, d, scene))
            return self._merge(tenant_id, env, delta, scene)
        except ExtractionError as exc:
            from worldgraph.kg.extractor import LLMUnavailableError

            # Unreachable / not configured: nothing is wrong with the packet, it waits for retry.
            status = "pending" if isinstance(exc, LLMUnavailableError) or not llm_configured() else "failed"
            self._fail(scene, status, str(exc))
            report.ok, report.error = False, str(exc)
            return report
        except DeltaValidationError as exc:
            self._fail(scene, "failed", str(exc))
            report.ok, report.error = False, str(exc)
            return report
        except BaseException as exc:
            self._fail(scene, "failed", f"{type(exc).__name__}: {exc}")
            raise

    def _dry_run(self, tenant_id: str, env: str, delta: ParsedDelta, scene: SceneRecord) -> list[DroppedItem]:
        """What the merge would drop, beyond what parsing dropped (unresolved refs, ...): asked
        about in the extractor's repair round. A read, no write."""
        ids, names = referenced(tenant_id, env, delta, self.wm.config.max_delta_items)
        view = self.wm.store.load_view(tenant_id, env, ids, names)
        _, report = plan_merge(view, delta, scene, now_iso(), app_name=self.wm.config.app_name)
        # a state whose entity_ref resolves to nothing is kept without its entity: worth asking too
        loose = [DroppedItem("state", n.index, n.reason, delta.states[n.index].raw) for n in report.notes
                 if n.kind == "state" and n.reason.startswith("entity_ref") and n.index < len(delta.states)]
        return report.dropped + loose

    def _fail(self, scene: SceneRecord, status: str, error: str) -> None:
        scene = dict(scene)  # type: ignore[assignment]
        scene["status"], scene["error"], scene["updated_at"] = status, error, now_iso()
        self.wm.store.upsert_scene(scene)

    def _summary(self, tenant_id: str, env: str, scene: SceneRecord) -> str:
        from worldgraph.kg.summary import render_summary, summarize_graph

        graph = self.wm.store.world_graph(tenant_id, env)
        return render_summary(summarize_graph(graph, scene, self.wm.config.summary_max_items))

    def apply_delta(self, tenant_id: str, env_name: str, delta: Any, scene: Any = None) -> MergeReport:
        check_tenant(tenant_id)
        self.check_env(env_name)
        parsed = parse_delta(delta, max_items=self.wm.config.max_delta_items)
        scene_rec: SceneRecord | None = None
        stored = self._stored_scene(tenant_id, scene)
        if stored is not None:
            # A packet from observe_round: merge this delta as its update (claimed, so never twice).
            skipped = self._claim(stored)
            return skipped if skipped is not None else self._merge(tenant_id, env_name, parsed, stored)
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
                episode_id=scene.get("episode_id"))
            scene_rec["status"] = "new"  # not stored: written only if the delta changes the graph
        return self._merge(tenant_id, env_name, parsed, scene_rec)

    def _stored_scene(self, tenant_id: str, scene: Any) -> SceneRecord | None:
        if isinstance(scene, dict) and isinstance(scene.get("id"), str):
            return self.wm.store.get_scene(tenant_id, scene["id"])
        return None

    def _merge(self, tenant_id: str, env: str, delta: ParsedDelta, scene: SceneRecord | None) -> MergeReport:
        cfg = self.wm.config
        ids, names = referenced(tenant_id, env, delta, cfg.max_delta_items)
        made: list[MergeReport] = []

        def planner(view: Any) -> MergePlan:
            plan, report = plan_merge(view, delta, scene, now_iso(), app_name=cfg.app_name)
            plan.report = report.to_dict()
            made[:] = [report]
            return plan

        meta = self.wm.store.merge(tenant_id, env, ids, names, planner)
        report = made[-1]
        report.graph_version = (meta or {}).get("graph_version")
        return report

    def _claim(self, scene: SceneRecord) -> MergeReport | None:
        """Take the scene for this update (None), or the report of its merge by another worker
        (waited for while it runs), or a report saying why it is not merged again.

        The claim is stamped (``updated_at``) so that a process that dies mid-update leaves a
        scene that ``retry(stale_after=...)`` can recognise as interrupted and run again."""
        tenant_id, scene_id = scene["tenant_id"], scene["id"]
        if self.wm.store.claim_scene(tenant_id, scene_id):
            scene["status"], scene["updated_at"] = "running", now_iso()
            self.wm.store.upsert_scene(scene)
            return None
        current = self._wait_while_running(tenant_id, scene_id) or scene
        stored = self.wm.store.get_scene_report(tenant_id, scene_id)
        if stored is not None and current.get("status") == "merged":
            done = _report_from_dict(stored)
            done.skipped = f"scene {scene_id} was merged already (not twice); this is the report of that merge"
            return done
        report = MergeReport(tenant_id=tenant_id, env_name=scene["env_name"], scene_id=scene_id)
        report.ok = current.get("status") == "merged"
        report.error = current.get("error")
        report.skipped = f"scene {scene_id} is {current.get('status')}; it is not merged twice"
        return report

    def _wait_while_running(self, tenant_id: str, scene_id: str) -> SceneRecord | None:
        deadline = time.monotonic() + self.wm.config.update_wait_seconds
        delay = 0.01
        while True:
            current = self.wm.store.get_scene(tenant_id, scene_id)
            if current is None or current.get("status") != "running" or time.monotonic() >= deadline:
                return current
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def retry(self, tenant_id: str | None = None, env_name: str | None = None,
              stale_after: float | None = 600.0) -> list[MergeReport]:
        """Re-run pending and failed packets; with ``stale_after`` (seconds), also packets left
        "running" longer than that by a process that died mid-update."""
        if stale_after is not None:
            cutoff = datetime.fromtimestamp(time.time() - stale_after, timezone.utc).isoformat(timespec="microseconds")
            for scene in self.wm.store.list_scenes(tenant_id, env_name, statuses=["running"]):
                if scene.get("updated_at", "") < cutoff:
                    self._fail(scene, "pending", f"interrupted while running (no progress since "
                                                 f"{scene.get('updated_at')}); queued again by retry")
        scenes = self.wm.store.list_scenes(tenant_id, env_name, statuses=["pending", "failed"])
        return [self.update(s) for s in scenes]

    # ------------------------------------------------------------------ snapshots
    def export(self, tenant_id: str, env_name: str, out_dir: Path) -> Path:
        from worldgraph.export.snapshot import snapshot_dir, write_snapshot

        check_tenant(tenant_id)
        self.check_env(env_name)
        graph = self.wm.store.world_graph(tenant_id, env_name)
        if graph.get("meta") is None and not graph["nodes"] and not graph["scenes"]:
            known = ", ".join(self.wm.store.environments(tenant_id)) or "none yet"
            raise NotFoundError("environment", env_name, f"tenant {tenant_id!r} has no world graph there "
                                f"(environments: {known})")
        app = (graph.get("meta") or {}).get("app_name") or self.wm.config.app_name
        return write_snapshot(graph, snapshot_dir(out_dir, tenant_id, app, env_name))

    def import_snapshot(self, tenant_id: str, path: Path) -> dict[str, Any]:
        from worldgraph.export.snapshot import read_snapshot

        check_tenant(tenant_id)
        graph = read_snapshot(path)
        meta = graph.get("meta") or {}
        env = self.check_env(meta.get("env_name"))
        for key in ("nodes", "edges", "rules", "scenes"):
            for rec in graph.get(key, []):
                if rec.get("tenant_id", tenant_id) != tenant_id:
                    rec["tenant_id"] = tenant_id
        if meta.get("tenant_id", tenant_id) != tenant_id:
            meta["tenant_id"] = tenant_id
        self.wm.store.replace_world(tenant_id, env, graph)
        return {"tenant_id": tenant_id, "env_name": env,
                "counts": {k: len(graph.get(k, [])) for k in ("nodes", "edges", "rules", "scenes")}}


def llm_configured() -> bool:
    return bool(os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))


def replay_log(wm: "WorldModel", tenant_id: str, env_name: str, log_path: str | Path,
               use_shipped_deltas: bool | None = None, progress: Any = None) -> dict[str, Any]:
    """Feed an agent log (JSONL, one round per line) through observe_round.

    Flagged rounds are extracted by the LLM when one is configured; otherwise (or with
    ``use_shipped_deltas``) a line's own ``delta`` (what a model returned for it) is merged.
    """
    import json

    lines = Path(log_path).read_text(encoding="utf-8").splitlines()
    rounds = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                rounds.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{log_path}:{n}", f"not valid JSON ({exc.msg})") from None
    offline = (not llm_configured()) if use_shipped_deltas is None else use_shipped_deltas
    summary: dict[str, Any] = {"rounds": 0, "flagged": 0, "merged": 0, "pending": 0, "failed": 0, "reports": []}
    scene_ids: list[str] = []
    auto_update, wm.world.auto_update = wm.world.auto_update, not offline
    try:
        _replay(wm, tenant_id, env_name, str(log_path), rounds, offline, summary, scene_ids, progress)
    finally:
        wm.world.auto_update = auto_update
    wm.wait_for_updates()
    for sid in scene_ids:
        scene = wm.store.get_scene(tenant_id, sid) or {}
        status = scene.get("status")
        summary["merged" if status == "merged" else "failed" if status == "failed" else "pending"] += 1
    return summary


def _replay(wm: "WorldModel", tenant_id: str, env_name: str, log_path: str, rounds: list[Any], offline: bool,
            summary: dict[str, Any], scene_ids: list[str], progress: Any) -> None:
    for i, rnd in enumerate(rounds, 1):
        if not isinstance(rnd, dict):
            raise InvalidInputError(f"{log_path} round {i}", "must be a JSON object")
        packet = wm.observe_round(tenant_id, env_name, {k: v for k, v in rnd.items() if k != "delta"})
        summary["rounds"] += 1
        if packet is not None:
            summary["flagged"] += 1
            scene_ids.append(packet["id"])
            if offline and rnd.get("delta") is not None:
                summary["reports"].append(wm.apply_delta(tenant_id, env_name, rnd["delta"], scene=packet).to_dict())
        if progress:
            progress(i, len(rounds))


def round_experience(env_name: str, rnd: AgentRound, reason: str | None, agent_id: str | None) -> dict[str, Any]:
    """An agent round as an episode: the action is the approach, the observation the outcome."""
    outcome_text = " ".join(x for x in (rnd.feedback, rnd.after_observation) if x)
    failed = bool(_FAILURE_RE.search(outcome_text))
    return {
        "agent_id": agent_id or f"{env_name}-agent",
        "agent_role": "explorer",
        "task_type": "environment_round",
        "task_description": f"{env_name} round {rnd.round}: {rnd.action or '(no action)'}",
        "input_summary": rnd.before_observation,
        "approach_taken": rnd.action,
        "actions_taken": [rnd.action] if rnd.action else [],
        "outcome": "failure" if failed else "success",
        "error_message": outcome_text[:500] if failed else None,
        "learnings": [reason] if reason else [],
        "confidence_score": 0.5,
    }


def _report_from_dict(data: dict[str, Any]) -> MergeReport:
    fields = {k: v for k, v in data.items() if k not in ("dropped", "notes")}
    report = MergeReport(**fields)
    report.dropped = [DroppedItem(**d) for d in data.get("dropped") or []]
    report.notes = [DroppedItem(**d) for d in data.get("notes") or []]
    return report


def _packet_ids(packet: Any) -> tuple[str, str]:
    if hasattr(packet, "model_dump"):
        packet = packet.model_dump()
    if not isinstance(packet, dict):
        raise InvalidInputError("packet", f"must be the scene packet dict returned by observe_round, got "
                                f"{type(packet).__name__}")
    for key in ("tenant_id", "id"):
        if not isinstance(packet.get(key), str) or not packet[key]:
            raise InvalidInputError(f"packet.{key}", "is required (give the packet returned by observe_round)")
    return packet["tenant_id"], packet["id"]
