"""The service's commands: ``worldgraph serve``, ``worldgraph mcp`` and ``worldgraph keys``.

Registered by ``worldgraph.cli.main.build_parser``; the web stack (FastAPI, uvicorn, mcp) is imported
only when one of them runs, so the other commands start as fast as before.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from worldgraph.errors import InvalidInputError

Add = Callable[..., argparse.ArgumentParser]
# How long an idle keep-alive connection stays open. Longer than clients keep idle pooled
# connections (httpx 5 s, Node's fetch 4 s), so the client always closes first: with equal
# timeouts a request sent just as the server closes fails with "server disconnected".
KEEP_ALIVE_SECONDS = 30
# On SIGTERM / SIGINT: in-flight requests get shutdown_timeout_seconds (uvicorn's graceful
# shutdown), closing the model (handing held packets back, closing the stores) gets
# CLOSE_SECONDS, and a watchdog ends the process WATCHDOG_MARGIN after each stage's deadline if
# a store that stopped answering still holds it (a thread blocked in the Neo4j driver cannot be
# cancelled; every write is one transaction, so nothing is half-written).
CLOSE_SECONDS = 1.0
WATCHDOG_MARGIN = 0.3


def add_server_commands(sub: Any, add: Add) -> None:
    """Add serve, mcp and keys to the ``worldgraph`` parser (``add`` is cli.build_parser's helper)."""
    sp = add("serve", cmd_serve, "serve the REST API (and MCP at /mcp) over HTTP")
    sp.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    sp.add_argument("--port", type=int, default=8765, help="port to listen on (default 8765)")
    sp.add_argument("--access-log", action="store_true", help="log every request")
    sp.add_argument("--workers", type=int, default=1,
                    help="server processes sharing the port, each with the data folder open (default 1; "
                         "one process is bound to one core by Python's GIL)")

    sp = add("mcp", cmd_mcp, "serve MCP over stdio for one tenant (for Claude Desktop and other MCP clients)")
    sp.add_argument("--tenant", dest="mcp_tenant", default=None, help="the tenant (default: the global --tenant)")

    group = sub.add_parser("keys", help="API keys of the server").add_subparsers(title="keys commands")
    sp = add("create", cmd_keys_create, "create an API key for a tenant (printed once, stored only hashed)",
             parent=group)
    sp.add_argument("--tenant", dest="key_tenant", required=True, help="the tenant the key gives access to")
    sp.add_argument("--name", default=None, help="a label, e.g. who uses the key")
    sp.add_argument("--scope", dest="scopes", action="append", default=None, metavar="SCOPE",
                    help="what the key may do, repeatable or comma-separated: read, write, forget "
                         "(default read,write; DELETE routes and the MCP forget tool need forget)")
    sp = add("list", cmd_keys_list, "list API keys (ids, tenants, names; never the keys)", parent=group)
    sp.add_argument("--tenant", dest="key_tenant", default=None, help="only this tenant's keys")
    sp = add("revoke", cmd_keys_revoke, "revoke an API key by its id (from `keys list`) or a unique start of it",
             parent=group)
    sp.add_argument("key_id", help="the key's id (16 hex digits), or a unique start of it (at least 4)")


# ---------------------------------------------------------------------- serve / mcp
def cmd_serve(args: argparse.Namespace) -> int:
    if isinstance(args.workers, bool) or not isinstance(args.workers, int) or not 1 <= args.workers <= 64:
        raise InvalidInputError("--workers", f"must be a whole number from 1 to 64, got {args.workers!r}")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"note: listening on {args.host}: other machines can reach this server (keys still required)",
              file=sys.stderr)
    if args.workers == 1:
        _serve(args)
        return 0
    return _serve_workers(args)


