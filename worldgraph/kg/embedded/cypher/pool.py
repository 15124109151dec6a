"""The query children of one embedded store: spawned, confined, reused per projection file,
killed at their deadline, replaced after a crash (``child`` says what a child is).

- **One file per child.** A child opens one projection file (its last Landlock ruleset allows
  no other) and answers queries on it until it is closed. ``query`` takes an idle child already
  on the file, else a *spare* (a child spawned ahead, confined and with the engine loaded, not yet
  bound to a file), else spawns one. A spare is spawned again in the background whenever one is
  taken, so the first query of a tenant or after a refresh does not wait for an interpreter to
  start (``spares``).
- **Deadlines.** ``query`` waits for the answer until the deadline; then it kills the child
  (SIGKILL), counts it (``killed_at_deadline``) and raises ``ChildTimeout``: whatever the query
  does, the caller has its answer by the deadline plus the time a kill takes. The engine's own
  timeout is set to the same deadline, so a query the engine can interrupt ends without a kill.
- **Crashes.** A child that dies by itself (a signal, an exit) raises ``ChildCrashed`` and is
  counted (``crashed``); nothing else is affected.
- **Writes.** ``pause(path)`` before a file is written in place: its idle children close their
  database and let go of the file's lock, and open it again at their next query (no new child).
- **Closing.** ``close(tenant_id=T)`` or ``close(path=F)`` kills every child holding tenant T's
  projections or the file F, busy or not (its caller's query fails with ``ChildClosed`` and is
  retried on a fresh projection): a purge, or anything that must stop every reader of a file,
  calls it. ``retire(path)`` is the gentle form for a refresh: idle children go now, busy ones
  when their query ends.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worldgraph.config import PACKAGE_PARENT, child_environment
from worldgraph.kg.cypher_limits import COUNTERS, KILLED_AT_DEADLINE

__all__ = ["ChildClosed", "ChildCrashed", "ChildPool", "ChildTimeout", "PoolSettings"]

log = logging.getLogger("worldgraph")

START_TIMEOUT = 60.0  # seconds a new child may take to start (an interpreter and the engine's import)
_KEEP_ENV = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "SYSTEMROOT", "TMPDIR")


class ChildTimeout(Exception):
    """The query ran to its deadline: its child was killed."""


class ChildCrashed(Exception):
    """The child died while it ran the query (the engine crashed, or it was killed from outside)."""

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


class ChildClosed(Exception):
    """The child was closed (its tenant purged, its file replaced) while it ran the query, or its
    file could not be opened (``open_failed``: deleted meanwhile, or damaged): run the query again
    on the tenant's current projection."""

    def __init__(self, how: str, open_failed: bool = False) -> None:
        super().__init__(how)
        self.open_failed = open_failed


@dataclass
class PoolSettings:
    sandbox: bool = True  # Landlock and seccomp (False where the kernel has no Landlock)
    # how much lower a child's CPU priority is than the server's (3: about half the CPU weight; 10
    # starved a child to a few percent of a core on a machine with 20 runnable processes)
    nice: int = 3
    threads: int = 2  # the engine's threads per query
    spares: int = 1  # children kept started ahead
    max_idle: int = 8  # idle children kept open on files (the least recently used beyond are ended)
    roots: list[str] = field(default_factory=list)  # folders holding projection files (first ruleset)


