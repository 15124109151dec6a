"""Processes and state files of the local Neo4j launcher (``worldgraph.neo4j_local``): locks, pid
and port checks, the state file, waiting for the server's ready line, stopping it. Standard
library only."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from worldgraph.locks import file_lock

READY_MARKER = "NEO4J_LOCAL_READY"
STATE_FILE = "server.json"
LOG_FILE = "neo4j-local.log"
ALTERNATIVES = (
    "or set NEO4J_URI to an existing Neo4j server, or run `docker compose up -d neo4j`"
)

# Child processes started by this Python process, so stop() can reap them (no zombies).
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class Neo4jLocalError(RuntimeError):
    """A problem starting, stopping or building the local Neo4j; the message says what to do."""


def require_tool(name: str, purpose: str) -> str:
    path = shutil.which(name)
    if path is None:
        hint = {
            "java": "install OpenJDK 17 (e.g. `apt-get install openjdk-17-jre-headless`)",
            "mvn": "install Maven 3.8+ (e.g. `apt-get install maven`)",
        }.get(name, f"install {name}")
        raise Neo4jLocalError(
            f"{name} not found on PATH (needed to {purpose}): {hint}, {ALTERNATIVES}."
        )
    return path


def locked(lock_file: Path) -> contextlib.AbstractContextManager[None]:
    """Hold an exclusive lock on ``lock_file`` for the block (worldgraph.locks: filelock)."""
    return file_lock(lock_file, poll_interval=0.05)


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a live (non-zombie) process; reaps it if it is our finished child."""
    child = CHILDREN.get(pid)
    if child is not None:
        if child.poll() is None:
            return True
        CHILDREN.pop(pid, None)
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


def is_our_server(pid: int) -> bool:
    """Best-effort guard against pid reuse: on Linux check the command line names our jar."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    try:
        return "neo4j-local" in cmdline.read_bytes().decode(errors="replace")
    except OSError:
        return pid_alive(pid)  # no /proc (macOS): trust the pid


def read_state(sdir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((sdir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_state(sdir: Path, state: dict[str, Any]) -> None:
    tmp = sdir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, sdir / STATE_FILE)


def live_state(sdir: Path) -> dict[str, Any] | None:
    """The state file if it describes a running server, else None (a stale file is removed)."""
    state = read_state(sdir)
    if state is None:
        return None
    pid = state.get("pid")
    if isinstance(pid, int) and pid_alive(pid) and is_our_server(pid):
        return state
    with contextlib.suppress(OSError):
        (sdir / STATE_FILE).unlink()
    return None


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def wait_ready(
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
                f"(last lines below){hint_for(log)}.\n{tail(log)}"
            )
        if time.monotonic() > deadline:
            # The READY line is authoritative; an open port alone is accepted only at the very end.
            if port_open(port):
                return uri
            raise Neo4jLocalError(
                f"the local Neo4j did not become ready within {timeout:.0f}s; see {log} and the "
                f"Neo4j logs in the data dir (logs/debug.log); try a larger timeout.\n{tail(log)}"
            )
        time.sleep(0.25)


def hint_for(log: Path) -> str:
    text = tail(log, 80)
    if "Address already in use" in text:
        return "; the port is already in use, choose another with --port"
    if "StoreLock" in text or "Lock file has been locked" in text or "FileLock" in text:
        return "; the data directory is in use by another Neo4j, stop it or use another --data"
    if "UnsupportedClassVersionError" in text:
        return "; Java 17 or newer is required"
    return ""


def terminate(pid: int, timeout: float) -> bool:
    """SIGTERM ``pid``, wait up to ``timeout`` seconds, then SIGKILL. True if it stopped cleanly."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        CHILDREN.pop(pid, None)
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        if not pid_alive(pid):
            break
        time.sleep(0.1)
    return False

