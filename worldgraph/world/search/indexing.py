"""Keeping the world index up to date with the store, in the background, as episodes are.

Every merge that changed the graph hands its plan (the records it touched) to ``merged``; a
background thread writes the sentences of those records to the world index (embedding only the
sentences that are new or changed: closing a fact changes the store, not its sentence), once
merges pause (``QUIET_SECONDS``), so new facts are searchable once ``wait`` returns
(``WorldModel.wait_for_updates``). An imported
snapshot replaces an environment whole: ``replaced`` queues a full sync of it.

Each environment's marker row holds the graph version its rows are of. A batch of merges moves
the marker only when it holds every version after it (the versions of one process's merges
follow each other); a search (``ensure``) that finds the marker behind the store's version with no
work of this process queued for that environment (a crash between a merge and its indexing,
another process's merges, a folder made before the world index existed) syncs the environment
in full first: the store's records are read, the sentences compared with the rows, the changed
ones embedded and written, the rows of records the store no longer holds deleted. ``rebuild``
(``reindex``) drops a tenant's table and syncs every environment of it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from worldgraph.kg.records import MergePlan
from worldgraph.kg.store import GraphStore
from worldgraph.memory.embeddings import Embedder
from worldgraph.memory.index.world_index import MARKER, WorldIndex, marker_id
from worldgraph.world.search.texts import Row, began_with, edge_rows, node_row, previous_containments, record_rows, rule_row

log = logging.getLogger("worldgraph.world")

EMBED_BATCH = 256
# A batch is written once merges pause for QUIET_SECONDS, or its first merge is MAX_DELAY_SECONDS
# old, or someone waits for it (wait_for_updates): a burst of merges is not slowed by the writer
# (embedding and writing compete for the same cores) and its records are written in one batch.
QUIET_SECONDS = 0.25
MAX_DELAY_SECONDS = 2.0
NODES_KEPT = 200_000  # nodes of one environment kept by name (more: forgotten, read again)
Held = dict[str, tuple[str, tuple[str, ...]]]  # id -> (sentence, links) as the index holds them


@dataclass
class Pending:
    """The work queued for one environment: the records merges touched, and their versions."""

    node_ids: set[str] = field(default_factory=set)
    edges: dict[str, dict[str, Any]] = field(default_factory=dict)
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)
    versions: set[int] = field(default_factory=set)
    full: bool = False  # sync the environment in full (an import replaced it)


class WorldIndexer:
    """Writes world records' sentences to ``index``, in a background thread."""

    def __init__(self, store: GraphStore, index: WorldIndex, embedder: Embedder) -> None:
        self.store = store
        self.index = index
        self.embedder = embedder
        self._pending: dict[tuple[str, str], Pending] = {}
        self._cond = threading.Condition()
        self._busy = 0  # batches being written
        self._sync = threading.RLock()  # one writer of the index's rows at a time (this process)
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._last = 0.0  # when work was last queued (time.monotonic)
        self._since = 0.0  # when the queue last became non-empty
        self._waiting = 0  # callers of wait()
        self.errors = 0
        self._scenes: dict[tuple[str, str], tuple[str, str]] = {}  # (tenant, scene id) -> (created_at, action)
        # what this process knows without reading: the nodes of each environment (their names, for
        # the sentences of edges) and the rows the index holds (what a batch compares with), so a
        # batch neither reads the store nor the whole table; dropped on a forget, a rebuild, a sync
        self._nodes: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self._held: dict[tuple[str, str], Held] = {}

    # ------------------------------------------------------------------ queueing
    def merged(self, plan: MergePlan, version: int | None) -> None:
        """A merge committed ``plan`` at ``version``: its records' sentences are written in the background."""
        if self.index.read_only or not (plan.nodes or plan.edges or plan.rules):
            return
        with self._cond:
            self._queued()
            p = self._pending.setdefault((plan.tenant_id, plan.env_name), Pending())
            p.node_ids.update(str(n["id"]) for n in plan.nodes)
            known = self._nodes.setdefault((plan.tenant_id, plan.env_name), {})
            if len(known) > NODES_KEPT:
                known.clear()
            known.update({str(n["id"]): dict(n) for n in plan.nodes})
            for e in plan.edges:
                if e.get("relation") != "episodic":
                    p.edges[str(e["id"])] = dict(e)
            for r in plan.rules:
                p.rules[str(r["id"])] = dict(r)
            if version is not None:
                p.versions.add(int(version))
            if plan.scene is not None and plan.scene.get("id"):
                if len(self._scenes) > 50_000:
                    self._scenes.clear()
                self._scenes[(plan.tenant_id, str(plan.scene["id"]))] = (
                    str(plan.scene.get("created_at") or ""), str(plan.scene.get("action") or ""))
            self._start()
            self._cond.notify_all()

    def replaced(self, tenant_id: str, env_name: str) -> None:
        """The environment was replaced whole (an imported snapshot): sync it in full."""
        if self.index.read_only:
            return
        with self._cond:
            self._queued()
            self._pending.setdefault((tenant_id, env_name), Pending()).full = True
            self._start()
            self._cond.notify_all()

    def forgotten(self, tenant_id: str, env_name: str | None = None) -> None:
        """Drop the work queued for a forgotten environment (every one of the tenant's: None) and
        what this process knew of it."""
        with self._cond:
            for cache in (self._pending, self._nodes, self._held):
                for key in [k for k in cache if k[0] == tenant_id and env_name in (None, k[1])]:
                    del cache[key]

    def forget_scenes(self, tenant_id: str) -> None:
        """Drop the cached actions of the tenant's scenes (one was forgotten)."""
        with self._cond:
            for key in [k for k in self._scenes if k[0] == tenant_id]:
                del self._scenes[key]

    def forgotten_rows(self, tenant_id: str, env_name: str | None = None) -> None:
        """Forget what this process knew of the rows the index holds (they are read again)."""
        with self._cond:
            for key in [k for k in self._held if k[0] == tenant_id and env_name in (None, k[1])]:
                del self._held[key]

    def _queued(self) -> None:
        """Note the time work is queued (the lock held)."""
        self._last = time.monotonic()
        if not self._pending:
            self._since = self._last

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stopped = False
            self._thread = threading.Thread(target=self._run, name="worldgraph-world-index", daemon=True)
            self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every queued batch is written; False if ``timeout`` ran out first."""
        with self._cond:
            self._waiting += 1
            self._cond.notify_all()  # the writer stops waiting for a pause
            try:
                return self._cond.wait_for(lambda: not self._pending and self._busy == 0, timeout)
            finally:
                self._waiting -= 1

    def lock(self) -> threading.RLock:
        """The lock every writer of the index's rows in this process holds (a forget takes it so
        that no batch in flight writes the rows of what it forgot after it)."""
        return self._sync

    def pending(self, tenant_id: str, env_name: str) -> bool:
        with self._cond:
            return (tenant_id, env_name) in self._pending or self._busy > 0

    def stop(self, timeout: float | None = None) -> None:
        """Write what is queued (within ``timeout``), then end the thread."""
        self.wait(timeout)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending) or self._stopped)
                while self._pending and not self._stopped and not self._waiting:
                    due = min(self._last + QUIET_SECONDS, self._since + MAX_DELAY_SECONDS) - time.monotonic()
                    if due <= 0:
                        break
                    self._cond.wait(due)
                if not self._pending:  # a forget took it meanwhile
                    if self._stopped:
                        return
                    continue
                key = next(iter(self._pending))
                work = self._pending.pop(key)
                self._busy += 1
            try:
                with self._sync:
                    if work.full:
                        self.sync(*key)
                    else:
                        self._apply(key[0], key[1], work)
            except Exception:  # noqa: BLE001 - the next search finds the marker behind and syncs
                self.errors += 1
                log.exception("writing the world index of %s/%s failed; the next search syncs it", *key)
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()

    # ------------------------------------------------------------------ writing
    def _embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.index.dimensions), np.float32)
        parts = [np.asarray(self.embedder.embed(texts[i:i + EMBED_BATCH]), dtype=np.float32)
                 for i in range(0, len(texts), EMBED_BATCH)]
        return np.concatenate(parts)

    def _write(self, tenant_id: str, env_name: str, rows: dict[str, Row], held: Held,
               gone: Iterable[str], marker: int | None) -> int:
        """Write the rows of ``rows`` (id -> kind, sentence, links) that ``held`` (id -> the
        index's sentence and links) lacks or holds otherwise, delete ``gone``, set the marker;
        returns the rows written. Only new sentences are embedded."""
        changed = [(i, k, t, ln, a) for i, (k, t, ln, a) in rows.items() if held.get(i) != (t, ln)]
        fresh = list(dict.fromkeys(t for _, _, t, _, _ in changed))
        vectors = dict(zip(fresh, self._embed(fresh))) if fresh else {}
        out = [{"id": i, "env_name": env_name, "kind": k, "text": t, "links": list(ln), "action": a,
                "vector": vectors[t]} for i, k, t, ln, a in changed]
        if marker is not None and held.get(marker_id(env_name), ("",))[0] != str(marker):
            out.append({"id": marker_id(env_name), "env_name": env_name, "kind": MARKER, "text": str(marker),
                        "links": [], "vector": np.zeros(self.index.dimensions, np.float32)})
        try:
            self.index.write(tenant_id, out, gone)
        except BaseException:
            self._held.pop((tenant_id, env_name), None)  # not known to be written: read again
            raise
        mine = self._held.setdefault((tenant_id, env_name), dict(held))
        mine.update({r["id"]: (r["text"], tuple(r["links"])) for r in out})
        for gone_id in gone:
            mine.pop(gone_id, None)
        return len(changed)

    def _known_nodes(self, tenant_id: str, env_name: str, node_ids: Iterable[str],
                     edges: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        """The nodes the batch's sentences name: those this process knows (from the merges'
        plans), the others read from the store (after a restart)."""
        with self._cond:
            nodes = dict(self._nodes.get((tenant_id, env_name), {}))
        wanted = set(node_ids)
        for e in edges:
            wanted.update((str(e.get("src_id")), str(e.get("dst_id"))))
        for _ in range(2):  # the nodes, then the entities of states among them
            missing = sorted(wanted - set(nodes))
            if missing:
                found = {k: dict(v) for k, v in self.store.load_view(tenant_id, env_name, missing).nodes.items()}
                nodes.update(found)
                with self._cond:
                    self._nodes.setdefault((tenant_id, env_name), {}).update(found)
            wanted = {str(nodes[n].get("entity_id")) for n in wanted if n in nodes and nodes[n].get("entity_id")}
        return nodes

    def _apply(self, tenant_id: str, env_name: str, work: Pending) -> None:
        """Write the sentences of the records a batch of merges touched, and of the containments
        whose sentence names one of them (a move's row names where the thing was before: the
        containment that ended when it began, which another batch may have closed or begun)."""
        scenes = self._scene_info(tenant_id, work.edges.values())
        others = self._timelines(tenant_id, env_name, work.edges, scenes)
        edges = {**others, **work.edges}
        before = previous_containments(edges.values())
        # the containments outside the batch whose previous one the batch holds: their row changes
        after = {eid: e for eid, e in others.items() if str((before.get(eid) or {}).get("id")) in work.edges}
        scenes.update(self._scene_info(tenant_id, after.values()))
        nodes = self._known_nodes(tenant_id, env_name, work.node_ids, [*work.edges.values(), *after.values(),
                                                                       *(before[eid] for eid in (*work.edges, *after)
                                                                         if eid in before)])
        rows: dict[str, Row] = {nid: node_row(nodes[nid], nodes) for nid in work.node_ids if nid in nodes}
        for eid, e in {**after, **work.edges}.items():
            rows.update(edge_rows(e, nodes, scenes, before.get(eid)))
        for rid, r in work.rules.items():
            rows[rid] = rule_row(r)
        held = self._held.get((tenant_id, env_name))
        if held is None:
            held = self.index.rows_of_env(tenant_id, env_name)
        marker = None
        if work.versions:
            at = _marker(held, env_name)
            if at is None and not held:
                at = 0  # the environment's first rows
            ordered = sorted(work.versions)
            if at is not None and ordered[0] == at + 1 and ordered == list(range(ordered[0], ordered[-1] + 1)):
                marker = ordered[-1]
        self._write(tenant_id, env_name, rows, held, (), marker)

    def _timelines(self, tenant_id: str, env_name: str, edges: dict[str, dict[str, Any]],
                   scenes: dict[str, tuple[str, str]]) -> dict[str, dict[str, Any]]:
        """The containments (from the store) of the children whose timeline the batch holds only
        in part: a containment begun by an action with no previous one in the batch (where was
        the thing before?), or a closed one with no next one in the batch (whose row says it
        left from here?). One store read per batch, none when every move's two halves are in it."""
        mine = [e for e in edges.values() if e.get("relation") == "containment"]
        starts = {(str(e.get("dst_id")), str(e.get("valid_from"))) for e in mine}
        ends = {(str(e.get("dst_id")), str(e.get("valid_to"))) for e in mine if e.get("valid_to") is not None}
        children = set()
        for e in mine:
            child = str(e.get("dst_id"))
            if began_with(e, scenes) and (child, str(e.get("valid_from"))) not in ends:
                children.add(child)
            if e.get("valid_to") is not None and (child, str(e["valid_to"])) not in starts:
                children.add(child)
        if not children:
            return {}
        view = self.store.load_view(tenant_id, env_name, sorted(children))
        return {str(eid): dict(e) for eid, e in view.edges.items() if e.get("relation") == "containment"
                and str(e.get("dst_id")) in children and str(eid) not in edges}

    def _scene_info(self, tenant_id: str, edges: Iterable[dict[str, Any]]) -> dict[str, tuple[str, str]]:
        """scene id -> (created_at, action) of the source scenes of containment edges (cached;
        a scene the store no longer holds is left out)."""
        out: dict[str, tuple[str, str]] = {}
        for e in edges:
            if e.get("relation") != "containment":
                continue
            for sid in map(str, e.get("source_scenes") or []):
                info = self._scenes.get((tenant_id, sid))
                if info is None:
                    scene = self.store.get_scene(tenant_id, sid)
                    info = ("", "") if scene is None else (str(scene.get("created_at") or ""),
                                                           str(scene.get("action") or ""))
                    with self._cond:
                        self._scenes[(tenant_id, sid)] = info
                if info[1]:
                    out[sid] = info
        return out

    def sync(self, tenant_id: str, env_name: str) -> int:
        """Sync one environment in full from the store; returns the rows written."""
        with self._sync:
            graph = self.store.world_graph(tenant_id, env_name)
            meta = graph.get("meta") or {}
            version = int(meta.get("graph_version") or 0)
            rows = record_rows(graph)
            self.forgotten_rows(tenant_id, env_name)
            held = self.index.rows_of_env(tenant_id, env_name)
            gone = [i for i in held if i not in rows and i != marker_id(env_name)]
            return self._write(tenant_id, env_name, rows, held, gone, version)

    def ensure(self, tenant_id: str, env_names: list[str] | None) -> None:
        """Before a search: sync the environments whose rows are behind the store and that this
        process has no work queued for (see the module doc)."""
        if self.index.read_only:
            return
        metas = self.store.environment_metas(tenant_id)
        names = list(metas) if env_names is None else [e for e in env_names if e in metas]
        snap = self.index.snapshot(tenant_id)
        markers = snap.markers if snap is not None else {}
        for env in names:
            meta = metas.get(env) or {}
            version = int(meta.get("graph_version") or 0)
            if version == 0 and env not in markers:
                continue  # nothing merged yet
            if markers.get(env, -1) >= version or self.pending(tenant_id, env):
                continue
            with self._sync:
                snap = self.index.snapshot(tenant_id)
                if snap is not None and snap.markers.get(env, -1) >= version:
                    continue  # another thread synced it meanwhile
                self.sync(tenant_id, env)

    def rebuild(self, tenant_id: str) -> int:
        """Drop the tenant's world table and write every environment's rows again; returns the rows."""
        with self._sync:
            self.forgotten(tenant_id)
            self.index.drop_tenant(tenant_id)
            return sum(self.sync(tenant_id, env) for env in self.store.environments(tenant_id))


def _marker(held: Held, env_name: str) -> int | None:
    row = held.get(marker_id(env_name))
    try:
        return None if row is None else int(row[0])
    except ValueError:
        return None