class _Child:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.path: str | None = None
        self.tenant: str | None = None
        self.busy = False
        self.retired = False  # end it when its query is done
        self.closed = False  # killed by close(): its caller retries
        self.ready: dict[str, Any] = {}
        self.opened: dict[str, Any] = {}  # what it said when it last opened its file ({}: not open)
        self.first_open: dict[str, Any] = {}  # ... when it first did (and confined itself to it)
        self.used = time.monotonic()
        self._buf = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message, ensure_ascii=True).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise ChildCrashed(self.how()) from None

    def recv(self, deadline: float, limit: int) -> dict[str, Any]:
        """The next message, by ``deadline`` (ChildTimeout) and at most ``limit`` bytes."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildTimeout
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise ChildCrashed(self.how())
            self._buf += chunk
            if len(self._buf) > limit:
                raise ChildCrashed(f"answered more than {limit} bytes")
        line, _, self._buf = self._buf.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    def how(self) -> str:
        """How the child ended (waits a moment for it)."""
        try:
            code = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        if code < 0:
            try:
                return f"killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with status {code}"

    def kill(self) -> None:
        """SIGKILL, without waiting: a child that holds gigabytes takes seconds to give them back
        before it ends (measured under load), and the caller has its answer now; a thread reaps it."""
        try:
            self.proc.kill()
        except OSError:
            pass
        threading.Thread(target=self.proc.wait, name="worldgraph-cypher-reaper", daemon=True).start()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class ChildPool:
    """The query children of one store (module docstring)."""

    def __init__(self, settings: PoolSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._children: list[_Child] = []
        self._spares: list[_Child] = []
        self._spawning = False
        self._closed = False
        self.killed_at_deadline = 0
        self.crashed = 0
        self.spawned = 0

    # ------------------------------------------------------------------ queries
    def query(self, tenant_id: str, path: Path, message: dict[str, Any], *, deadline: float, limit: int,
              opening: dict[str, Any]) -> dict[str, Any]:
        """The child's answer to ``message`` (a query) on the file ``path``, by ``deadline`` (extended by
        the time a child took to start, when one had to), at most ``limit`` bytes. ``opening``: the
        engine's sizes for a child that opens the file (``child``'s open). ChildTimeout,
        ChildCrashed, ChildClosed."""
        started = time.monotonic()
        child = self._take(tenant_id, str(path))
        try:
            if not child.opened:  # (starting a child and opening its file are not the query's time)
                child.send({"op": "open", "path": str(path), "threads": self.settings.threads, **opening})
                opened = child.recv(time.monotonic() + START_TIMEOUT, 1 << 16)
                if "error" in opened:
                    self._end(child)
                    raise ChildClosed(f"the projection could not be opened: {opened['error']}", open_failed=True)
                child.opened = {**opened, "threads_at_restrict": opened.get("threads_at_restrict") or
                                child.first_open.get("threads_at_restrict")}
                child.first_open = child.first_open or opened
                deadline += time.monotonic() - started
            child.send({**message, "timeout_ms": max(1, int((deadline - time.monotonic()) * 1000))})
            answer = child.recv(deadline, limit)
        except ChildTimeout:
            with self._lock:
                self.killed_at_deadline += 1
            COUNTERS.add(KILLED_AT_DEADLINE)
            self._end(child)
            raise
        except ChildCrashed as exc:
            self._end(child)
            if child.closed:
                raise ChildClosed(str(exc)) from None
            with self._lock:
                self.crashed += 1
            raise
        self._release(child)
        return answer

    def _take(self, tenant_id: str, path: str) -> _Child:
        with self._lock:
            if self._closed:
                raise ChildClosed("the store is closed")
            for child in self._children:
                if child.path == path and not child.busy and not child.retired and child.proc.poll() is None:
                    child.busy, child.used = True, time.monotonic()
                    return child
            spare = self._spares.pop(0) if self._spares else None
        if spare is None or spare.proc.poll() is not None:
            spare = self._spawn()
        self._spawn_spares_later()
        spare.path, spare.tenant, spare.busy = path, tenant_id, True
        with self._lock:
            self._children.append(spare)
        return spare

    def _release(self, child: _Child) -> None:
        with self._lock:
            child.busy, child.used = False, time.monotonic()
            if child.retired or child.closed:
                self._children.remove(child)
                ended = [child]
            else:
                idle = sorted((c for c in self._children if not c.busy), key=lambda c: c.used)
                ended = idle[:max(0, len(idle) - self.settings.max_idle)]
                for c in ended:
                    self._children.remove(c)
        for c in ended:
            c.kill()

    def _end(self, child: _Child) -> None:
        child.kill()
        with self._lock:
            if child in self._children:
                self._children.remove(child)

    # ------------------------------------------------------------------ spawning
    def _spawn(self) -> _Child:
        """A new child, confined and ready (RuntimeError if it cannot start)."""
        env = {k: v for k, v in child_environment(pythonpath_first=PACKAGE_PARENT).items()
               if k in _KEEP_ENV}
        settings = {"sandbox": self.settings.sandbox, "nice": self.settings.nice, "roots": self.settings.roots}
        proc = subprocess.Popen([sys.executable, "-m", "worldgraph.kg.embedded.cypher.child", json.dumps(settings)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                close_fds=True, env=env, cwd="/")
        child = _Child(proc)
        try:
            ready = child.recv(time.monotonic() + START_TIMEOUT, 1 << 16)
        except (ChildTimeout, ChildCrashed) as exc:
            child.kill()
            raise RuntimeError(f"a Cypher query child could not start: {exc}") from None
        if "error" in ready:
            child.kill()
            raise RuntimeError(f"a Cypher query child could not confine itself: {ready['error']}")
        child.ready = ready
        with self._lock:
            self.spawned += 1
        return child

    def _spawn_spares_later(self) -> None:
        with self._lock:
            if self._spawning or self._closed or len(self._spares) >= self.settings.spares:
                return
            self._spawning = True
        threading.Thread(target=self._fill_spares, name="worldgraph-cypher-spare", daemon=True).start()

    def _fill_spares(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._closed or len(self._spares) >= self.settings.spares:
                        return
                try:
                    child = self._spawn()
                except RuntimeError as exc:
                    log.warning("%s", exc)
                    return
                with self._lock:
                    if self._closed:
                        kill = True
                    else:
                        kill = False
                        self._spares.append(child)
                if kill:
                    child.kill()
        finally:
            with self._lock:
                self._spawning = False

    def warm(self) -> None:
        """Start the spare children now (in the background)."""
        self._spawn_spares_later()

    # ------------------------------------------------------------------ closing
    def close(self, tenant_id: str | None = None, path: str | Path | None = None) -> int:
        """Kill every child holding a projection of ``tenant_id``, or the file ``path`` (both None:
        every child), busy or not; returns how many. A busy child's caller gets ChildClosed and runs
        its query again on the tenant's current projection."""
        return len(self._select(tenant_id, path, busy_too=True))

    def pause(self, path: str | Path) -> int:
        """Before ``path`` is written in place: the idle children on it close their database and let
        go of the file's lock, staying bound to it (the next query opens it again, without a new
        child); busy ones end when their query ends. Returns how many are still busy on it (the
        writer then writes a copy)."""
        target = str(path)
        with self._lock:
            chosen = [c for c in self._children if c.path == target and not c.busy and not c.retired]
            for c in chosen:
                c.busy = True
            for c in self._children:
                if c.path == target and c.busy and c not in chosen:
                    c.retired = True
            busy = sum(1 for c in self._children if c.path == target and c.busy and c not in chosen)
        for c in chosen:
            try:
                if c.opened:
                    c.send({"op": "close"})
                    if "closed" not in c.recv(time.monotonic() + 5.0, 1 << 16):
                        raise ChildCrashed("did not close its database")
                c.opened = {}
            except (ChildCrashed, ChildTimeout):
                self._end(c)
                continue
            with self._lock:
                c.busy = False
        return busy

    def retire(self, path: str | Path) -> int:
        """End the children on ``path`` (a file about to be changed or replaced): the idle ones now,
        the busy ones when their query ends. Returns how many are still busy on it."""
        self._select(None, path, busy_too=False)
        with self._lock:
            return sum(1 for c in self._children if c.path == str(path) and c.busy)

    def _select(self, tenant_id: str | None, path: str | Path | None, busy_too: bool) -> list[_Child]:
        target = None if path is None else str(path)
        with self._lock:
            chosen = [c for c in self._children
                      if (tenant_id is None or c.tenant == tenant_id) and (target is None or c.path == target)]
            ended = []
            for c in chosen:
                if c.busy and not busy_too:
                    c.retired = True
                    continue
                c.closed = True
                self._children.remove(c)
                ended.append(c)
        for c in ended:
            c.kill()
        return ended

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            spares, self._spares = self._spares, []
        for c in spares:
            c.kill()
        self.close()

    # ------------------------------------------------------------------ looking in
    def children(self, tenant_id: str | None = None) -> list[dict[str, Any]]:
        """The live children (pid, tenant, path, busy, and what each said when it started and opened)."""
        with self._lock:
            return [{"pid": c.pid, "tenant_id": c.tenant, "path": c.path, "busy": c.busy, "ready": c.ready,
                     "opened": c.opened} for c in self._children if tenant_id is None or c.tenant == tenant_id]

    def spares(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{"pid": c.pid, "ready": c.ready} for c in self._spares]

    def counters(self) -> dict[str, int]:
        with self._lock:
            return {"killed_at_deadline": self.killed_at_deadline, "crashed": self.crashed, "spawned": self.spawned}

