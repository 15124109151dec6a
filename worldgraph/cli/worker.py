"""The ``worldgraph worker`` command (registered by ``worldgraph.cli.main.build_parser``); the loop itself
is ``worldgraph.world.worker.WorldWorker``."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from collections.abc import Callable
from typing import Any

Add = Callable[..., argparse.ArgumentParser]


def add_worker_command(add: Add) -> None:
    sp = add("worker", cmd_worker, "merge pending scene packets (world updates) in this process; run several "
                                   "next to `worldgraph serve` (exactly once, a dead worker's packet is taken over)")
    sp.add_argument("--tenant", dest="worker_tenant", default=None, help="only this tenant's packets (default: all)")
    sp.add_argument("--env", default=None, help="only this environment's packets (default: all)")
    sp.add_argument("--concurrency", type=int, default=1, help="packets extracted at once (threads; default 1)")
    sp.add_argument("--poll-seconds", type=float, default=1.0, help="how often an idle worker looks for packets (default 1)")
    sp.add_argument("--once", action="store_true", help="drain what can be taken now, then exit")


def cmd_worker(args: argparse.Namespace) -> int:
    from worldgraph.cli.common import open_wm
    from worldgraph.world.worker import WorldWorker

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                            stream=sys.stderr)
    # this process's own background threads stay off: the worker takes packets from the queue itself
    wm = open_wm(args, create=True, world_background_updates=False)
    try:
        worker = WorldWorker(wm.world, args.worker_tenant, args.env, args.concurrency, args.poll_seconds)
        previous = {sig: signal.signal(sig, lambda *_: worker.stop()) for sig in (signal.SIGTERM, signal.SIGINT)}
        scope = f"tenant {args.worker_tenant}" if args.worker_tenant else "all tenants"
        print(f"worldgraph worker on the {wm.store.name} store: {scope}"
              f"{', env ' + args.env if args.env else ''}, {args.concurrency} at a time", file=sys.stderr)
        try:
            stats = worker.run(once=args.once)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        wm.close()
    out: dict[str, Any] = stats.to_dict()
    if args.json:
        print(json.dumps(out))
    else:
        print(f"merged {len(stats.merged)}, failed {len(stats.failed)}, waiting for the LLM {len(stats.deferred)}, "
              f"taken over {len(stats.lost)}, released {len(stats.released)}")
    return 0
