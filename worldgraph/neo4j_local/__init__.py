"""Run a real Neo4j 5.26 (Community) on this machine without Docker.

The server is the small Maven project in ``tools/neo4j-local`` (shipped inside the wheel too): an
embedded Neo4j DBMS with the Bolt connector on ``127.0.0.1`` and authentication disabled (any
credentials are accepted). This module builds it with Maven when needed
(``worldgraph.neo4j_local.jar``), launches it detached in the background, waits until it accepts
Bolt connections and keeps a state file so later calls (and other processes) can find and stop it
(``worldgraph.neo4j_local.process``).

State lives in one directory per server: the ``home=`` argument, else the env var
``WORLDGRAPH_NEO4J_HOME``, else ``.neo4j-local`` in the checkout (``worldgraph neo4j`` uses
``<data folder>/neo4j-local``). It belongs to a checkout or data folder, not to the user, so
stopping one checkout's server never stops another's:

* ``server.json`` -- pid, port, uri, data dir, log path, start time (present while running)
* ``neo4j-local.log`` -- the JVM's stdout/stderr (Neo4j's own logs are in ``<data dir>/logs/``)
* ``data/`` -- the default data directory (Neo4j home: ``data/databases``, ``data/transactions``)

Command line::

    python -m worldgraph.neo4j_local start [--port 7687] [--data DIR] [--home DIR] [--json]
    python -m worldgraph.neo4j_local status [--json]
    python -m worldgraph.neo4j_local stop
    python -m worldgraph.neo4j_local build [--force]

Other environment variables: ``WORLDGRAPH_NEO4J_PROJECT`` (path of the Maven project, default
``<repo>/tools/neo4j-local``), ``WORLDGRAPH_NEO4J_JAVA_OPTS`` (JVM options, default
``-Xms256m -Xmx1g``), ``WORLDGRAPH_NEO4J_PAGECACHE`` (page cache size, default ``256m``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from worldgraph.bundled import is_checkout, neo4j_project_dir
from worldgraph.config import LauncherSettings
from worldgraph.neo4j_local.jar import build, jar_path, project_dir
from worldgraph.neo4j_local.process import (
    CHILDREN,
    LOG_FILE,
    STATE_FILE,
    Neo4jLocalError,
    live_state,
    locked,
    port_open,
    require_tool,
    terminate,
    wait_ready,
    write_state,
)

__all__ = [
    "Neo4jLocalError",
    "DEFAULT_PORT",
    "state_dir",
    "project_dir",
    "jar_path",
    "build",
    "start",
    "stop",
    "status",
    "main",
]

DEFAULT_PORT = 7687
DEFAULT_JAVA_OPTS = "-Xms256m -Xmx1g -XX:+ExitOnOutOfMemoryError"
DEFAULT_PAGECACHE = "256m"
# Also in the jar manifest (Add-Opens); repeated so the jar still works if launched some other way.
_ADD_OPENS = (
    "java.base/java.nio",
    "java.base/java.io",
    "java.base/sun.nio.ch",
    "java.base/java.lang",
    "java.base/java.util",
    "java.base/java.util.concurrent",
)


# --------------------------------------------------------------------------------------- paths


def state_dir(home: str | os.PathLike[str] | None = None) -> Path:
    """The state directory: ``home``, else env ``WORLDGRAPH_NEO4J_HOME``, else ``.neo4j-local`` in the
    checkout (or, installed from a wheel, in the current folder). Never per user: each checkout (and
    `worldgraph neo4j`, each data folder) has its own server, and stopping one leaves the others."""
    if home is not None:
        return Path(home).expanduser().resolve()
    env = LauncherSettings.from_env().home
    if env:
        return Path(env).expanduser().resolve()
    project = neo4j_project_dir()
    base = project.parent.parent if is_checkout(project) else Path.cwd()
    return (base / ".neo4j-local").resolve()


# --------------------------------------------------------------------------------------- start / stop


def start(
    port: int = DEFAULT_PORT,
    data_dir: str | os.PathLike[str] | None = None,
    timeout: float = 180,
    *,
    home: str | os.PathLike[str] | None = None,
) -> str:
    """Start the local Neo4j (building it first if needed) and return its Bolt URI.

    If the server of this state directory is already running on ``port`` its URI is returned and
    nothing new is started. The JVM runs detached (it outlives this Python process) with its
    stdout/stderr in ``<state dir>/neo4j-local.log``.

    Args:
        port: Bolt port on 127.0.0.1.
        data_dir: Neo4j data/home directory; default ``<state dir>/data``. Data survives restarts.
        timeout: seconds to wait for the server to accept Bolt connections.
        home: state directory (default: see :func:`state_dir`).

    Raises:
        Neo4jLocalError: java/mvn missing, the port is taken, another server of this state
            directory runs on a different port, or the server did not come up in time.
    """
    sdir = state_dir(home)
    sdir.mkdir(parents=True, exist_ok=True)
    with locked(sdir / ".lock"):
        state = live_state(sdir)
        if state is not None:
            if state.get("port") == port:
                return str(state["uri"])
            raise Neo4jLocalError(
                f"a local Neo4j from {sdir} is already running on port {state.get('port')} "
                f"(pid {state.get('pid')}); stop it first (`python -m worldgraph.neo4j_local stop`) "
                f"or use another state dir (WORLDGRAPH_NEO4J_HOME)."
            )
        if port_open(port):
            raise Neo4jLocalError(
                f"port {port} on 127.0.0.1 is already in use by another process; choose another "
                f"port (--port N), or if that is a Neo4j server, point NEO4J_URI at "
                f"bolt://127.0.0.1:{port} instead."
            )

        java = require_tool("java", "run the local Neo4j")
        jar = build()
        data = Path(data_dir).expanduser().resolve() if data_dir is not None else sdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        log = sdir / LOG_FILE

        settings = LauncherSettings.from_env()
        java_opts = shlex.split(DEFAULT_JAVA_OPTS if settings.java_opts is None else settings.java_opts)
        cmd = [
            java,
            *java_opts,
            *(f"--add-opens={m}=ALL-UNNAMED" for m in _ADD_OPENS),
            "-Dfile.encoding=UTF-8",
            "-jar",
            str(jar),
            "--port",
            str(port),
            "--data",
            str(data),
            "--pagecache",
            DEFAULT_PAGECACHE if settings.pagecache is None else settings.pagecache,
        ]

        with open(log, "ab") as fh:
            fh.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(cmd)}\n".encode())
            fh.flush()
            offset = fh.tell()
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # detached: no terminal signals, outlives this process
                close_fds=True,
            )
        CHILDREN[proc.pid] = proc
        uri = f"bolt://127.0.0.1:{port}"
        started = time.monotonic()
        try:
            uri = wait_ready(proc, log, offset, port, uri, timeout)
        except BaseException:
            terminate(proc.pid, 20)
            raise
        write_state(
            sdir,
            {
                "pid": proc.pid,
                "port": port,
                "uri": uri,
                "data_dir": str(data),
                "log": str(log),
                "neo4j_logs": str(data / "logs"),
                "started_at": time.time(),
                "startup_seconds": round(time.monotonic() - started, 1),
            },
        )
        return uri


def stop(timeout: float = 60, *, home: str | os.PathLike[str] | None = None) -> bool:
    """Stop the local Neo4j of the state directory: SIGTERM (clean shutdown), SIGKILL after ``timeout``.

    Returns True if a server was running (and is now stopped), False if none was running.
    The state file is removed either way.
    """
    sdir = state_dir(home)
    with locked(sdir / ".lock"):
        state = live_state(sdir)
        if state is None:
            return False
        clean = terminate(int(state["pid"]), timeout)
        with contextlib.suppress(OSError):
            (sdir / STATE_FILE).unlink()
        if not clean:
            with contextlib.suppress(OSError), open(sdir / LOG_FILE, "a") as fh:
                fh.write(f"neo4j-local: killed with SIGKILL after {timeout:.0f}s\n")
        return True


def status(*, home: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Describe the local Neo4j of the state directory.

    Returns a dict with ``running`` (bool), ``pid``, ``port``, ``uri``, ``data_dir``, ``log``
    (None when not running, except ``log``/``data_dir`` which show the defaults) and ``home``.
    """
    sdir = state_dir(home)
    state = live_state(sdir) if sdir.is_dir() else None
    if state is None:
        return {
            "running": False,
            "pid": None,
            "port": None,
            "uri": None,
            "data_dir": str(sdir / "data"),
            "log": str(sdir / LOG_FILE),
            "home": str(sdir),
        }
    return {
        "running": True,
        "pid": state.get("pid"),
        "port": state.get("port"),
        "uri": state.get("uri"),
        "data_dir": state.get("data_dir"),
        "log": state.get("log"),
        "home": str(sdir),
        "accepting": port_open(int(state.get("port") or 0)),
    }


