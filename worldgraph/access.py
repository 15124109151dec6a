"""Opening the graph store, writable or read-only, decided before anything is written.

``WorldModel.open`` opens read-only (and says why in the log) when asked to, when the folder, the
SQLite file or the LanceDB folder is not writable (a mounted snapshot, a backup, a read-only bind
mount), and when the writable open fails because the disk is full: reading needs no space, so
recall keeps working while someone frees the disk.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import InvalidInputError
from worldgraph.filemodes import private_dir
from worldgraph.kg.cypher_limits import CypherSettings
from worldgraph.kg.store import GraphStore

__all__ = ["disk_full_reason", "open_storage", "open_store", "unwritable_reason", "FULL_BELOW_BYTES"]

log = logging.getLogger("worldgraph")

# SQLite needs its 32 KiB -shm and a few WAL pages to open a WAL database for writing.
FULL_BELOW_BYTES = 1 << 20


def open_store(path: Path, graph: str | GraphStore, cfg: WorldGraphConfig, read_only: bool = False) -> GraphStore:
    if isinstance(graph, GraphStore):
        return graph
    if graph == "embedded":
        from worldgraph.kg.embedded.store import EmbeddedGraphStore

        return EmbeddedGraphStore(path / "worldgraph.db", read_only=read_only, cache_mb=cfg.sqlite_cache_mb,
                                  wal_autocheckpoint_pages=cfg.sqlite_wal_autocheckpoint_pages,
                                  cypher=CypherSettings.from_config(cfg))
    if graph == "neo4j":
        from worldgraph.kg.neo4j.store import Neo4jGraphStore

        return Neo4jGraphStore(cfg.neo4j_uri, cfg.neo4j_user, cfg.neo4j_password, database=cfg.neo4j_database,
                               read_only=read_only, import_batch=cfg.neo4j_import_batch,
                               cypher=CypherSettings.from_config(cfg))
    raise InvalidInputError("graph", f"must be 'embedded' or 'neo4j', got {graph!r}")


def open_storage(root: Path, graph: str | GraphStore, cfg: WorldGraphConfig,
                 read_only: bool) -> tuple[GraphStore, str | None]:
    """The graph store under ``root`` and why it is read-only (None: it is writable).

    Writable needs ``root`` made (it is, here) and every file writable; a writable open that
    fails while the disk is full falls back to reading, with a warning in the log."""
    # an index on an object store (s3://...) has no folder here to check
    lance_dirs = [] if "://" in cfg.lancedb_path else [root / cfg.lancedb_path]
    reason = "the WorldModel was opened with read_only=True" if read_only else unwritable_reason(
        root, [root / "worldgraph.db", *lance_dirs] if graph == "embedded" else lance_dirs)
    if reason is None:
        private_dir(root)  # 0700; a looser existing folder is tightened, with a warning
        try:
            return open_store(root, graph, cfg), None
        except (sqlite3.OperationalError, OSError):
            reason = disk_full_reason(root)
            if reason is None:
                raise
    private_dir(root, read_only=True)  # warns when others can read it; changes nothing
    if not read_only:
        reason += "; opened read-only"
        log.warning("opening %s read-only: %s", root, reason)
    return open_store(root, graph, cfg, read_only=True), reason


def unwritable_reason(root: Path, paths: list[Path]) -> str | None:
    """Why ``root`` (and each existing path among ``paths`` inside it) cannot be written, or None.

    ``os.access`` answers for the calling user and for read-only mounts (EROFS, even for root);
    it creates nothing. A folder that does not exist yet is writable if its parent is."""
    if not root.exists():
        parent = next((p for p in root.parents if p.exists()), None)
        if parent is not None and not os.access(parent, os.W_OK | os.X_OK):
            return f"{root} does not exist and {parent} is not writable"
        return None
    for p in [root, *paths]:
        if p.exists() and not os.access(p, os.W_OK):
            return f"{p} is not writable"
    return None


def disk_full_reason(root: Path) -> str | None:
    """A reason when the file system holding ``root`` has (almost) no free space, else None."""
    try:
        st = os.statvfs(root)
    except (OSError, AttributeError):  # pragma: no cover - no statvfs (Windows) or a vanished folder
        return None
    free = st.f_bavail * st.f_frsize
    if free < FULL_BELOW_BYTES:
        return f"the disk holding {root} is full ({free} bytes free)"
    return None
