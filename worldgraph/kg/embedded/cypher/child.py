"""A query child: the process that runs embedded Cypher, confined by the operating system.

    python -m worldgraph.kg.embedded.cypher.child '{"roots": [...], "sandbox": true, "nice": 3}'

The server never runs a caller's query itself. ``pool`` spawns this module as a new interpreter
(``subprocess`` with ``close_fds``: nothing of the server is inherited, no open file, no socket,
no memory) and talks to it over its stdin and stdout, one JSON document a line. What the child
does, in order, each step before the next:

1. While it is one thread, with nothing of the engine loaded: ``confine.no_sockets`` (seccomp:
   no socket of any kind, no io_uring, no exec, no ptrace) and a first Landlock ruleset that lets
   it read only the Python installation and the shared libraries the engine's module loads, plus
   the folders its projections live in (``roots``), read-only. A lower CPU priority (``nice``)
   is set here too. It then imports the engine and loads its
   library, and answers ``{"ready": ...}`` with its thread count (still 1: loading starts none).
2. ``{"op": "open", "path": P, ...}``: still one thread (checked), a second Landlock ruleset
   narrows what it may open to the folder of ``P`` alone, for reading (a projection lives alone in
   a folder of its own with its log: ``saved.DB_NAME``); it takes a shared ``flock`` on
   ``P`` (a writer that wants to change a file in place takes it exclusively: ``writer_lock``),
   caps its memory (``RLIMIT_DATA``: the engine's reservations for a database of that size and
   the setting ``cypher_child_memory_mb``) and opens the database in the engine's read-only
   mode, with a buffer pool sized for the file, so any write fails inside the engine.
   Answers ``{"opened": ..., "threads_at_restrict": 1}``.
3. ``{"op": "close"}`` closes the database and lets go of the lock while a writer changes the file
   in place; a later ``open`` of the same file opens it again (no other file: the ruleset stays).
4. ``{"op": "query", ...}``: runs one query with the engine's own timeout, converts the values to
   JSON (``wire``), counts rows and bytes against the caps as it goes and answers ``{"columns",
   "rows"}`` or ``{"error", "kind"}``. The server kills it (SIGKILL) at the deadline; an engine
   crash ends it and nothing else.

Without Landlock (another OS, an old kernel; ``sandbox`` false), step 1 and 2 skip what the
kernel cannot do and say so (``landlock`` 0); the engine is still read-only and the child still
a separate process (``docs/cypher.md``).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import fcntl
import json
import os
import sys
import sysconfig
import time
from collections.abc import Iterator
from importlib.util import find_spec
from typing import Any, TextIO

from worldgraph.kg.embedded.cypher import confine

__all__ = ["decode_params", "encode_params", "main", "reader_lock", "wire", "writer_lock"]

# where the dynamic linker finds the engine's libraries (libstdc++, libssl ...); read-only in the
# first ruleset only
_LIBRARY_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")
_LD_CACHE = "/etc/ld.so.cache"
LOCK_WAIT = 10.0  # seconds a child waits for a writer's exclusive lock on its file


def reader_lock(fd: int, wait: float) -> None:
    """Take the shared lock a reader of a projection file holds (a query child, a copy): a writer
    holds it exclusively only for a write window, so this waits up to ``wait`` seconds for it
    (TimeoutError past that)."""
    end = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > end:
                raise TimeoutError(f"a projection file stayed locked by a writer for {wait} s") from None
            time.sleep(0.01)


def writer_lock(fd: int) -> bool:
    """Take the exclusive lock a writer needs to change a projection file in place: True when no
    child (of any process) has it open, else False at once (the writer builds a copy instead)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


