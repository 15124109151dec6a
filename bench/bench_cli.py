"""How long the ``worldgraph`` command takes to answer, in new processes, this checkout against a
baseline checkout in the same run (alternated, so both see the same load).

    git worktree add --detach /tmp/wg-baseline <commit>      # the baseline's code (no venv needed)
    python bench/bench_cli.py --baseline /tmp/wg-baseline --runs 10

Each command runs ``--runs`` times per checkout as ``python -m worldgraph.cli ...`` with
``PYTHONPATH`` set to the checkout (the same interpreter and libraries for both); the table gives
the median and the best wall time of a process, start to exit, with the file cache warm (one
unmeasured run of each first). ``stats`` reads a data folder of 200 recorded episodes that the
script makes (with the default embedder, as a user's folder is) in a temporary folder. The
targets: ``--help`` <= 0.3 s and ``stats`` <= 0.8 s (medians).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
TARGETS = {"--help": 0.3, "stats": 0.8}


def run(checkout: Path, args: list[str], cwd: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONDONTWRITEBYTECODE": "1"}
    for name in [k for k in env if k.startswith(("WORLDGRAPH_", "OPENAI_"))]:
        del env[name]
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "worldgraph.cli", *args], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{checkout}: worldgraph {' '.join(args)} failed: {out.stderr[-2000:]}")
    return elapsed


def make_folder(folder: Path) -> None:
    runs = folder / "runs.jsonl"
    runs.write_text("".join(json.dumps({"agent_id": f"agent-{i % 7}", "agent_role": "Finance", "task_type": "recon",
                                        "task_description": f"Reconcile SKU-{i} inventory", "outcome": "success"}) + "\n"
                            for i in range(200)))
    run(HERE, ["--data", str(folder / "data"), "record", str(runs)], folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, default=None, help="a checkout of the code to compare with")
    ap.add_argument("--runs", type=int, default=10, help="new processes per command and checkout (default 10)")
    a = ap.parse_args()
    checkouts = {"now": HERE, **({"baseline": a.baseline.resolve()} if a.baseline else {})}
    with tempfile.TemporaryDirectory(prefix="wg-bench-cli-") as tmp:
        folder = Path(tmp)
        make_folder(folder)
        commands = {"--help": ["--help"], "stats": ["--data", str(folder / "data"), "stats"]}
        times: dict[tuple[str, str], list[float]] = {(n, c): [] for n in checkouts for c in commands}
        for checkout in checkouts.values():  # warm the file cache, unmeasured
            for args in commands.values():
                run(checkout, args, folder)
        for _ in range(a.runs):
            for command, args in commands.items():
                for name, checkout in checkouts.items():  # alternated: the same load for both
                    times[(name, command)].append(run(checkout, args, folder))
    print(f"{'command':10} {'checkout':9} {'median s':>9} {'best s':>7} {'target s':>9}")
    for command in commands:
        for name in checkouts:
            t = times[(name, command)]
            print(f"{command:10} {name:9} {statistics.median(t):9.3f} {min(t):7.3f} {TARGETS[command]:9.1f}")
    print(f"(load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
