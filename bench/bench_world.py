"""World-graph benchmark: merge throughput, export/import, full load and prompt summary at 10k nodes.

    python bench/bench_world.py --nodes 10000 --delta-size 200 --repeats 3 \
        --out bench/results/world.json

Everything is generated from fixed seeds (``--seed``): two runs build the same environment from
the same sequence of deltas. See bench/README.md ("World graph") for what each number means.

Sections
1. Merge throughput (delta items/s), per delta, while the environment grows to ``--nodes`` nodes:
   a-full  pure ``plan_merge`` against an in-memory view holding the WHOLE environment
   a-sub   pure ``plan_merge`` against the view a store builds (``load_view`` semantics, in memory)
   b       end to end: ``WorldModel.apply_delta`` on the embedded store (load_view + plan +
           apply_plan, one SQLite transaction, fsync'd)
2. Export (``wm.export``) of the grown environment, import into a fresh WorldModel, and the
   export -> import -> export byte-identity check.
3. ``wm.world_graph`` (full load) and ``summarize_graph`` + ``render_summary`` (the prompt path).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import worldgraph.world.updater as world_mod  # noqa: E402
from worldgraph import WorldModel  # noqa: E402
from worldgraph.export.snapshot import FILES, META_FILE, read_snapshot, write_snapshot  # noqa: E402
from worldgraph.kg.records import GraphView  # noqa: E402
from worldgraph.memory.embeddings import HashingEmbedder  # noqa: E402
from worldgraph.world.curiosity import AgentRound, build_scene_packet  # noqa: E402
from worldgraph.world.merge import engine as merge_mod  # noqa: E402
from worldgraph.world.merge.engine import plan_merge, referenced_node_ids  # noqa: E402
from worldgraph.world.summary import render_summary, summarize_graph  # noqa: E402

TENANT = "bench"
ENV = "bench-house"
APP = "general"
T0 = 1_767_225_600  # 2026-01-01T00:00:00Z: fixed clock for the pure engine and the scene packets

# ---------------------------------------------------------------------------- the environment

ADJ = ["brass", "oak", "rusty", "red", "blue", "dusty", "silver", "old", "small", "large", "green", "cracked",
       "wooden", "iron", "glass", "golden", "black", "white", "heavy", "tiny"]
ROOM_NOUNS = ["kitchen", "cellar", "attic", "hallway", "library", "bedroom", "garden", "study", "pantry", "garage"]
KINDS: dict[str, list[str]] = {  # type -> nouns
    "item": ["key", "coin", "book", "letter", "apple", "candle", "map", "ring", "lamp", "knife"],
    "tool": ["hammer", "wrench", "screwdriver", "shovel", "crowbar"],
    "food": ["bread", "cheese", "carrot", "pie", "egg"],
    "furniture": ["table", "chair", "shelf", "bed", "desk", "sofa"],
    "container": ["box", "chest", "drawer", "cupboard", "safe", "fridge"],
    "door": ["door", "gate", "hatch"],
    "character": ["cat", "butler", "gardener", "child", "dog"],
}
TYPE_WEIGHTS = [("item", 30), ("tool", 8), ("food", 10), ("furniture", 12), ("container", 14), ("door", 8),
                ("character", 4)]
STATEFUL = {  # entity type -> (state type, values, verbs by target value)
    "container": ("container_state", ["open", "closed", "locked"], {"open": "open", "closed": "close", "locked": "lock"}),
    "door": ("door_state", ["open", "closed", "locked"], {"open": "open", "closed": "close", "locked": "lock"}),
    "item": ("light_state", ["lit", "unlit"], {"lit": "light", "unlit": "extinguish"}),  # only lamps / candles
}
PLACEABLE_PARENTS = ("room", "container", "furniture")


class EnvGen:
    """Generates the deltas an extractor would return for a text-adventure house that keeps growing.

    The generator keeps its own model of the world (what exists, where it is, which state it is
    in), so deltas are independent of the system under test and identical across runs."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.entities: dict[str, dict[str, Any]] = {}  # "type:name" -> {"type", "name"}
        self.by_type: dict[str, list[str]] = defaultdict(list)
        self.parent: dict[str, str] = {}  # child key -> parent key (current containment)
        self.state: dict[str, str] = {}  # stateful entity key -> current value
        self.state_nodes: set[str] = set()  # "state_type:state name"
        self.rules: list[tuple[str, str, str]] = []  # (condition, outcome, entity key)
        self.serial = 0
        self.round = 0

    @property
    def n_nodes(self) -> int:
        return len(self.entities) + len(self.state_nodes)

    def _name(self, typ: str) -> str:
        self.serial += 1
        noun = self.rng.choice(ROOM_NOUNS if typ == "room" else KINDS[typ])
        return f"{self.rng.choice(ADJ)} {noun} {self.serial}"

    def _stateful(self, key: str) -> tuple[str, list[str], dict[str, str]] | None:
        ent = self.entities[key]
        spec = STATEFUL.get(ent["type"])
        if spec and ent["type"] == "item" and not any(w in ent["name"] for w in ("lamp", "candle")):
            return None
        return spec

    def delta(self, size: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, int]]:
        """One delta of ``size`` items, the scene packet input it comes with, and item counts."""
        rng = self.rng
        self.round += 1
        n_ent, n_state = round(size * 0.25), round(size * 0.10)
        n_cont, n_trans, n_rule = round(size * 0.30), round(size * 0.05), round(size * 0.05)
        n_epi = size - n_ent - n_state - n_cont - n_trans - n_rule
        entities: list[dict[str, Any]] = []
        states: list[dict[str, Any]] = []
        edges: list[dict[str, Any]] = []
        rules: list[dict[str, Any]] = []
        local: dict[str, str] = {}  # key -> local ref of this delta
        new_keys: list[str] = []
        stats = {"items": 0, "existing_refs": 0}
        old_keys, old_states = set(self.entities), set(self.state_nodes)
        evidence = f"round {self.round}: you look around."

        def ref_of(key: str) -> str:
            if key in local:
                return local[key]
            return key  # type:name of an existing node

        def add_entity(typ: str, name: str, attrs: dict[str, Any]) -> str:
            key = f"{typ}:{name}"
            ref = f"e{len(entities)}"
            entities.append({"ref": ref, "name": name, "type": typ, "attributes": attrs,
                             "evidence": f"{evidence} You see the {name}.", "confidence": round(rng.uniform(0.5, 0.95), 2)})
            local[key] = ref
            return key

        # -- entities: 2 new rooms early on, ~70 % new things, ~30 % re-mentions of existing ones
        n_rooms = 2 if len(self.by_type["room"]) < 8 or rng.random() < 0.5 else 1
        for _ in range(n_rooms):
            new_keys.append(add_entity("room", self._name("room"), {"lit": rng.random() < 0.7}))
        existing = [k for k in self.entities]
        n_old = min(len(existing), round(n_ent * 0.2))
        for key in rng.sample(existing, n_old):
            ent = self.entities[key]
            add_entity(ent["type"], ent["name"], {"condition": rng.choice(["new", "worn", "broken", "dusty"])})
        while len(entities) < n_ent:
            typ = rng.choices([t for t, _ in TYPE_WEIGHTS], [w for _, w in TYPE_WEIGHTS])[0]
            new_keys.append(add_entity(typ, self._name(typ), {"color": rng.choice(ADJ)}))

        # -- states: the initial state of new stateful things, then transitions of existing ones
        pending_states: list[tuple[str, str, str]] = []  # (entity key, value, ref)

        def add_state(key: str, value: str) -> str:
            stype = self._stateful(key)[0]  # type: ignore[index]
            name = f"{self.entities.get(key, {}).get('name') or key.split(':', 1)[1]} {value}"
            ref = f"s{len(states)}"
            states.append({"ref": ref, "name": name, "type": stype, "entity_ref": ref_of(key), "attributes": {},
                           "evidence": f"{evidence} The {name}.", "confidence": round(rng.uniform(0.6, 0.95), 2)})
            pending_states.append((key, value, ref))
            return ref

        for key in new_keys:  # register new entities so _stateful can see them
            typ, name = key.split(":", 1)
            self.entities.setdefault(key, {"type": typ, "name": name, "new": True})
        trans_candidates = [k for k in self.state if k not in local]
        rng.shuffle(trans_candidates)
        transitions: list[tuple[str, str, str]] = []  # (src state ref, dst state ref, action)
        for key in trans_candidates[: min(n_trans, n_state // 2)]:
            stype, values, verbs = self._stateful(key)  # type: ignore[misc]
            old = self.state[key]
            new = rng.choice([v for v in values if v != old])
            dst = add_state(key, new)
            src_key = f"{stype}:{self.entities[key]['name']} {old}"
            transitions.append((ref_of(src_key), dst, f"{verbs[new]} {self.entities[key]['name']}"))
        for key in new_keys:
            if len(states) >= n_state:
                break
            spec = self._stateful(key)
            if spec:
                add_state(key, spec[1][1] if len(spec[1]) > 2 else spec[1][0])
        fill = [k for k in self.state if k not in local] or [k for k in new_keys if self._stateful(k)]
        while len(states) < n_state and fill:  # re-assert the current state of existing things
            key = rng.choice(fill)
            add_state(key, self.state.get(key) or self._stateful(key)[1][0])  # type: ignore[index]

        # -- containment: place every new thing, then move existing things (closes their old edge)
        def parents() -> list[str]:
            return [k for t in PLACEABLE_PARENTS for k in self.by_type[t]] + \
                   [k for k in new_keys if k.split(":", 1)[0] in PLACEABLE_PARENTS]

        pool = parents()
        new_pool = [k for k in new_keys if k.split(":", 1)[0] in PLACEABLE_PARENTS]
        new_rooms = [k for k in new_keys if k.startswith("room:")]
        rooms = self.by_type["room"] + new_rooms
        moves: dict[str, str] = {}
        for key in new_keys:  # a scene mostly shows a new room and what is in it
            if len(edges) >= n_cont:
                break
            if key.startswith("room:"):
                continue
            typ = key.split(":", 1)[0]
            fresh = rng.random() < 0.75
            if typ in ("furniture", "door", "character", "container"):
                parent = rng.choice(new_rooms if fresh else rooms)
            else:
                parent = rng.choice(new_pool if fresh and new_pool else pool)
            if parent != key:
                moves[key] = parent
                edges.append({"relation": "containment", "src_ref": ref_of(parent), "dst_ref": ref_of(key),
                              "evidence": f"{evidence} The {key.split(':', 1)[1]} is here.", "confidence": 0.9})
        movable = [k for k in self.parent if k.split(":", 1)[0] in ("item", "tool", "food")]
        rng.shuffle(movable)
        n_moves = 0
        for key in movable:  # the agent carries a few known things elsewhere
            if len(edges) >= n_cont or n_moves >= round(n_cont * 0.15):
                break
            parent = rng.choice(pool)
            if parent in (key, self.parent.get(key)) or key in moves:
                continue
            moves[key] = parent
            n_moves += 1
            edges.append({"relation": "containment", "src_ref": ref_of(parent), "dst_ref": ref_of(key),
                          "evidence": f"{evidence} You move the {key.split(':', 1)[1]}.", "confidence": 0.85})
        for src, dst, action in transitions:
            edges.append({"relation": "transition", "src_ref": src, "dst_ref": dst, "action": action,
                          "evidence": f"{evidence} You {action}.", "confidence": 0.8})

        # -- rules: ~40 % re-assert a known rule, ~10 % contradict one, the rest are new
        for _ in range(n_rule):
            roll = rng.random()
            if self.rules and roll < 0.4:
                cond, out, key = rng.choice(self.rules)
            elif self.rules and roll < 0.5:
                i = rng.randrange(len(self.rules))
                cond, out, key = self.rules[i]
                out = out.rsplit(" ", 1)[0] + (" fails" if out.endswith("succeeds") else " succeeds")
                self.rules[i] = (cond, out, key)
            else:
                fresh = [k for k, _, _ in pending_states if k in local]
                cands = (fresh if fresh and rng.random() < 0.6 else [k for k in self.state]) or list(self.entities)
                key = rng.choice(cands)
                name = self.entities[key]["name"]
                spec = self._stateful(key)
                value = rng.choice(spec[1]) if spec else "here"
                cond = f"the {name} is {value}"
                out = f"{rng.choice(['taking', 'using', 'opening', 'moving', 'entering'])} the {name} " \
                      f"{rng.choice(['succeeds', 'fails'])}"
                self.rules.append((cond, out, key))
            rules.append({"condition": cond, "outcome": out, "linked_refs": [ref_of(key)],
                          "evidence": f"{evidence} {cond}: {out}.", "confidence": 0.6})

        # -- episodic: what the scene showed, new things first, then existing ones
        n_epi = max(n_epi, size - len(entities) - len(states) - len(edges) - len(rules))  # fill up to size
        n_old_epi = round(n_epi * 0.15)
        shown = list(local)[: n_epi - n_old_epi]
        others = [k for k in self.entities if k not in local and not self.entities[k].get("new")]
        shown += rng.sample(others, min(len(others), n_epi - len(shown)))
        for key in shown[:n_epi]:
            edges.append({"relation": "episodic", "src_ref": ref_of(key), "dst_ref": "scene",
                          "evidence": evidence, "confidence": 0.7})

        # -- commit the generator's own world model
        for key in new_keys:
            self.entities[key].pop("new", None)
            self.by_type[key.split(":", 1)[0]].append(key)
        for child, parent in moves.items():
            self.parent[child] = parent
        for key, value, _ in pending_states:
            self.state[key] = value
            self.state_nodes.add(f"{self._stateful(key)[0]}:{self.entities[key]['name']} {value}")  # type: ignore[index]

        delta = {"entities": entities, "states": states, "edges": edges, "rules": rules}
        stats["items"] = sum(len(v) for v in delta.values())
        # items that name an existing node: a re-mentioned entity, or a "type:name" ref (local refs have no ':')
        stats["existing_refs"] = (
            sum(f"{e['type']}:{e['name']}" in old_keys for e in entities)
            + sum(":" in s["entity_ref"] or f"{s['type']}:{s['name']}" in old_states for s in states)
            + sum(":" in e["src_ref"] or ":" in e["dst_ref"] for e in edges)
            + sum(any(":" in r for r in x["linked_refs"]) for x in rules))
        stats.update(entities=len(entities), states=len(states), rules=len(rules),
                     containment=sum(e["relation"] == "containment" for e in edges),
                     transition=sum(e["relation"] == "transition" for e in edges),
                     episodic=sum(e["relation"] == "episodic" for e in edges))
        scene = {
            "id": f"00000000-0000-4000-8000-{self.round:012d}",
            "created_at": _iso(T0 + 60 * self.round),
            "current_round": self.round,
            "action": transitions[0][2] if transitions else "look",
            "before_observation": "You are in the house.",
            "after_observation": " ".join(f"You see the {k.split(':', 1)[1]}." for k in shown[:12]),
            "feedback": "",
            "admissible_commands": ["look", "inventory"] + [f"take {k.split(':', 1)[1]}" for k in shown[:6]],
            "latest_response": "I look around.",
            "trigger_reason": "new_entities",
            "recent_history_excerpt": "",
        }
        return delta, scene, stats


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def scene_record(scene: dict[str, Any]) -> Any:
    """The SceneRecord WorldUpdater.apply_delta builds from ``scene`` (same code path)."""
    rnd = AgentRound.from_input({"round": scene.get("current_round", 0), **{
        k: scene[k] for k in ("action", "before_observation", "after_observation", "feedback",
                              "admissible_commands") if k in scene}, "response": scene.get("latest_response", "")})
    return build_scene_packet(TENANT, ENV, rnd, scene.get("trigger_reason"), scene.get("recent_history_excerpt", ""),
                              scene["id"], scene["created_at"], episode_id=scene.get("episode_id"))


# ---------------------------------------------------------------------------- in-memory store


class MemView:
    """A whole environment in memory plus the indexes a store has (states by entity, edges by end),
    so the view ``load_view`` would return can be cut out without scanning everything."""

    def __init__(self) -> None:
        self.full = GraphView(tenant_id=TENANT, env_name=ENV)
        self.states_of: dict[str, set[str]] = defaultdict(set)
        self.edges_at: dict[str, set[str]] = defaultdict(set)

    def apply(self, plan: Any) -> None:
        """What ``apply_plan_to_view`` does, in place (it returns a new view: it copies the view's
        dicts each time; it used to deep-copy the whole view, see ``apply_plan_to_view_ms``)."""
        v = self.full
        for n in plan.nodes:
            v.nodes[n["id"]] = copy.deepcopy(n)
            if n.get("entity_id"):
                self.states_of[n["entity_id"]].add(n["id"])
        for e in plan.edges:
            v.edges[e["id"]] = copy.deepcopy(e)
            self.edges_at[e["src_id"]].add(e["id"])
            self.edges_at[e["dst_id"]].add(e["id"])
        for r in plan.rules:
            v.rules[r["id"]] = copy.deepcopy(r)
        if plan.scene is not None:
            v.scenes[plan.scene["id"]] = copy.deepcopy(plan.scene)
        if plan.meta is not None:
            meta = copy.deepcopy(plan.meta)
            meta["counts"] = {"nodes": len(v.nodes), "edges": len(v.edges), "rules": len(v.rules),
                              "scenes": len(v.scenes)}
            v.meta = meta

    def sub_view(self, node_ids: list[str]) -> GraphView:
        """``EmbeddedGraphStore.load_view`` semantics: the nodes asked for, the states of those,
        every edge with an end among the ids, every rule, the meta."""
        v, out = self.full, GraphView(tenant_id=TENANT, env_name=ENV)
        for nid in node_ids:
            if nid in v.nodes:
                out.nodes[nid] = v.nodes[nid]
            for sid in self.states_of.get(nid, ()):
                out.nodes[sid] = v.nodes[sid]
            for eid in self.edges_at.get(nid, ()):
                out.edges[eid] = v.edges[eid]
        out.rules = dict(v.rules)
        out.meta = v.meta
        return out


# ---------------------------------------------------------------------------- helpers


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def timed(fn: Callable[[], Any], repeats: int) -> tuple[list[float], Any]:
    out, result = [], None
    for _ in range(repeats):
        gc.collect()
        t = time.perf_counter()
        result = fn()
        out.append(time.perf_counter() - t)
    return out, result


def profile(fn: Callable[[], Any], top: int = 18) -> tuple[str, list[dict[str, Any]]]:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("tottime").print_stats(top)
    rows = []
    for (file, line, func), (_cc, nc, tt, ct, _) in sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]:  # type: ignore[attr-defined]
        rows.append({"where": f"{_short(file)}:{line}:{func}", "calls": nc, "tottime_s": round(tt, 4),
                     "cumtime_s": round(ct, 4)})
    cum = sorted(stats.stats.items(), key=lambda kv: -kv[1][3])[:top]  # type: ignore[attr-defined]
    cum_rows = [{"where": f"{_short(f)}:{ln}:{fn_}", "calls": v[1], "cumtime_s": round(v[3], 4)}
                for (f, ln, fn_), v in cum]
    return buf.getvalue(), rows + [{"by_cumtime": cum_rows}]


def _short(path: str) -> str:
    for marker in ("/worldgraph/", "/site-packages/", "/lib/python"):
        if marker in path:
            return path[path.index(marker) + 1:]
    return path


def table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("  ".join(h.rjust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))


def fmt(x: float, nd: int = 0) -> str:
    return f"{x:,.{nd}f}"


def dir_files(path: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(path.iterdir()) if p.is_file()}


def machine() -> dict[str, Any]:
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "loadavg_at_start": load, "sqlite": sqlite3.sqlite_version}