def _serve(args: argparse.Namespace, sockets: list[Any] | None = None) -> None:
    """One server process: open the data folder, serve until SIGINT / SIGTERM, close."""
    import uvicorn

    from worldgraph.cli.common import open_wm
    from worldgraph.server.app import create_app
    from worldgraph.server.routes import cypher_mode

    wm = open_wm(args, create=True)
    print(f"worldgraph {wm.store.name} store at {wm.path}; REST /v1, docs /docs, MCP /mcp (pid {os.getpid()}); "
          f"Cypher: {cypher_mode(wm)}", file=sys.stderr)
    graceful = float(wm.config.shutdown_timeout_seconds)
    config = uvicorn.Config(create_app(wm, host=args.host), host=args.host, port=args.port,
                            access_log=args.access_log, log_level="info", timeout_keep_alive=KEEP_ALIVE_SECONDS,
                            timeout_graceful_shutdown=graceful)  # type: ignore[arg-type]  # a float works
    deadline = ShutdownDeadline(wm, graceful)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            deadline.start()
            super().handle_exit(sig, frame)

    _serve_then_close(Server(config), wm, sockets, deadline)


class ShutdownDeadline:
    """The bound on ``worldgraph serve``'s shutdown: started by the first SIGTERM / SIGINT, a
    watchdog thread closes the model itself (handing packets back, bounded) when uvicorn has not
    returned within the graceful time, and ends the process if it has not ended
    CLOSE_SECONDS + WATCHDOG_MARGIN after closing began."""

    def __init__(self, wm: Any, graceful: float) -> None:
        import threading

        self.wm, self.graceful = wm, graceful
        self.closing = threading.Event()  # the main thread began closing the model
        self.closed = threading.Event()  # ... and finished
        self._started = False

    def start(self) -> None:
        import threading

        if not self._started:
            self._started = True
            threading.Thread(target=self._watch, name="worldgraph-shutdown-watchdog", daemon=True).start()

    def _watch(self) -> None:
        if not self.closing.wait(self.graceful + WATCHDOG_MARGIN):
            print(f"shutdown: requests still running after {self.graceful:g} s (a store does not answer?): "
                  "they fail; closing now", file=sys.stderr, flush=True)
            try:
                self.wm.close(timeout=CLOSE_SECONDS)
            finally:
                self._exit()
        # Closed or not, the process gets this long to end: a thread stuck in a store's driver
        # (a request's, or an executor's that the interpreter joins at exit) must not keep it.
        time.sleep(CLOSE_SECONDS + WATCHDOG_MARGIN)
        what = "exiting" if self.closed.is_set() else "closing took too long (a store does not answer?): exiting"
        print(f"shutdown: {what} now; threads still blocked on a store are dropped, packets not handed back go "
              "back when their lease runs out", file=sys.stderr, flush=True)
        self._exit()

    @staticmethod
    def _exit() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


class _StoppedWhileStarting(Exception):
    """SIGTERM / SIGINT reached a worker before it served (see _serve_workers)."""


def _stop_while_starting(sig: int, frame: Any) -> None:
    raise _StoppedWhileStarting


def _serve_workers(args: argparse.Namespace) -> int:
    """``--workers N``: bind the port here, fork N server processes that share it (the kernel hands
    each connection to one of them), forward SIGINT / SIGTERM to them, and exit with the worst of
    their exit codes. Each worker opens the data folder itself after the fork (nothing opened is
    shared): the stores already serve several processes at once (SQLite WAL and its locks,
    LanceDB's commit lock, scene leases for the background world updates). Workers run in their
    own session, so a terminal's Ctrl-C reaches them once, through this process; a worker whose
    parent died stops itself."""
    import socket
    import threading
    import time
    import traceback

    if not hasattr(os, "fork"):
        raise InvalidInputError("--workers", "needs os.fork (Linux, macOS); use --workers 1 here")
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(2048)
    sock.set_inheritable(True)
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pids: list[int] = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:  # a worker
            code = 1
            # A stop that arrives while the worker still opens the data folder (a slow start on a
            # busy machine) ends it cleanly (exit 0) instead of killing it; once uvicorn runs, its
            # own handlers take over (_serve_then_close).
            signal.signal(signal.SIGTERM, _stop_while_starting)
            signal.signal(signal.SIGINT, _stop_while_starting)
            try:
                os.setsid()

                def orphaned() -> None:
                    while os.getppid() == parent:
                        time.sleep(1.0)
                    os.kill(os.getpid(), signal.SIGTERM)

                threading.Thread(target=orphaned, name="worldgraph-parent-watch", daemon=True).start()
                _serve(args, sockets=[sock])
                code = 0
            except _StoppedWhileStarting:
                code = 0
            except BaseException:  # noqa: BLE001 - a worker reports and exits; the parent sees its code
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    sock.close()
    print(f"worldgraph serve: {args.workers} workers on http://{args.host}:{args.port} (pids "
          f"{', '.join(map(str, pids))})", file=sys.stderr)

    def forward(sig: int, frame: Any) -> None:
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    worst = 0
    for pid in pids:
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for old kernels
                continue
        code = os.waitstatus_to_exitcode(status)
        worst = max(worst, code if code >= 0 else 128 - code)
    return worst


