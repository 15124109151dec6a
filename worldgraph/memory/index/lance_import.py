"""Importing ``lancedb`` without the REST namespace client it never uses here.

``import lancedb`` imports ``lance_namespace``, which imports the package of its REST client
(``lance_namespace_urllib3_client``): the package's ``__init__`` imports every API class of the
REST service and, through them, every model (~370 pydantic models). That was ~0.75 of the ~1.7
CPU-seconds of ``import lancedb`` measured here (``python -X importtime``), paid by every process
that opens an index (cold start) and by every maintenance child. worldgraph opens local folders
and object stores (``lancedb.connect(path)``), never a REST namespace: ``lance_namespace`` needs
only the models of the client, a subpackage.

So before ``lancedb`` is first imported, the client's package is registered as a bare package
(its path, not its ``__init__``): its subpackages (the models) import as usual, and the first
look-up of anything else on it (a REST namespace being made, say) imports the real package in
its place. When the client is already imported, or not installed, nothing is done.

``sessions`` gives the process its one LanceDB session and its one pylance session: their caches
(opened indexes, file metadata) are bounded by the config, not by lance's defaults (6 GB of
index cache and 1 GB of metadata cache per session, and every ``lancedb.connect`` and every
``table.to_lance()`` made a session of its own). docs/architecture.md, "Memory of a process".
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

__all__ = ["REST_CLIENT", "drop_sessions", "import_lancedb", "sessions"]

REST_CLIENT = "lance_namespace_urllib3_client"

MB = 1 << 20
_sessions: dict[tuple[int, int], tuple[Any, Any]] = {}  # (index, metadata cache MiB) -> the two sessions
_sessions_lock = threading.Lock()


def import_lancedb() -> Any:
    """The ``lancedb`` module, imported with the REST client's package left bare (see above)."""
    if "lancedb" not in sys.modules and REST_CLIENT not in sys.modules:
        _bare_package(REST_CLIENT)
    return importlib.import_module("lancedb")


def sessions(config: Any) -> tuple[Any, Any]:
    """This process's LanceDB session (``lancedb.connect(session=)``) and pylance session
    (``lance.dataset`` / ``table.to_lance(session=)``), each with an index cache of
    ``config.lance_index_cache_mb`` and a metadata cache of ``config.lance_metadata_cache_mb``
    MiB; made once per process (per pair of sizes) and shared by every connection and dataset,
    so the bound holds for the process, not for each of its tables. The two libraries' session
    types are not interchangeable (pylance refuses a LanceDB session), hence two."""
    key = (int(config.lance_index_cache_mb), int(config.lance_metadata_cache_mb))
    with _sessions_lock:
        held = _sessions.get(key)
        if held is None:
            lancedb = import_lancedb()
            lance: Any = importlib.import_module("lance")
            index, metadata = key[0] * MB, key[1] * MB
            held = _sessions[key] = (
                lancedb.Session(index_cache_size_bytes=index, metadata_cache_size_bytes=metadata),
                lance.Session(index_cache_size_bytes=index, metadata_cache_size_bytes=metadata))
        return held


def drop_sessions() -> None:
    """Forget this process's sessions: the next ``sessions`` makes new ones, and the old ones'
    caches go with the last connection or dataset that holds them. The maintenance child does
    this after each run (it opens the index anew for each): what a run's ANN build or
    compaction cached is not kept while the child waits for the next."""
    with _sessions_lock:
        _sessions.clear()


def _bare_package(name: str) -> None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        return
    bare = types.ModuleType(name)
    bare.__path__ = list(spec.submodule_search_locations)
    bare.__spec__ = spec
    bare.__file__ = spec.origin

    def real(attr: str) -> Any:
        # anything but a subpackage: the real package, in the bare one's place (once)
        if sys.modules.get(name) is bare:
            del sys.modules[name]
            module = importlib.import_module(name)
            bare.__dict__.update({k: v for k, v in module.__dict__.items() if k not in ("__getattr__",)})
        else:
            module = sys.modules[name]
        return getattr(module, attr)

    bare.__getattr__ = real  # type: ignore[method-assign]
    sys.modules[name] = bare