# --------------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m worldgraph.neo4j_local start|stop|status|build``; returns the exit code.

    Exit codes: 0 success (``status``: running), 1 error, 3 ``status``: not running.
    """
    parser = argparse.ArgumentParser(
        prog="python -m worldgraph.neo4j_local",
        description="Run a local Neo4j 5.26 (no Docker; needs Java 17 and Maven).",
    )
    parser.add_argument("command", choices=["start", "stop", "status", "build"])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="Bolt port (default 7687)")
    parser.add_argument("--data", default=None, help="data directory (default <state dir>/data)")
    parser.add_argument("--home", default=None,
                        help="state directory (default WORLDGRAPH_NEO4J_HOME, else .neo4j-local in the checkout)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds to wait (start: 180, stop: 60)")
    parser.add_argument("--force", action="store_true", help="build: rebuild even if up to date")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(list(argv) if argv is not None else None)

    def emit(obj: dict[str, Any], text: str) -> None:
        print(json.dumps(obj) if args.json else text, flush=True)

    try:
        if args.command == "start":
            was = status(home=args.home)
            uri = start(args.port, args.data, args.timeout or 180, home=args.home)
            st = status(home=args.home)
            already = bool(was["running"]) and was["port"] == args.port
            emit({**st, "already_running": already},
                 f"{'already running' if already else 'started'}: {uri} (pid {st['pid']}, "
                 f"data {st['data_dir']}, log {st['log']})")
        elif args.command == "stop":
            stopped = stop(args.timeout or 60, home=args.home)
            emit({"stopped": stopped}, "stopped" if stopped else "not running")
        elif args.command == "status":
            st = status(home=args.home)
            text = (
                f"running: {st['uri']} (pid {st['pid']}, data {st['data_dir']}, log {st['log']})"
                if st["running"]
                else f"not running (state dir {st['home']})"
            )
            emit(st, text)
            return 0 if st["running"] else 3
        else:
            jar = build(force=args.force)
            emit({"jar": str(jar)}, f"built: {jar}")
    except Neo4jLocalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
