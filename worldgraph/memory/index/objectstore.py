"""The LanceDB sidecar on an object store: ``lancedb_path = "s3://bucket/prefix"``.

Several app servers then share one episode index. What a local folder gives the index and an
object store does not, and what stands in for it:

- **Cross-process locks** (``fcntl`` on ``.write.lock``): none. Lance commits a new table version
  with a conditional PUT (``If-None-Match: *``, lance's ``ConditionalPutCommitHandler``), so of
  two writers committing the same version one fails and retries on top of the other's (optimistic
  concurrency; the episode_id primary key makes a racing insert of the same id a conflict, not a
  duplicate). The server must honour conditional PUTs: AWS S3 does (since 2024), as do MinIO and
  moto; no DynamoDB commit lock is needed.
- **index_meta.json** (which embedder built the vectors): written and read through
  ``pyarrow.fs.S3FileSystem`` with the same endpoint and credentials (``read_meta`` /
  ``write_meta``).
- **Errors**: an endpoint that does not answer, a missing bucket or refused credentials become a
  ``StoreUnavailableError`` that names the index URI, the endpoint and the variables to check
  (``unavailable``); the episodes stay in the graph store, marked for re-indexing.
- **Deadlines**: an endpoint that accepts connections and never answers (a stopped or overloaded
  server) must not hold the caller. LanceDB's client gets a per-request ``timeout`` and a bounded
  retry budget (``storage_options``), and every call also runs in a worker thread that the caller
  stops waiting for after ``object_store_timeout_seconds`` (``with_deadline``): a client timeout
  alone does not bound a call made of many requests, or one a retry loop keeps alive. A call
  abandoned at its deadline finishes (or fails) in the background; at most ``MAX_WAITING`` such
  threads exist at once, after which calls fail at once instead of starting more.

Endpoint and credentials come from the standard variables (``worldgraph.config.object_store_options``:
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
``AWS_ALLOW_HTTP``), never from the config model, so they never appear in a config dump.
"""

from __future__ import annotations

import contextvars
import functools
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from worldgraph.config import object_store_options
from worldgraph.errors import StoreUnavailableError, WorldGraphError

__all__ = ["is_remote", "index_location", "storage_options", "read_meta", "write_meta", "unavailable",
           "object_store_errors", "guarded", "with_deadline", "SETTINGS_HINT", "MAX_WAITING", "WORKER_NAME"]

F = TypeVar("F", bound=Callable[..., Any])
SETTINGS_HINT = ("check lancedb_path (WORLDGRAPH_LANCEDB_PATH) and AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, "
                 "AWS_SECRET_ACCESS_KEY, AWS_REGION (AWS_ALLOW_HTTP=true for an http:// endpoint)")
# What the object store's client says when the store is the problem (not the caller's input).
_IO_MARKERS = re.compile(
    r'store: "S3"|S3 error|RetryError|error sending request|tcp connect|dns error|Connection refused|'
    r"NoSuchBucket|InvalidAccessKeyId|SignatureDoesNotMatch|AccessDenied|timed out|LanceError\(IO\)|"
    r"Failed to connect to namespace|AWS Error|curlCode", re.I)


def is_remote(path: str | Path) -> bool:
    """Whether ``path`` is a URI (``s3://...``, ``gs://...``, ``memory://``) rather than a folder."""
    return "://" in str(path)


def index_location(root: Path, lancedb_path: str) -> str | Path:
    """Where the index of a data folder ``root`` lives: a URI as given, a relative folder under ``root``."""
    return lancedb_path if is_remote(lancedb_path) else root / lancedb_path


