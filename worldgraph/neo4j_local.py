"""Run a real Neo4j 5.26 (Community) on this machine without Docker.

The server is the small Maven project in ``tools/neo4j-local``: an embedded Neo4j DBMS with the Bolt
connector on ``127.0.0.1`` and authentication disabled (any credentials are accepted). This module
builds it with Maven when needed, launches it detached in the background, waits until it accepts Bolt
connections and keeps a state file so later calls (and other processes) can find and stop it.

State lives in one directory per server (default ``~/.worldgraph/neo4j-local/``, overridable with the
env var ``WORLDGRAPH_NEO4J_HOME`` or the ``home=`` argument):

* ``server.json`` -- pid, port, uri, data dir, log path, start time (present while running)
* ``neo4j-local.log`` -- the JVM's stdout/stderr (Neo4j's own logs are in ``<data dir>/logs/``)
* ``data/`` -- the default data directory (Neo4j home: ``data/databases``, ``data/transactions``)

Command line::

    python -m worldgraph.neo4j_local start [--port 7687] [--data DIR] [--json]
    python -m worldgraph.neo4j_local status [--json]
    python -m worldgraph.neo4j_local stop
    python -m worldgraph.neo4j_local build [--force]

Other environment variables: ``WORLDGRAPH_NEO4J_PROJECT`` (path of the Maven project, default
``<repo>/tools/neo4j-local``), ``WORLDGRAPH_NEO4J_JAVA_OPTS`` (JVM options, default
``-Xms256m -Xmx1g``), ``WORLDGRAPH_NEO4J_PAGECACHE`` (page cache size, default ``256m``).
Only the standard library is used.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

try:  # POSIX only; without it concurrent start()/build() calls are not serialised.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

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
READY_MARKER = "NEO4J_LOCAL_READY"
STATE_FILE = "server.json"
LOG_FILE = "neo4j-local.log"
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
_ALTERNATIVES = (
    "or set NEO4J_URI to an existing Neo4j server, or run `docker compose up -d neo4j`"
)

# Child processes started by this Python process, so stop() can reap them (no zombies).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class Neo4jLocalError(RuntimeError):
    """A problem starting, stopping or building the local Neo4j; the message says what to do."""


# --------------------------------------------------------------------------------------- paths


def state_dir(home: str | os.PathLike[str] | None = None) -> Path:
    """The state directory: ``home``, else env ``WORLDGRAPH_NEO4J_HOME``, else ``~/.worldgraph/neo4j-local``."""
    if home is not None:
        return Path(home).expanduser().resolve()
    env = os.environ.get("WORLDGRAPH_NEO4J_HOME")
    if env:
        return Path(env).expanduser().resolve()
    return Path.home() / ".worldgraph" / "neo4j-local"


def project_dir() -> Path:
    """The Maven project (``tools/neo4j-local`` in the repository, or env ``WORLDGRAPH_NEO4J_PROJECT``)."""
    env = os.environ.get("WORLDGRAPH_NEO4J_PROJECT")
    if env:
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parent.parent / "tools" / "neo4j-local"


def jar_path() -> Path:
    """The runnable jar produced by the build (its dependencies are in ``lib/`` next to it)."""
    return project_dir() / "target" / "neo4j-local.jar"


# --------------------------------------------------------------------------------------- helpers


def _require_tool(name: str, purpose: str) -> str:
    path = shutil.which(name)
    if path is None:
        hint = {
            "java": "install OpenJDK 17 (e.g. `apt-get install openjdk-17-jre-headless`)",
            "mvn": "install Maven 3.8+ (e.g. `apt-get install maven`)",
        }.get(name, f"install {name}")
        raise Neo4jLocalError(
            f"{name} not found on PATH (needed to {purpose}): {hint}, {_ALTERNATIVES}."
        )
    return path


@contextlib.contextmanager
def _locked(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``lock_file`` (no-op where fcntl is unavailable)."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a+") as fh:
        if fcntl is not None:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _pid_alive(pid: int) -> bool:
    """True if ``pid`` is a live (non-zombie) process; reaps it if it is our finished child."""
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is None:
            return True
        _CHILDREN.pop(pid, None)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError, IndexError):
        if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _is_our_server(pid: int) -> bool:
    """Best-effort guard against pid reuse: on Linux check the command line names our jar."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    try:
        return "neo4j-local" in cmdline.read_bytes().decode(errors="replace")
    except OSError:
        return _pid_alive(pid)  # no /proc (macOS): trust the pid


