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

Endpoint and credentials come from the standard variables (``worldgraph.config.object_store_options``:
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
``AWS_ALLOW_HTTP``), never from the config model, so they never appear in a config dump.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from worldgraph.config import object_store_options
from worldgraph.errors import StoreUnavailableError, WorldGraphError

__all__ = ["is_remote", "index_location", "storage_options", "read_meta", "write_meta", "unavailable",
           "object_store_errors", "guarded", "SETTINGS_HINT"]

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


def storage_options(path: str) -> dict[str, str] | None:
    """LanceDB storage options for ``path``: the AWS variables for ``s3://``, None otherwise (the
    store's own defaults). An ``http://`` endpoint without ``AWS_ALLOW_HTTP`` is refused by the
    client; ``unavailable`` says which variable to set."""
    if urlsplit(path).scheme not in ("s3", "s3a"):
        return None
    return object_store_options() or None


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


def guarded(operation: str) -> Callable[[F], F]:
    """Decorate an index method: on an object store, its I/O failures become ``unavailable``'s
    error (a local folder's index runs the method as it is)."""
    def wrap(method: F) -> F:
        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not is_remote(self.path):
                return method(self, *args, **kwargs)
            with object_store_errors(self.path, operation):
                return method(self, *args, **kwargs)
        return cast(F, run)
    return wrap


def _filesystem(path: str) -> tuple[Any, str]:
    """A pyarrow file system for ``path`` and the path inside it (bucket/prefix)."""
    from pyarrow import fs

    parts = urlsplit(path)
    if parts.scheme not in ("s3", "s3a"):
        filesystem, inner = fs.FileSystem.from_uri(path)
        return filesystem, inner
    options = storage_options(path) or {}
    kwargs: dict[str, Any] = {
        "access_key": options.get("aws_access_key_id"), "secret_key": options.get("aws_secret_access_key"),
        "session_token": options.get("aws_session_token"), "region": options.get("aws_region"),
        "connect_timeout": 5, "request_timeout": 30,
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


def read_meta(path: str, name: str) -> str | None:
    """The text of the object ``name`` under the index URI ``path``; None when there is none (and
    for ``memory://``, which lives and dies with its process: nothing to label)."""
    if path.startswith("memory://"):
        return None
    filesystem, inner = _filesystem(path)
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


def write_meta(path: str, name: str, text: str) -> None:
    """Write the object ``name`` under the index URI ``path`` (one PUT: readers see all or nothing)."""
    if path.startswith("memory://"):
        return
    filesystem, inner = _filesystem(path)
    target = f"{inner.rstrip('/')}/{name}"
    with object_store_errors(path, f"writing {name}"):
        try:
            with filesystem.open_output_stream(target) as fh:
                fh.write(text.encode("utf-8"))
        except OSError as exc:
            raise unavailable(path, exc, f"writing {name}") from exc