# ----------------------------------------------------------------------------- values on the pipe
def encode_params(params: dict[str, Any]) -> Any:
    """Parameters as JSON: what JSON has no type for (bytes, dates, times, durations) tagged."""
    def enc(v: Any) -> Any:
        if isinstance(v, dict):
            return {"$map": {k: enc(x) for k, x in v.items()}}
        if isinstance(v, (list, tuple)):
            return [enc(x) for x in v]
        if isinstance(v, (bytes, bytearray)):
            return {"$bytes": base64.b64encode(bytes(v)).decode()}
        if isinstance(v, dt.datetime):
            return {"$datetime": v.isoformat()}
        if isinstance(v, dt.date):
            return {"$date": v.isoformat()}
        if isinstance(v, dt.time):
            return {"$time": v.isoformat()}
        if isinstance(v, dt.timedelta):
            return {"$seconds": v.total_seconds()}
        return v
    return {k: enc(v) for k, v in params.items()}


def decode_params(params: dict[str, Any]) -> dict[str, Any]:
    def dec(v: Any) -> Any:
        if isinstance(v, list):
            return [dec(x) for x in v]
        if isinstance(v, dict):
            (tag, x), = v.items()
            if tag == "$map":
                return {k: dec(y) for k, y in x.items()}
            if tag == "$bytes":
                return base64.b64decode(x)
            if tag == "$datetime":
                return dt.datetime.fromisoformat(x)
            if tag == "$date":
                return dt.date.fromisoformat(x)
            if tag == "$time":
                return dt.time.fromisoformat(x)
            return dt.timedelta(seconds=x)
        return v
    return {k: dec(v) for k, v in params.items()}


