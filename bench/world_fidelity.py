"""World-graph fidelity against real worlds: TextWorld games whose true state is known.

    python bench/world_fidelity.py --seeds 101,102,103 --world-size 6 --objects 14 --steps 60 \
        --noise 0,0.2,0.4 --out bench/results/world_fidelity.json

Per game (generated offline by ``tw-make custom``; TextWorld is the ``[bench]`` extra): an
explorer agent plays ``--steps`` rounds; every round goes to ``wm.observe_round`` flagged, so it
becomes a scene packet the background workers (``world_workers``) extract through a local
OpenAI-compatible server. That server answers each scene with the oracle delta built from the
facts the agent could see (``fidelity_oracle.oracle_delta``), corrupted by the noise model
(``fidelity_oracle.corrupt``: a share of items stringified, with unknown relations, dangling
refs, other case and articles, missing fields, or repeated), after a random latency, so answers
arrive late and out of order. A repair round gets the clean versions of the items it asks about,
corrupted again at the same rate. The final graph is compared with the game's true final state
(``fidelity_oracle.score``). See bench/README.md ("World fidelity").
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (str(ROOT), str(ROOT / "bench")):
    if p not in sys.path:
        sys.path.insert(0, p)

from fidelity_oracle import containment, corrupt, oracle_delta, states, transitions, visible  # noqa: E402

from tests.support.fake_openai import FakeOpenAI, Reply  # noqa: E402
from worldgraph import WorldModel  # noqa: E402
from worldgraph.memory.embeddings import HashingEmbedder  # noqa: E402

TENANT = "bench"
_ENV_RE = re.compile(r"Environment: (\S+) \(round (\d+)\)")
_ITEM_RE = re.compile(r"^- (entities|states|edges|rules)\[(\d+)\]:", re.M)


def make_game(seed: int, world_size: int, objects: int, quest: int, out: Path) -> Path:
    path = out / f"tw-{seed}.z8"
    subprocess.run([str(Path(sys.executable).parent / "tw-make"), "custom", "--world-size", str(world_size),
                    "--nb-objects", str(objects), "--quest-length", str(quest), "--seed", str(seed),
                    "--output", str(path), "-f"], check=True, capture_output=True)
    return path


def facts_of(game_state: Any) -> list[tuple[Any, ...]]:
    return [(f.name, *((v.name, v.type) for v in f.arguments)) for f in game_state.facts]


def explore(path: Path, steps: int, rng: random.Random) -> list[dict[str, Any]]:
    """Play the game with an explorer: it prefers exits it has not taken from a room, then opening,
    unlocking, taking, putting and eating, else anything admissible. Returns the rounds with the
    true facts before and after each action."""
    import textworld

    infos = textworld.EnvInfos(facts=True, admissible_commands=True, feedback=True, description=True)
    env = textworld.start(str(path), infos)
    gs = env.reset()
    taken: set[tuple[str, str]] = set()
    rounds = []
    for r in range(steps):
        before, room = facts_of(gs), next((f[2][0] for f in facts_of(gs) if f[0] == "at" and f[1][1] == "P"), "")
        recent = {x["action"] for x in rounds[-4:]}
        cmds = [c for c in gs.admissible_commands if not c.startswith(("examine", "look", "inventory"))]
        cmds = [c for c in cmds if c not in recent] or cmds  # no take / drop loops
        fresh = [c for c in cmds if c.startswith("go ") and (room, c) not in taken]
        verbs = [c for c in cmds if c.split()[0] in ("open", "unlock", "take", "put", "insert", "eat", "close", "drop")]
        pool = fresh if fresh and rng.random() < 0.6 else (verbs if verbs and rng.random() < 0.7 else cmds)
        cmd = rng.choice(pool or ["look"])
        taken.add((room, cmd))
        description = gs.description or ""
        gs, _, done = env.step(cmd)
        rounds.append({"round": r, "action": cmd, "before_observation": description,
                       "after_observation": gs.feedback or "", "admissible_commands": list(gs.admissible_commands or []),
                       "before": before, "after": facts_of(gs)})
        if done:
            break
    env.close()
    return rounds


class Oracle:
    """The local server's brain: the oracle delta of each (env, round), corrupted; repairs."""

    def __init__(self, share: float, latency: float, seed: int) -> None:
        self.share, self.latency, self.seed = share, latency, seed
        self.clean: dict[tuple[str, int], dict[str, Any]] = {}
        self.sources: dict[tuple[str, int], dict[tuple[str, int], Any]] = {}
        self.calls = 0

    def answer(self, body: dict[str, Any]) -> Reply:
        first_user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        env, rnd = _ENV_RE.search(first_user).groups()  # type: ignore[union-attr]
        key = (env, int(rnd))
        rng = random.Random(zlib.crc32(json.dumps([self.seed, *key, len(body["messages"])]).encode()))
        self.calls += 1
        last = body["messages"][-1]["content"]
        if len(body["messages"]) > 2 and "could not be used" in last:  # the repair round
            source = self.sources.get(key, {})
            fixed: dict[str, list[Any]] = {"entities": [], "states": [], "edges": [], "rules": []}
            for k, i in _ITEM_RE.findall(last):
                if (k, int(i)) in source:
                    fixed[k].append(source[(k, int(i))])
            answer, _ = corrupt(fixed, self.share, rng)
        else:
            answer, self.sources[key] = corrupt(self.clean[key], self.share, rng)
        return Reply(content=json.dumps(answer), delay=rng.uniform(0, self.latency))