def storage_options(path: str, timeout: float | None = None) -> dict[str, str] | None:
    """LanceDB storage options for ``path``: the AWS variables for ``s3://``, None otherwise (the
    store's own defaults). An ``http://`` endpoint without ``AWS_ALLOW_HTTP`` is refused by the
    client; ``unavailable`` says which variable to set. With ``timeout`` (seconds), the client's
    own limits too: no request, and no retrying of one, outlasts it (the object_store crate's
    ``timeout`` / ``connect_timeout``, lance's ``client_retry_timeout`` / ``client_max_retries``)."""
    if urlsplit(path).scheme not in ("s3", "s3a"):
        return None
    options = object_store_options()
    if timeout is not None:
        options.update({
            "timeout": f"{max(1, int(timeout * 1000))}ms",
            "connect_timeout": f"{max(1, int(min(timeout, 5.0) * 1000))}ms",
            "client_retry_timeout": str(max(1, math.ceil(timeout))),
            "client_max_retries": "3",
        })
    return options or None


def endpoint(path: str) -> str:
    """The endpoint that serves ``path``, for messages: AWS_ENDPOINT_URL or the provider's default."""
    options = storage_options(path) or {}
    return options.get("aws_endpoint") or "the default AWS endpoint (AWS_ENDPOINT_URL is not set)"


def unavailable(path: str, exc: BaseException, operation: str) -> StoreUnavailableError:
    """The error for an object store that failed ``operation`` on the index at ``path``."""
    detail = " ".join(str(exc).split())
    if len(detail) > 400:
        detail = detail[:400] + " ..."
    hint = SETTINGS_HINT
    options = storage_options(path) or {}
    if options.get("aws_endpoint", "").startswith("http://") and options.get("allow_http", "").lower() != "true":
        hint = "the endpoint is http://: set AWS_ALLOW_HTTP=true; " + hint
    return StoreUnavailableError(
        f"the episode index at {path} (object store endpoint {endpoint(path)}) failed {operation}: {detail}. "
        f"To fix: {hint}. Episodes are still stored in the graph store and marked for indexing; they are "
        "indexed when the store answers again (on the next open, by a long-running process's retry, or "
        "`worldgraph reindex --pending`)")


@contextmanager
def object_store_errors(path: str, operation: str) -> Iterator[None]:
    """Turn an object store's I/O failure during ``operation`` into ``unavailable``'s error; any
    other exception (a caller's bad input, a local folder's error) passes through unchanged."""
    try:
        yield
    except WorldGraphError:
        raise
    except Exception as exc:
        if is_remote(path) and _IO_MARKERS.search(str(exc)):
            raise unavailable(path, exc, operation) from exc
        raise


# Worker threads that may wait on an object store at once, per process (see "Deadlines" above).
MAX_WAITING = 32
WORKER_NAME = "worldgraph-object-store"
_slots = threading.BoundedSemaphore(MAX_WAITING)
_worker = threading.local()  # .inside: this thread is a deadline worker (nested calls run inline)

T = TypeVar("T")


def _timed_out(timeout: float) -> TimeoutError:
    return TimeoutError(f"no answer within {timeout:g} s (object_store_timeout_seconds, "
                        "WORLDGRAPH_OBJECT_STORE_TIMEOUT_SECONDS)")


def with_deadline(path: str, operation: str, fn: Callable[[], T], timeout: float) -> T:
    """``fn()`` in a worker thread, waited for at most ``timeout`` seconds; past it, ``unavailable``'s
    error (the call goes on in the background, its result dropped). A call made inside a worker
    (an index method calling another) runs inline under the outer call's deadline. When
    ``MAX_WAITING`` workers are still waiting on the store, a new call waits for one to free up
    within its own deadline, else fails: stalled calls never pile up threads without bound."""
    if getattr(_worker, "inside", False):
        return fn()
    end = time.monotonic() + timeout
    if not _slots.acquire(timeout=timeout):
        raise unavailable(path, TimeoutError(
            f"{MAX_WAITING} earlier calls are still waiting for the object store; "
            + str(_timed_out(timeout))), operation)
    result: dict[str, Any] = {}
    done = threading.Event()
    context = contextvars.copy_context()

    def work() -> None:
        _worker.inside = True
        try:
            result["value"] = context.run(fn)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, if it still waits
            result["error"] = exc
        finally:
            _slots.release()
            done.set()

    try:
        threading.Thread(target=work, name=WORKER_NAME, daemon=True).start()
    except BaseException:
        _slots.release()
        raise
    if not done.wait(max(0.0, end - time.monotonic())):
        raise unavailable(path, _timed_out(timeout), operation)
    if "error" in result:
        raise result["error"]
    return cast(T, result["value"])