def wire(value: Any) -> Any:
    """An engine value as JSON data, each leaf as the server's ``execution.plain`` makes it
    (decimals as numbers, dates and times as ISO text, anything else as its text)."""
    if isinstance(value, dict):
        return {str(k): wire(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [wire(v) for v in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


# ----------------------------------------------------------------------------- the child itself
def _code_dirs() -> list[str]:
    """What the engine's import reads: the Python installation (the standard library and the
    site-packages the engine and orjson are in) and the folders of the libraries it links."""
    paths = sysconfig.get_paths()
    found = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    for name in ("ladybug", "orjson"):
        spec = find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            found |= set(spec.submodule_search_locations)
        elif spec is not None and spec.origin:
            found.add(os.path.dirname(spec.origin))
    found |= {d for d in _LIBRARY_DIRS if os.path.isdir(d)}
    return sorted(p for p in found if os.path.exists(p))


class _Session:
    def __init__(self, out: TextIO, settings: dict[str, Any]) -> None:
        self.out = out
        self.settings = settings
        self.sandbox = bool(settings.get("sandbox", True))
        self.landlock = 0
        self.conn: Any = None
        self.db: Any = None
        self.lock_fd: int | None = None
        self.path: str | None = None  # the one file this child may open (its second ruleset's)

    def say(self, message: dict[str, Any]) -> None:
        import orjson

        try:
            data = orjson.dumps(message)
        except TypeError:  # a lone surrogate in a message the engine made
            data = json.dumps(message, ensure_ascii=True).encode("ascii", "backslashreplace")
        self.out.write(data.decode() + "\n")
        self.out.flush()

    def start(self) -> None:
        tasks = confine.threads()
        if self.settings.get("nice"):
            os.nice(int(self.settings["nice"]))
        roots = [r for r in self.settings.get("roots", []) if os.path.isdir(r)]
        if self.sandbox:
            confine.no_sockets()
            read = [_LD_CACHE] if os.path.exists(_LD_CACHE) else []
            self.landlock = confine.restrict(read=read, read_dirs=[*_code_dirs(), *roots])
        import ladybug
        import ladybug._backend as backend
        import orjson  # noqa: F401 - loaded before the second ruleset

        # the engine picks its library when the first database opens: loaded now, before the
        # second ruleset takes the folders it lies in away
        if backend.get_pybind_module() is None:
            backend.get_capi_module()
        del ladybug
        self.say({"ready": True, "pid": os.getpid(), "threads": confine.threads(), "threads_at_start": tasks,
                  "landlock": self.landlock, "seccomp": self.sandbox})

    def open(self, msg: dict[str, Any]) -> None:
        import ladybug

        path = str(msg["path"])
        first = self.path is None
        if not first and path != self.path:
            raise RuntimeError(f"this child is bound to {self.path}")
        at_restrict = confine.threads() if first else None
        if self.sandbox and first:  # the database's own folder: its file and its log (saved.DB_NAME)
            confine.restrict(read_trees=[os.path.dirname(path)])  # RuntimeError past one thread
        self.path = path
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        reader_lock(fd, LOCK_WAIT)  # a writer changing the file in place holds it exclusively for a moment
        self.lock_fd = fd
        if msg.get("memory"):
            confine.limit_memory(int(msg["memory"]))
        self.db = ladybug.Database(path, read_only=True, buffer_pool_size=int(msg.get("buffer_pool", 0)),
                                   max_db_size=int(msg.get("max_db_size", 1 << 30)),
                                   max_num_threads=int(msg.get("threads", 2)))
        self.conn = ladybug.Connection(self.db)
        self.say({"opened": True, "threads_at_restrict": at_restrict,
                  "threads": confine.threads() if first else None, "landlock": self.landlock})
        confine.forget_threads()

    def close(self) -> None:
        """Close the database and let go of the file's lock (a writer changes the file in place),
        staying bound to the file: a later ``open`` of the same path opens it again."""
        for handle in (self.conn, self.db):
            if handle is not None:
                handle.close()
        self.conn = self.db = None
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None
        self.say({"closed": True})

    def query(self, msg: dict[str, Any]) -> None:
        import orjson

        if self.conn is None:
            raise RuntimeError("no projection is open")
        self.conn.set_query_timeout(max(1, int(msg.get("timeout_ms", 1000))))
        result: Any = self.conn.execute(str(msg["text"]), decode_params(msg.get("params") or {}))
        if isinstance(result, list):  # several statements (the guard refuses them first)
            for r in result:
                r.close()
            self.say({"error": "cypher() runs one statement at a time: remove the ';' between statements",
                      "kind": "statements"})
            return
        max_rows, max_bytes = int(msg["max_rows"]), int(msg["max_bytes"])
        try:
            columns = list(result.get_column_names())
            rows: list[Any] = []
            size = 0
            while result.has_next():
                if len(rows) >= max_rows:
                    self.say({"error": str(max_rows), "kind": "rows"})
                    return
                row = wire(result.get_next())
                try:
                    size += len(orjson.dumps(row))
                except TypeError:
                    self.say({"error": "a value of the result is not valid Unicode text (a lone surrogate?)",
                              "kind": "engine"})
                    return
                if size > max_bytes:
                    self.say({"error": str(max_bytes), "kind": "bytes"})
                    return
                rows.append(row)
        finally:
            result.close()
        self.say({"columns": columns, "rows": rows})


def _messages(stream: TextIO) -> Iterator[dict[str, Any]]:
    for line in stream:
        if line.strip():
            yield json.loads(line)


def main(argv: list[str]) -> None:
    session = _Session(sys.stdout, json.loads(argv[0]) if argv else {})
    try:
        session.start()
    except BaseException as exc:  # noqa: BLE001 - told to the server, which does not use this child
        session.say({"error": f"{type(exc).__name__}: {exc}", "kind": "start"})
        return
    for msg in _messages(sys.stdin):
        op = msg.get("op")
        if op == "exit":
            return
        try:
            if op == "open":
                session.open(msg)
            elif op == "close":
                session.close()
            else:
                session.query(msg)
        except Exception as exc:  # noqa: BLE001 - the engine's refusal, told to the server
            text = str(exc).splitlines()[0] if str(exc) else repr(exc)
            session.say({"error": text, "kind": "open" if op == "open" else "engine", "type": type(exc).__name__})
            if op == "open":
                return


if __name__ == "__main__":
    main(sys.argv[1:])