def run_game(path: Path, rounds: list[dict[str, Any]], oracle: Oracle, workers: int, data: Path) -> dict[str, Any]:
    from fidelity_oracle import score

    env = path.stem
    known: set[str] = set()
    true_transitions: set[tuple[str, str, str]] = set()
    for r in rounds:
        oracle.clean[(env, r["round"])] = oracle_delta(r["before"], r["after"], r["action"])
        known |= visible(r["after"])[1]
        true_transitions |= transitions(r["before"], r["after"], r["action"])
    started = time.perf_counter()
    with WorldModel.open(data, embedder=HashingEmbedder(64), world_workers=workers) as wm:
        observe(wm, env, rounds)
        graph = wm.world_graph(TENANT, env)
    final = rounds[-1]["after"]
    result = score(graph, containment(final), states(final), true_transitions, known)
    merged = sum(1 for s in graph["scenes"] if s["status"] == "merged")
    result.update(game=env, rounds=len(rounds), scenes_merged=merged, seconds=round(time.perf_counter() - started, 2),
                  graph_version=(graph["meta"] or {}).get("graph_version"))
    return result


def observe(wm: WorldModel, env: str, rounds: list[dict[str, Any]]) -> None:
    """Every round to ``wm.observe_round`` flagged (each a scene packet), then wait for the merges."""
    for r in rounds:
        wm.observe_round(TENANT, env, {
            "round": r["round"], "action": r["action"], "before_observation": r["before_observation"],
            "after_observation": r["after_observation"], "admissible_commands": r["admissible_commands"],
            "response": f"ACTION: {r['action']}\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: explore"})
    wm.wait_for_updates()


@contextmanager
def oracle_server(share: float, latency: float) -> Iterator[Oracle]:
    """A local OpenAI-compatible server whose answers are the oracle's (``share`` corrupted, after
    up to ``latency`` seconds), named in this process's environment for the WorldModels it opens."""
    with FakeOpenAI() as server:
        oracle = Oracle(share, latency, seed=7)
        server.responder = oracle.answer
        os.environ.update(server.env())
        yield oracle


def add_game_args(ap: argparse.ArgumentParser) -> None:
    """The options of the games and of their extraction (bench/world_qa.py takes them too)."""
    ap.add_argument("--seeds", default="101,102,103", help="tw-make game seeds")
    ap.add_argument("--world-size", type=int, default=6)
    ap.add_argument("--objects", type=int, default=14)
    ap.add_argument("--quest", type=int, default=4)
    ap.add_argument("--steps", type=int, default=60, help="rounds the explorer plays per game")
    ap.add_argument("--noise", default="0,0.2,0.4", help="shares of corrupted items, one table each")
    ap.add_argument("--latency", type=float, default=0.8, help="answers arrive after uniform(0, this) seconds")
    ap.add_argument("--workers", type=int, default=4, help="config world_workers: extractions in flight")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_game_args(ap)
    ap.add_argument("--out", type=Path, default=None, help="write every result as JSON")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wg-fidelity-"))
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        games = []
        for seed in (int(s) for s in args.seeds.split(",")):
            path = make_game(seed, args.world_size, args.objects, args.quest, tmp)
            games.append((path, explore(path, args.steps, random.Random(seed))))
        for share in (float(x) for x in args.noise.split(",")):
            rows = results.setdefault(f"{share:.0%}", [])
            with oracle_server(share, args.latency) as oracle:
                for path, rounds in games:
                    rows.append(run_game(path, rounds, oracle, args.workers, tmp / f"data-{share}-{path.stem}"))
            print_table(f"noise {share:.0%}", rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results},
                                       indent=1), encoding="utf-8")


COLUMNS = [("containment_precision", "cont P"), ("containment_recall", "cont R"), ("state_accuracy", "state acc"),
           ("transition_precision", "trans P"), ("transition_recall", "trans R"), ("duplicate_nodes", "dups"),
           ("unknown_nodes", "unknown"), ("scenes_merged", "merged"), ("rounds", "rounds")]


def print_table(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    print("| game | " + " | ".join(h for _, h in COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for r in rows:
        print(f"| {r['game']} | " + " | ".join(_fmt(r[k]) for k, _ in COLUMNS) + " |")
    print("| all (mean) | " + " | ".join(_fmt(statistics.mean(r[k] for r in rows)) for k, _ in COLUMNS) + " |")


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) and not float(v).is_integer() else f"{v:g}" if isinstance(v, float) else str(v)


if __name__ == "__main__":
    main()