def _read_state(sdir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((sdir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_state(sdir: Path, state: dict[str, Any]) -> None:
    tmp = sdir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, sdir / STATE_FILE)


def _live_state(sdir: Path) -> dict[str, Any] | None:
    """The state file if it describes a running server, else None (a stale file is removed)."""
    state = _read_state(sdir)
    if state is None:
        return None
    pid = state.get("pid")
    if isinstance(pid, int) and _pid_alive(pid) and _is_our_server(pid):
        return state
    with contextlib.suppress(OSError):
        (sdir / STATE_FILE).unlink()
    return None


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------------------- build


def _needs_build(project: Path) -> bool:
    jar = project / "target" / "neo4j-local.jar"
    lib = project / "target" / "lib"
    if not jar.is_file() or not lib.is_dir() or not any(lib.glob("neo4j-*.jar")):
        return True
    built = jar.stat().st_mtime
    sources = [project / "pom.xml", *(project / "src").rglob("*")]
    return any(p.is_file() and p.stat().st_mtime > built for p in sources)


def build(force: bool = False) -> Path:
    """Build ``tools/neo4j-local`` with Maven if the jar is missing or older than its sources.

    The first build downloads Neo4j and its dependencies (~175 MB into ``~/.m2``, about 2 minutes);
    later builds are local. Returns the path of the runnable jar.

    Raises:
        Neo4jLocalError: if ``mvn``/``java`` are not on PATH, the project is missing, or Maven fails.
    """
    project = project_dir()
    if not (project / "pom.xml").is_file():
        raise Neo4jLocalError(
            f"Maven project not found at {project} (set WORLDGRAPH_NEO4J_PROJECT to the "
            f"tools/neo4j-local directory of a worldgraph checkout), {_ALTERNATIVES}."
        )
    _require_tool("java", "run the local Neo4j")
    jar = project / "target" / "neo4j-local.jar"
    with _locked(project / "target" / ".build.lock"):
        if not force and not _needs_build(project):
            return jar
        mvn = _require_tool("mvn", "build tools/neo4j-local")
        cmd = [mvn, "-q", "-B", "package"]
        proc = subprocess.run(
            cmd, cwd=project, stdin=subprocess.DEVNULL, capture_output=True, text=True
        )
        if proc.returncode != 0 or not jar.is_file():
            out = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
            raise Neo4jLocalError(
                f"building the local Neo4j failed (`{' '.join(cmd)}` in {project}, exit "
                f"{proc.returncode}); Maven needs access to Maven Central the first time, "
                f"{_ALTERNATIVES}.\n{out}"
            )
        jar.touch()  # the jar plugin keeps an up-to-date jar's old mtime; mark it as fresh
        return jar


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
    with _locked(sdir / ".lock"):
        state = _live_state(sdir)
        if state is not None:
            if state.get("port") == port:
                return str(state["uri"])
            raise Neo4jLocalError(
                f"a local Neo4j from {sdir} is already running on port {state.get('port')} "
                f"(pid {state.get('pid')}); stop it first (`python -m worldgraph.neo4j_local stop`) "
                f"or use another state dir (WORLDGRAPH_NEO4J_HOME)."
            )
        if _port_open(port):
            raise Neo4jLocalError(
                f"port {port} on 127.0.0.1 is already in use by another process; choose another "
                f"port (--port N), or if that is a Neo4j server, point NEO4J_URI at "
                f"bolt://127.0.0.1:{port} instead."
            )

        java = _require_tool("java", "run the local Neo4j")
        jar = build()
        data = Path(data_dir).expanduser().resolve() if data_dir is not None else sdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        log = sdir / LOG_FILE

        java_opts = shlex.split(os.environ.get("WORLDGRAPH_NEO4J_JAVA_OPTS", DEFAULT_JAVA_OPTS))
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
            os.environ.get("WORLDGRAPH_NEO4J_PAGECACHE", DEFAULT_PAGECACHE),
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
        _CHILDREN[proc.pid] = proc
        uri = f"bolt://127.0.0.1:{port}"
        started = time.monotonic()
        try:
            uri = _wait_ready(proc, log, offset, port, uri, timeout)
        except BaseException:
            _terminate(proc.pid, 20)
            raise
        _write_state(
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


def _wait_ready(
    proc: subprocess.Popen[bytes], log: Path, offset: int, port: int, uri: str, timeout: float
) -> str:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError):
            with open(log, "rb") as fh:
                fh.seek(offset)
                for raw in fh.read().decode(errors="replace").splitlines():
                    if raw.startswith(READY_MARKER):
                        parts = raw.split()
                        return parts[1] if len(parts) > 1 else uri
        code = proc.poll()
        if code is not None:
            raise Neo4jLocalError(
                f"the local Neo4j exited with code {code} before it was ready; see {log} "
                f"(last lines below){_hint_for(log)}.\n{_tail(log)}"
            )
        if time.monotonic() > deadline:
            # The READY line is authoritative; an open port alone is accepted only at the very end.
            if _port_open(port):
                return uri
            raise Neo4jLocalError(
                f"the local Neo4j did not become ready within {timeout:.0f}s; see {log} and the "
                f"Neo4j logs in the data dir (logs/debug.log); try a larger timeout.\n{_tail(log)}"
            )
        time.sleep(0.25)


def _hint_for(log: Path) -> str:
    text = _tail(log, 80)
    if "Address already in use" in text:
        return "; the port is already in use, choose another with --port"
    if "StoreLock" in text or "Lock file has been locked" in text or "FileLock" in text:
        return "; the data directory is in use by another Neo4j, stop it or use another --data"
    if "UnsupportedClassVersionError" in text:
        return "; Java 17 or newer is required"
    return ""


def _terminate(pid: int, timeout: float) -> bool:
    """SIGTERM ``pid``, wait up to ``timeout`` seconds, then SIGKILL. True if it stopped cleanly."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        _CHILDREN.pop(pid, None)
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        if not _pid_alive(pid):
            break
        time.sleep(0.1)
    return False


def stop(timeout: float = 60, *, home: str | os.PathLike[str] | None = None) -> bool:
    """Stop the local Neo4j of the state directory: SIGTERM (clean shutdown), SIGKILL after ``timeout``.

    Returns True if a server was running (and is now stopped), False if none was running.
    The state file is removed either way.
    """
    sdir = state_dir(home)
    with _locked(sdir / ".lock"):
        state = _live_state(sdir)
        if state is None:
            return False
        clean = _terminate(int(state["pid"]), timeout)
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
    state = _live_state(sdir) if sdir.is_dir() else None
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
        "accepting": _port_open(int(state.get("port") or 0)),
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
    parser.add_argument("--home", default=None, help="state directory (default WORLDGRAPH_NEO4J_HOME or ~/.worldgraph/neo4j-local)")
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
                 f"{'already running' if already else 'started'}: {uri} (pid {st['pid']}, data {st['data_dir']}, log {st['log']})")
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
