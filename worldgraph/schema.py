"""The schema versions of everything worldgraph stores, in one record.

A store writes its version when it creates or upgrades its schema, and on open refuses data
written by a newer worldgraph (it could not read it right) with an error that says to upgrade.
Bump a number here when its layout changes, and say what changed.

- ``embedded``: the SQLite system of record (``kg/embedded/store.py``; ``schema_info.schema_version``).
  1: the first layout.
- ``lancedb``: the LanceDB index folder (``memory/index/episode_index.py``; ``index_meta.json`` "format").
  1: one ``episodes`` table; 2: one table per tenant.
- ``neo4j``: the Neo4j graph (``kg/neo4j/store.py``; the ``WorldgraphSchema`` node).
  2: world nodes, rules and edges keyed on ``key``; 3: episode ``index_error`` property;
  4: a ``tenant_id`` index per label (what ``cypher()`` seeks from).
"""

from __future__ import annotations

from typing import Literal

from worldgraph.errors import StorageError

__all__ = ["SCHEMA_VERSIONS", "Schema", "check_schema_version", "needs_upgrade"]

Schema = Literal["embedded", "lancedb", "neo4j"]

SCHEMA_VERSIONS: dict[Schema, int] = {"embedded": 1, "lancedb": 2, "neo4j": 4}


def needs_upgrade(schema: Schema, found: int | str | None) -> bool:
    """Whether data at version ``found`` (None: no version written yet) needs this version's
    schema steps; raises StorageError for data newer than this worldgraph knows."""
    check_schema_version(schema, found)
    return found is None or int(found) < SCHEMA_VERSIONS[schema]


def check_schema_version(schema: Schema, found: int | str | None) -> None:
    """StorageError if ``found`` is newer than this worldgraph's ``schema`` version (or not a number)."""
    if found is None:
        return
    current = SCHEMA_VERSIONS[schema]
    try:
        version = int(found)
    except (TypeError, ValueError):
        raise StorageError(f"the {schema} schema version {found!r} is not a number: the data was not written by "
                           "worldgraph, or is damaged") from None
    if version > current:
        raise StorageError(f"the {schema} data has schema version {version}, newer than this worldgraph knows "
                           f"({current}): upgrade worldgraph (pip install -U worldgraph) to open it")