def _serve_then_close(server: Any, wm: Any, sockets: list[Any] | None = None,
                      deadline: ShutdownDeadline | None = None) -> None:
    """Run uvicorn until SIGINT / SIGTERM (it stops accepting and gives in-flight requests
    ``shutdown_timeout_seconds``), then close the model within CLOSE_SECONDS: background world
    updates still running have their packets handed back as pending. Each merge is one
    transaction, so nothing is half-written; a second signal while closing exits at once, and an
    update it cut short stays pending (or running) for `worldgraph world retry`. ``deadline``
    (started by the first signal) ends the process if a store holds any of this up."""
    def after_uvicorn(sig: int, frame: Any) -> None:
        pass  # uvicorn re-raises the signal it stopped on once it returns; the model is still open

    def force(sig: int, frame: Any) -> None:
        print("forced exit: unfinished world updates stay pending for `worldgraph world retry`", file=sys.stderr)
        os._exit(128 + sig)

    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, after_uvicorn) for sig in handled}
    try:
        server.run(sockets=sockets)
    finally:
        for sig in handled:
            signal.signal(sig, force)
        if deadline is not None:
            deadline.closing.set()
        try:
            wm.close(timeout=CLOSE_SECONDS if deadline is not None else None)
            if deadline is not None:
                deadline.closed.set()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def cmd_mcp(args: argparse.Namespace) -> int:
    from worldgraph.cli.common import open_wm, os_user
    from worldgraph.names import check_tenant
    from worldgraph.server.mcp_server import build_mcp

    tenant = check_tenant(args.mcp_tenant or args.tenant, "--tenant")
    wm = open_wm(args, create=True)
    try:
        build_mcp(lambda: wm, tenant=tenant, actor=os_user()).run("stdio")
    finally:
        wm.close()
    return 0


# ---------------------------------------------------------------------- keys
@contextmanager
def _keys(args: argparse.Namespace, create: bool = False) -> Iterator[Any]:
    """The key registry of the data folder's store (no index or embedder is opened)."""
    from worldgraph.access import open_store
    from worldgraph.cli.common import check_data_dir
    from worldgraph.config import WorldGraphConfig
    from worldgraph.server.keys import ApiKeys

    check_data_dir(args.data, create)
    store = open_store(Path(args.data), args.graph, WorldGraphConfig.from_env())
    try:
        yield ApiKeys(store)
    finally:
        store.close()


def cmd_keys_create(args: argparse.Namespace) -> int:
    from worldgraph.cli.console import emit

    with _keys(args, create=True) as keys:
        key, record = keys.create(args.key_tenant, args.name, args.scopes)
    # the key alone on stdout, so KEY=$(worldgraph keys create ...) captures it; the note on stderr
    emit(args, {"key": key, **record}, lambda: (print(key), print(
        f"API key {record['id']} for tenant {record['tenant_id']!r} (scopes: "
        f"{', '.join(record['scopes'])}). It is shown only now: store it "
        f"safely.\nUse it as: Authorization: Bearer {key[:12]}...", file=sys.stderr)))
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    from worldgraph.cli.console import emit, table

    with _keys(args) as keys:
        records = keys.list(args.key_tenant)
    emit(args, records, lambda: table(
        [[r["id"], r["tenant_id"], r["name"] or "-", ",".join(r["scopes"]), r["created_at"][:19],
          (r["revoked_at"] or "-")[:19]]
         for r in records], ["id", "tenant", "name", "scopes", "created", "revoked"]) if records else print("(no keys)"))
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    from worldgraph.cli.console import emit

    with _keys(args) as keys:
        record = keys.revoke(keys.resolve_id(args.key_id))
    emit(args, record, lambda: print(f"revoked key {record['id']} of tenant {record['tenant_id']!r} "
                                     f"(at {record['revoked_at']})"))
    return 0