def guarded(operation: str) -> Callable[[F], F]:
    """Decorate an index method: on an object store, it runs under the deadline of the index's
    ``config.object_store_timeout_seconds`` (``with_deadline``) and its I/O failures become
    ``unavailable``'s error (a local folder's index runs the method as it is)."""
    def wrap(method: F) -> F:
        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not is_remote(self.path):
                return method(self, *args, **kwargs)
            with object_store_errors(self.path, operation):
                return with_deadline(self.path, operation, lambda: method(self, *args, **kwargs),
                                     self.config.object_store_timeout_seconds)
        return cast(F, run)
    return wrap


def _filesystem(path: str, timeout: float | None = None) -> tuple[Any, str]:
    """A pyarrow file system for ``path`` and the path inside it (bucket/prefix); with ``timeout``,
    no request outlasts it."""
    from pyarrow import fs

    parts = urlsplit(path)
    if parts.scheme not in ("s3", "s3a"):
        filesystem, inner = fs.FileSystem.from_uri(path)
        return filesystem, inner
    options = storage_options(path) or {}
    kwargs: dict[str, Any] = {
        "access_key": options.get("aws_access_key_id"), "secret_key": options.get("aws_secret_access_key"),
        "session_token": options.get("aws_session_token"), "region": options.get("aws_region"),
        "connect_timeout": min(5.0, timeout or 5.0), "request_timeout": min(30.0, timeout or 30.0),
        "retry_strategy": fs.AwsStandardS3RetryStrategy(max_attempts=3),
    }
    url = options.get("aws_endpoint")
    if url:
        ep = urlsplit(url)
        kwargs["endpoint_override"] = ep.netloc + ep.path.rstrip("/")
        kwargs["scheme"] = ep.scheme or "https"
        kwargs["force_virtual_addressing"] = False
    if not kwargs["access_key"]:  # the SDK's own chain (instance profile, ~/.aws) then
        for key in ("access_key", "secret_key", "session_token"):
            kwargs.pop(key)
    return fs.S3FileSystem(**{k: v for k, v in kwargs.items() if v is not None}), parts.netloc + parts.path


def read_meta(path: str, name: str, timeout: float | None = None) -> str | None:
    """The text of the object ``name`` under the index URI ``path``; None when there is none (and
    for ``memory://``, which lives and dies with its process: nothing to label). ``timeout``:
    the deadline of ``with_deadline`` (None: the client's own timeouts only)."""
    if path.startswith("memory://"):
        return None
    if timeout is not None and not getattr(_worker, "inside", False):
        return with_deadline(path, f"reading {name}", lambda: read_meta(path, name, timeout), timeout)
    filesystem, inner = _filesystem(path, timeout)
    target = f"{inner.rstrip('/')}/{name}"
    with object_store_errors(path, f"reading {name}"):
        try:
            with filesystem.open_input_stream(target) as fh:
                return bytes(fh.read()).decode("utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            text = str(exc).lower()
            if "nosuchkey" in text or ("not found" in text and "bucket" not in text):
                return None
            raise unavailable(path, exc, f"reading {name}") from exc


def write_meta(path: str, name: str, text: str, timeout: float | None = None) -> None:
    """Write the object ``name`` under the index URI ``path`` (one PUT: readers see all or nothing)."""
    if path.startswith("memory://"):
        return
    if timeout is not None and not getattr(_worker, "inside", False):
        return with_deadline(path, f"writing {name}", lambda: write_meta(path, name, text, timeout), timeout)
    filesystem, inner = _filesystem(path, timeout)
    target = f"{inner.rstrip('/')}/{name}"
    with object_store_errors(path, f"writing {name}"):
        try:
            with filesystem.open_output_stream(target) as fh:
                fh.write(text.encode("utf-8"))
        except OSError as exc:
            raise unavailable(path, exc, f"writing {name}") from exc
