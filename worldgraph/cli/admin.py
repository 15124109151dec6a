"""The demo and the local Neo4j launcher: ``worldgraph demo``, ``worldgraph neo4j start|stop|status``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from worldgraph.cli.console import emit, note
from worldgraph.config import LauncherSettings

Add = Callable[..., argparse.ArgumentParser]


def add_admin_commands(add: Add) -> None:
    sp = add("demo", cmd_demo, "the main job: record sample experiences, rate, recall; grow and export a world graph")
    # its own --data: the demo's folder is not the other commands' ./data
    sp.add_argument("--data", default=argparse.SUPPRESS,
                    help="the demo's folder (default ./worldgraph-demo; deleted and recreated each run)")
    sp.add_argument("--out", default=None, help="export folder (default <demo folder>/export)")
    sp.add_argument("--fresh", action="store_true", help="delete the demo tenant's data first")
    sp.add_argument("--offline", action="store_true",
                    help="merge the deltas shipped in the log even when an LLM is configured (OPENAI_API_KEY / "
                         "OPENAI_BASE_URL)")

    sp = add("neo4j", cmd_neo4j, "manage the local Neo4j of the data folder (Java + Maven, no Docker); its state "
             "lives in <data>/neo4j-local unless WORLDGRAPH_NEO4J_HOME is set")
    sp.add_argument("action", choices=["start", "stop", "status"], help="start, stop or show the local server")
    sp.add_argument("--port", type=int, default=7687, help="Bolt port (default 7687)")
    sp.add_argument("--neo4j-data", default=None, help="database directory (default <state folder>/data)")


def neo4j_home(args: argparse.Namespace) -> Path:
    """The launcher's state folder for this data folder: WORLDGRAPH_NEO4J_HOME, else <data>/neo4j-local,
    so `worldgraph neo4j stop` stops this data folder's server and no other checkout's."""
    env = LauncherSettings.from_env().home
    return Path(env).expanduser().resolve() if env else (Path(args.data) / "neo4j-local").resolve()


def cmd_neo4j(args: argparse.Namespace) -> int:
    from worldgraph import neo4j_local

    home = neo4j_home(args)
    if args.action == "start":
        note(args, f"starting Neo4j (state in {home}; the first start builds it with Maven, a few minutes)")
        uri = neo4j_local.start(port=args.port, data_dir=args.neo4j_data, home=home)
        emit(args, {"uri": uri, "home": str(home)},
             lambda: print(f"Neo4j is running at {uri} (state in {home})\n  export NEO4J_URI={uri}"))
    elif args.action == "stop":
        stopped = neo4j_local.stop(home=home)
        emit(args, {"stopped": stopped, "home": str(home)},
             lambda: print(f"stopped ({home})" if stopped else f"not running ({home})"))
    else:
        st = neo4j_local.status(home=home)
        emit(args, st, lambda: print("\n".join(f"{k:10} {v}" for k, v in st.items())))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from worldgraph.cli.demo import run_demo

    return run_demo(args)
