"""Building a large tenant's saved projection in a process of its own.

Reading 100k episodes into columns and copying them into LadybugDB takes ~600 MB of Python and
engine memory, most of which a process does not give back after the build (measured: +682 MB after
the build, +334 MB once the projection is closed, +180 MB after ``malloc_trim``). Built in a child
process, all of it is returned when the child exits; the store's process then opens the saved
file and holds only the pages its queries read (~100 MB at 100k episodes). Tenants under
``CHILD_MIN_EPISODES`` episodes are built in process (a child costs ~0.5 s to start).

    python -m worldgraph.kg.embedded.cypher.build SQLITE_FILE TENANT_ID DATABASE_PATH [world]

reads the tenant from the SQLite file (a read-only open, one snapshot), builds the database at
DATABASE_PATH (``world``: of the world part alone, whose tables LadybugDB fills with ~200 MB of
buffers whatever their size, so it is built here too) and prints ``{"gens": [...], "kinds":
{...}}`` as its last line; the caller names the file current (``saved``). A failed child leaves at
most a file nobody names.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from worldgraph.config import PACKAGE_PARENT, child_environment, module_command
from worldgraph.filemodes import private_umask
from worldgraph.kg.embedded.cypher.model import Gens, Nodes, Rels

CHILD_MIN_EPISODES = 20_000


def build_in_child(sqlite_path: Path, tenant_id: str, path: Path,
                   world_only: bool = False) -> tuple[Gens, dict[str, dict[str, str]]]:
    """(generations, column kinds) of the database the child built at ``path`` (``world_only``:
    of the world part alone); RuntimeError if it failed."""
    proc = subprocess.run(module_command("worldgraph.kg.embedded.cypher.build", str(sqlite_path), tenant_id,
                                         str(path), *(["world"] if world_only else [])),
                          env=child_environment(pythonpath_first=PACKAGE_PARENT), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the projection build process failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    (e, es), (w, ws) = out["gens"]
    return ((int(e), str(es)), (int(w), str(ws))), out["kinds"]


def main(argv: list[str]) -> None:
    from worldgraph.kg.embedded.connection import SqliteConnection
    from worldgraph.kg.embedded.cypher.load import load_tenant, load_world_part, read_world_rows
    from worldgraph.kg.embedded.cypher.projection import Projection

    private_umask()  # a worldgraph child: the projection it writes is private (worldgraph.filemodes)
    sqlite_path, tenant_id, path, *scope = argv
    db = SqliteConnection(sqlite_path, read_only=True, cache_mb=64, wal_autocheckpoint_pages=1000)
    try:
        with db.lock, db.snapshot():
            gens = db.version()
            if scope == ["world"]:
                nodes: Nodes = {}
                rels: Rels = {}
                episodes: set[str] = set()
                world = load_world_part(read_world_rows(db.query, tenant_id), tenant_id, episodes)
            else:
                nodes, rels, episodes, world = load_tenant(db.query, tenant_id)
    finally:
        db.close()
    proj = Projection(tenant_id, Path(path))
    try:
        proj.fill(nodes, rels, episodes, world)
        kinds = proj.kinds
    finally:
        proj.close()
    print(json.dumps({"gens": list(gens), "kinds": kinds}))


if __name__ == "__main__":
    main(sys.argv[1:])