# ---------------------------------------------------------------------------- section 1


def growth(per_delta: list[dict[str, Any]], key: str) -> dict[str, Any]:
    n = len(per_delta)
    k = max(1, n // 10)
    first, last = per_delta[:k], per_delta[-k:]
    return {
        "median_items_per_s": med([d[key] for d in per_delta]),
        "first10_items_per_s": med([d[key] for d in first]),
        "last10_items_per_s": med([d[key] for d in last]),
        "first10_nodes": [first[0]["nodes_before"], first[-1]["nodes_before"]],
        "last10_nodes": [last[0]["nodes_before"], last[-1]["nodes_before"]],
        "deltas_per_decile": k,
    }


def section_merge(args: argparse.Namespace, workdir: Path) -> tuple[dict[str, Any], WorldModel, list[dict[str, Any]]]:
    gen = EnvGen(args.seed)
    deltas: list[tuple[dict[str, Any], dict[str, Any], dict[str, int]]] = []
    t = time.perf_counter()
    while gen.n_nodes < args.nodes:
        deltas.append(gen.delta(args.delta_size))
    gen_s = time.perf_counter() - t
    n_items = sum(s["items"] for _, _, s in deltas)
    n_existing = sum(s["existing_refs"] for _, _, s in deltas)
    print(f"generated {len(deltas)} deltas, {n_items:,} items ({n_existing / n_items:.0%} refer to existing "
          f"nodes), generator world: {gen.n_nodes:,} nodes, {len(gen.rules):,} rules  [{gen_s:.1f}s]")

    # ---- (a) pure engine, in memory
    mem = MemView()
    per: list[dict[str, Any]] = []
    mismatches = 0
    equiv_checked = 0
    for i, (delta, scene, st) in enumerate(deltas):
        rec = scene_record(scene)
        now = _iso(T0 + 60 * (i + 1) + 30)
        nodes_before = len(mem.full.nodes)
        ids = referenced_node_ids(TENANT, ENV, delta)
        t = time.perf_counter()
        sub = mem.sub_view(ids)
        cut_s = time.perf_counter() - t
        t = time.perf_counter()
        plan_s, rep_s = plan_merge(sub, delta, rec, now, app_name=APP)
        sub_s = time.perf_counter() - t
        row = {"delta": i, "nodes_before": nodes_before, "edges_before": len(mem.full.edges),
               "rules_before": len(mem.full.rules), "items": st["items"], "sub_s": sub_s, "cut_s": cut_s,
               "sub_items_per_s": st["items"] / sub_s, "sub_view_nodes": len(sub.nodes),
               "sub_view_edges": len(sub.edges), "dropped": len(rep_s.dropped), "notes": len(rep_s.notes)}
        if not args.skip_full_view:
            t = time.perf_counter()
            plan_f, _ = plan_merge(mem.full, delta, rec, now, app_name=APP)
            full_s = time.perf_counter() - t
            row.update(full_s=full_s, full_items_per_s=st["items"] / full_s)
            same = (plan_f.nodes, plan_f.edges, plan_f.rules, plan_f.meta) == \
                   (plan_s.nodes, plan_s.edges, plan_s.rules, plan_s.meta)
            mismatches += not same
        if i < 3 and hasattr(merge_mod, "apply_plan_to_view"):  # in-place apply == apply_plan_to_view
            expect = merge_mod.apply_plan_to_view(mem.full, plan_s)
            mem.apply(plan_s)
            equiv_checked += 1
            assert (expect.nodes, expect.edges, expect.rules, expect.meta) == \
                   (mem.full.nodes, mem.full.edges, mem.full.rules, mem.full.meta), "in-place apply differs"
        else:
            mem.apply(plan_s)
        per.append(row)
    apply_view_ms = None
    if hasattr(merge_mod, "apply_plan_to_view"):
        empty = type(plan_s)(tenant_id=TENANT, env_name=ENV, nodes=[], edges=[], rules=[], scene=None, meta=None)
        secs, _ = timed(lambda: merge_mod.apply_plan_to_view(mem.full, empty), 1)
        apply_view_ms = secs[0] * 1000
    mem_counts = {"nodes": len(mem.full.nodes), "edges": len(mem.full.edges), "rules": len(mem.full.rules),
                  "scenes": len(mem.full.scenes)}
    print(f"in-memory env after {len(deltas)} deltas: {mem_counts}")

    # ---- (b) end to end on the embedded store
    wm = WorldModel.open(workdir / "wm", embedder=HashingEmbedder(384))
    parts: dict[str, float] = {}

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def inner(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                parts[name] = parts.get(name, 0.0) + time.perf_counter() - t
        return inner

    view_sizes: dict[str, int] = {}
    orig_load = wm.store.load_view

    def load_view(*a: Any, **kw: Any) -> Any:
        v = orig_load(*a, **kw)
        view_sizes.update(nodes=len(v.nodes), edges=len(v.edges), rules=len(v.rules))
        return v

    wm.store.load_view = wrap("load_view", load_view)  # type: ignore[method-assign]
    wm.store.apply_plan = wrap("apply_plan", wm.store.apply_plan)  # type: ignore[method-assign]
    orig_plan = world_mod.plan_merge
    world_mod.plan_merge = wrap("plan_merge", orig_plan)
    dropped_e2e = 0
    try:
        for i, (delta, scene, st) in enumerate(deltas):
            parts.clear()
            t = time.perf_counter()
            report = wm.apply_delta(TENANT, ENV, delta, scene=scene)
            e2e_s = time.perf_counter() - t
            dropped_e2e += len(report.dropped)
            per[i].update(e2e_s=e2e_s, e2e_items_per_s=st["items"] / e2e_s,
                          load_view_s=parts.get("load_view", 0.0), plan_s=parts.get("plan_merge", 0.0),
                          apply_plan_s=parts.get("apply_plan", 0.0), view_nodes=view_sizes.get("nodes"),
                          view_edges=view_sizes.get("edges"), view_rules=view_sizes.get("rules"))
    finally:
        world_mod.plan_merge = orig_plan
        wm.store.load_view = orig_load  # type: ignore[method-assign]
    store_counts = wm.store.stats(TENANT)

    res: dict[str, Any] = {
        "deltas": len(deltas), "items": n_items, "existing_ref_share": n_existing / n_items,
        "generator_seconds": gen_s, "in_memory_counts": mem_counts,
        "store_counts": {k: store_counts[k] for k in ("nodes", "edges", "rules", "scenes")},
        "dropped_items_in_memory": sum(d["dropped"] for d in per), "dropped_items_end_to_end": dropped_e2e,
        "notes_in_memory": sum(d["notes"] for d in per),
        "full_vs_sub_view_plan_mismatches": None if args.skip_full_view else mismatches,
        "in_place_apply_checked_against_apply_plan_to_view": equiv_checked,
        "apply_plan_to_view_ms_at_end": apply_view_ms,
        "a_sub": growth(per, "sub_items_per_s"),
        "b_end_to_end": growth(per, "e2e_items_per_s"),
        "per_delta": per,
    }
    if not args.skip_full_view:
        res["a_full"] = growth(per, "full_items_per_s")
    k = max(1, len(per) // 10)
    res["b_breakdown_ms"] = {
        part: {"first10": med([d[part] for d in per[:k]]) * 1000, "last10": med([d[part] for d in per[-k:]]) * 1000}
        for part in ("load_view_s", "plan_s", "apply_plan_s", "e2e_s")
    }
    res["b_view_size"] = {
        part: {"first10": med([d[part] for d in per[:k]]), "last10": med([d[part] for d in per[-k:]])}
        for part in ("view_nodes", "view_edges", "view_rules")
    }
    return res, wm, deltas  # type: ignore[return-value]


def print_merge(res: dict[str, Any]) -> None:
    rows = []
    variants = [("a-full", "a_full", "plan_merge, whole env in memory"),
                ("a-sub", "a_sub", "plan_merge, load_view-sized view"),
                ("b", "b_end_to_end", "WorldModel.apply_delta (SQLite)")]
    for label, key, what in variants:
        g = res.get(key)
        if g is None:
            continue
        ratio = g["last10_items_per_s"] / g["first10_items_per_s"]
        rows.append([label, what, fmt(g["median_items_per_s"]), fmt(g["first10_items_per_s"]),
                     fmt(g["last10_items_per_s"]), f"{ratio:.2f}x"])
    g = res["a_sub"]
    table(f"1. Merge throughput, delta items/s (median per delta; {res['deltas']} deltas of ~{res['items'] // res['deltas']}"
          f" items; first 10% = env at {g['first10_nodes'][0]:,}-{g['first10_nodes'][1]:,} nodes, last 10% = "
          f"{g['last10_nodes'][0]:,}-{g['last10_nodes'][1]:,})",
          ["variant", "what", "median", "first 10%", "last 10%", "last/first"], rows)
    b, v = res["b_breakdown_ms"], res["b_view_size"]
    table("   end-to-end breakdown per delta (median ms) and the view load_view returns",
          ["part", "first 10%", "last 10%"],
          [[p.replace("_s", ""), fmt(b[p]["first10"], 1), fmt(b[p]["last10"], 1)]
           for p in ("load_view_s", "plan_s", "apply_plan_s", "e2e_s")]
          + [[p, fmt(v[p]["first10"]), fmt(v[p]["last10"])] for p in ("view_nodes", "view_edges", "view_rules")])
    print(f"   store: {res['store_counts']}; dropped items: in-memory {res['dropped_items_in_memory']}, "
          f"end-to-end {res['dropped_items_end_to_end']}; full-view vs load_view-view plans differ in "
          f"{res['full_vs_sub_view_plan_mismatches']} deltas; apply_plan_to_view (empty plan, whole "
          f"view) at the end: {res['apply_plan_to_view_ms_at_end'] or float('nan'):.1f} ms")


# ---------------------------------------------------------------------------- sections 2 and 3


def section_export(args: argparse.Namespace, wm: WorldModel, workdir: Path) -> dict[str, Any]:
    out = workdir / "export"
    times, path = timed(lambda: wm.export(TENANT, ENV, out), args.repeats)
    sizes = dir_files(path)
    graph = wm.world_graph(TENANT, ENV)
    write_t, _ = timed(lambda: write_snapshot(graph, workdir / "write_only"), args.repeats)
    read_t, _ = timed(lambda: read_snapshot(path), args.repeats)

    wm2 = WorldModel.open(workdir / "wm2", embedder=HashingEmbedder(384))
    try:
        imp_t, counts = timed(lambda: wm2.import_snapshot(TENANT, path), args.repeats)
        path2 = wm2.export(TENANT, ENV, workdir / "export2")
        same = {name: (path / name).read_bytes() == (path2 / name).read_bytes() for name in [*FILES.values(), META_FILE]}
    finally:
        wm2.close()
    return {"export_s": times, "export_median_s": med(times), "files_bytes": sizes,
            "total_bytes": sum(sizes.values()), "write_snapshot_only_median_s": med(write_t),
            "read_snapshot_only_median_s": med(read_t), "import_s": imp_t, "import_median_s": med(imp_t),
            "import_counts": counts["counts"], "roundtrip_identical": all(same.values()), "roundtrip_files": same}


def print_export(res: dict[str, Any], n_nodes: int) -> None:
    rows = [["wm.export (world_graph + write_snapshot, fsync'd)", fmt(res["export_median_s"] * 1000, 1)],
            ["  write_snapshot alone (graph already loaded)", fmt(res["write_snapshot_only_median_s"] * 1000, 1)],
            ["wm.import_snapshot into a fresh WorldModel", fmt(res["import_median_s"] * 1000, 1)],
            ["  read_snapshot alone", fmt(res["read_snapshot_only_median_s"] * 1000, 1)]]
    table(f"2. Export / import of the {n_nodes:,}-node environment (median of {len(res['export_s'])})",
          ["step", "ms"], rows)
    print("   files: " + ", ".join(f"{k} {v / 1024:,.0f} KiB" for k, v in res["files_bytes"].items())
          + f" (total {res['total_bytes'] / 1024 / 1024:.1f} MiB)")
    print(f"   export -> import -> export identical bytes: {'OK' if res['roundtrip_identical'] else 'FAIL'}"
          + ("" if res["roundtrip_identical"] else f" {res['roundtrip_files']}"))


def section_load(args: argparse.Namespace, wm: WorldModel, deltas: list[Any], max_items: int) -> dict[str, Any]:
    load_t, graph = timed(lambda: wm.world_graph(TENANT, ENV), args.repeats)
    scene = scene_record(deltas[-1][1])
    sum_t, summary = timed(lambda: summarize_graph(graph, scene, max_items), args.repeats)
    ren_t, text = timed(lambda: render_summary(summary), args.repeats)
    path_t, _ = timed(lambda: wm.world._summary(TENANT, ENV, scene), args.repeats)
    return {"world_graph_median_s": med(load_t), "summarize_median_s": med(sum_t), "render_median_s": med(ren_t),
            "prompt_path_median_s": med(path_t), "summary_chars": len(text), "max_items": max_items,
            "counts": {k: len(graph[k]) for k in ("nodes", "edges", "rules", "scenes")}}


def print_load(res: dict[str, Any]) -> None:
    c = res["counts"]
    table(f"3. Full load and prompt summary ({c['nodes']:,} nodes, {c['edges']:,} edges, {c['rules']:,} rules, "
          f"{c['scenes']:,} scenes; median)", ["step", "ms"],
          [["wm.world_graph (full load)", fmt(res["world_graph_median_s"] * 1000, 1)],
           [f"summarize_graph (max_items={res['max_items']})", fmt(res["summarize_median_s"] * 1000, 1)],
           ["render_summary", fmt(res["render_median_s"] * 1000, 2)],
           ["WorldUpdater._summary (load + summarize + render, per update)", fmt(res["prompt_path_median_s"] * 1000, 1)]])


# ---------------------------------------------------------------------------- profiles


def section_profile(wm: WorldModel, args: argparse.Namespace, deltas: list[Any], workdir: Path) -> dict[str, Any]:
    """cProfile of one more end-to-end delta at full size, one export, one prompt summary."""
    out: dict[str, Any] = {}
    # a fresh delta continuing the same world (replay the generator to the end, one more delta)
    gen = EnvGen(args.seed)
    for _ in deltas:
        gen.delta(args.delta_size)
    delta, scene, _ = gen.delta(args.delta_size)
    scene_rec = scene_record(deltas[-1][1])
    jobs = {
        "apply_delta": lambda: wm.apply_delta(TENANT, ENV, delta, scene=scene),
        "export": lambda: wm.export(TENANT, ENV, workdir / "export_prof"),
        "prompt_summary": lambda: wm.world._summary(TENANT, ENV, scene_rec),
    }
    for name, fn in jobs.items():
        text, rows = profile(fn)
        out[name] = rows
        if args.profile:
            print(f"\n--- cProfile: {name} (top by tottime)\n{text}")
    return out


# ---------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=10_000, help="grow the environment to this many nodes")
    ap.add_argument("--delta-size", type=int, default=200, help="items per delta")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of export / import / load / summary")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--skip-full-view", action="store_true", help="skip variant a-full (plan_merge on the whole env)")
    ap.add_argument("--profile", action="store_true", help="print the cProfile tables (always stored in the JSON)")
    ap.add_argument("--tmp", default=None, help="where the temporary stores go")
    ap.add_argument("--keep", action="store_true", help="keep the temporary stores")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "world.json"))
    args = ap.parse_args()

    info = machine()
    print(f"worldgraph world-graph bench: --nodes {args.nodes} --delta-size {args.delta_size} --repeats "
          f"{args.repeats} --seed {args.seed}")
    print(f"machine: {info['cpus']} cpus, load {info['loadavg_at_start']}, python {info['python']}, sqlite "
          f"{info['sqlite']}.  CAVEAT: 2 shared cores with other jobs beside; absolute numbers move ~2x between "
          f"runs; quote medians and compare variants within one run.")
    workdir = Path(tempfile.mkdtemp(prefix="bench_world_", dir=args.tmp))
    t_all = time.perf_counter()
    wm = None
    try:
        merge_res, wm, deltas = section_merge(args, workdir)
        print_merge(merge_res)
        export_res = section_export(args, wm, workdir)
        print_export(export_res, merge_res["store_counts"]["nodes"])
        load_res = section_load(args, wm, deltas, wm.config.summary_max_items)
        print_load(load_res)
        prof = section_profile(wm, args, deltas, workdir)
    finally:
        if wm is not None:
            wm.close()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    result = {"args": vars(args), "machine": info, "seconds_total": time.perf_counter() - t_all,
              "merge": merge_res, "export": export_res, "load_and_summary": load_res, "profiles": prof}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n", "utf-8")
    print(f"\nwrote {out}  ({result['seconds_total']:.0f}s)")


if __name__ == "__main__":
    main()
