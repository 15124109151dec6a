"""The maintenance child process, kept between runs.

Index maintenance (ANN builds, compaction, folding new rows into the indexes) runs in a child
process (maintenance.py says why). A child started per run spent more CPU importing LanceDB
(~1.7 CPU-seconds) than folding the rows written since the previous run (~0.11 CPU-seconds per
1,000 rows at 1M), and during a bulk ingest runs follow each other back to back: the child is
therefore kept, and given each run's tasks as one JSON line on its stdin, answered by one line
on its stdout (``{"ok": true, "steps": [...]}``, the run's timed steps, or ``{"error": "..."}``).

It goes away by itself: when its stdin closes (the parent closed it, exited or was killed) and
after ``IDLE_SECONDS`` without a task (so an idle process does not hold the memory of its last
ANN build). A run sent to a child that has just gone is sent again to a new one: every task is
safe to run twice. Each run opens the index anew, so it sees what other processes wrote and
forgot since the last one.

Its memory (docs/architecture.md, "Memory of a process"): glibc gives each thread that allocates
an arena of its own (up to 8 per core), and LanceDB's thread pools allocate from many threads, so
the memory of an ANN build or a compaction stayed in arenas after the run. The child is started
with ``MALLOC_ARENA_MAX`` (``config.maintenance_malloc_arena_max``) and, after each run, gives
free memory back to the system (``release_memory``: glibc's ``malloc_trim``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import logging
import os
import select
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import IO, Any

__all__ = ["IDLE_SECONDS", "MaintenanceWorker", "child_env", "raised_at", "release_memory", "serve"]

log = logging.getLogger("worldgraph.memory.index.episode_index")

IDLE_SECONDS = 30.0


def child_env(env: dict[str, str], malloc_arena_max: int) -> dict[str, str]:
    """``env`` with ``MALLOC_ARENA_MAX`` set for the child (0: as it is). A value the parent's
    own environment sets is left alone (whoever set it meant it for the whole process tree)."""
    if malloc_arena_max > 0 and "MALLOC_ARENA_MAX" not in env:
        return {**env, "MALLOC_ARENA_MAX": str(int(malloc_arena_max))}
    return env


_libc: Any = None


def release_memory() -> bool:
    """Give the memory malloc holds free back to the system (glibc's ``malloc_trim(0)``: every
    arena, not only the main heap's top); False where there is no glibc (musl, macOS)."""
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
        try:
            lib = ctypes.CDLL(name) if name else None
            _libc = lib if lib is not None and hasattr(lib, "malloc_trim") else False
        except OSError:  # pragma: no cover
            _libc = False
    if not _libc:
        return False
    _libc.malloc_trim(0)
    return True


class MaintenanceWorker:
    """The parent's handle on its kept child; ``run`` is called by one thread at a time (the
    maintenance thread), ``close`` from any."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        self._cmd, self._env = cmd, env
        self._proc: subprocess.Popen[str] | None = None
        self._stderr: IO[bytes] | None = None
        self._lock = threading.Lock()
        self._closed = False  # closed for good (the index closed): no child starts again
        self.started = 0  # children started (for tests and the bench)

    def run(self, tasks: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
        """Carry out ``tasks`` in the child and return its timed steps; raises RuntimeError with
        the child's error."""
        line = json.dumps([list(t) for t in tasks])
        for attempt in (1, 2):
            proc = self._child()
            try:
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(line + "\n")
                proc.stdin.flush()
                answer = proc.stdout.readline()
            except (BrokenPipeError, OSError, ValueError):
                answer = ""
            if answer:
                reply = json.loads(answer)
                if reply.get("ok"):
                    return list(reply.get("steps") or [])
                raise RuntimeError(f"maintenance process failed: {reply.get('error')}")
            # no answer: the child exited (idle, killed, crashed); what it said is in its stderr
            tail = self._reap()
            if attempt == 2 or (proc.returncode not in (0, None)):
                raise RuntimeError(f"maintenance process failed ({proc.returncode}): {tail[-2000:]}")
        raise AssertionError("unreachable")  # pragma: no cover - the second attempt returns or raises

    def _child(self) -> subprocess.Popen[str]:
        with self._lock:
            if self._closed:
                raise RuntimeError("the index is closed: no maintenance process starts")
            if self._proc is not None and self._proc.poll() is None:
                return self._proc
            self._reap_locked()
            # stderr to a file, not a pipe nobody reads while the child runs (a full pipe blocks it)
            self._stderr = tempfile.TemporaryFile()
            self._proc = subprocess.Popen(self._cmd, env=self._env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=self._stderr, text=True, bufsize=1)
            self.started += 1
            return self._proc

    def _reap(self) -> str:
        with self._lock:
            return self._reap_locked()

    def _reap_locked(self, timeout: float = 30.0) -> str:
        """Wait for the gone (or going) child, ``timeout`` s at most before killing it (it holds
        no lock we need, and each step of a run is one LanceDB commit: a killed run leaves the
        table as it was), and return the end of its stderr."""
        tail = ""
        if self._proc is not None:
            _close(self._proc.stdin)  # its end of input: it finishes the run it is in, then exits
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            # after it is gone: closing its stdout waits for a read of it in another thread to end
            _close(self._proc.stdout)
        if self._stderr is not None:
            self._stderr.seek(0)
            tail = self._stderr.read()[-4000:].decode("utf-8", "replace")
            self._stderr.close()
            self._stderr = None
        self._proc = None
        return tail

    def close(self, timeout: float | None = None, final: bool = False) -> None:
        """End the child: it finishes the run it is in (its stdin closes, it exits), killed if
        that takes more than ``timeout`` s (None: 30 s). ``final``: no child starts again
        (``run`` raises RuntimeError)."""
        with self._lock:
            self._closed = self._closed or final
            self._reap_locked(30.0 if timeout is None else max(0.0, timeout))


def raised_at(exc: BaseException, frames: int = 3) -> str:
    """Where ``exc`` was raised, for the parent's one-line log (the child's traceback goes to its
    stderr, which the parent reads only when the child dies): the innermost ``frames`` Python
    frames, innermost first, such as ``at filemodes.py:63 private_dir < episode_index.py:117
    __init__``; an error of LanceDB's native code is placed at the call that made it."""
    stack = traceback.extract_tb(exc.__traceback__)[-frames:]
    return "at " + " < ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(stack))


def _close(stream: IO[str] | None) -> None:
    try:
        if stream is not None:
            stream.close()
    except OSError:  # pragma: no cover - a broken pipe
        pass


def serve(run: Callable[[list[list[str]]], list[dict[str, Any]] | None], stdin: IO[str] = sys.stdin, stdout: IO[str] = sys.stdout,
          idle: float = IDLE_SECONDS) -> int:
    """The child's loop: a line of tasks in, ``run(tasks)``, a line out (with what ``run``
    returned: its timed steps); returns at the end of stdin or after ``idle`` seconds without a line."""
    while True:
        ready, _, _ = select.select([stdin], [], [], idle)
        if not ready:
            return 0
        line = stdin.readline()
        if not line:
            return 0
        reply: dict[str, Any]
        try:
            reply = {"ok": True, "steps": run(json.loads(line)) or []}
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which logs it and retries later
            log.warning("episode index maintenance failed: %s", exc, exc_info=True)
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc} ({raised_at(exc)})"}
        release_memory()  # what the run freed goes back to the system before the child waits
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()
