"""What each byte of an embedded data folder is, per episode: SQLite by table and index (its
``dbstat`` table) and the episode record's JSON by key, each tenant's LanceDB table by column (the
page buffers of the live data files), by index (the live segments) and what old versions still
hold, and the in-process mirror's files. Read-only: the folder may be in use.

    python bench/bytes_per_episode.py PATH/TO/DATA [--sample 3000]

See bench/README.md, "Bytes per episode"."""

from __future__ import annotations

import argparse
import collections
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from measure import du  # counts files the folder's cleanup deletes during the walk as gone


def sqlite_part(db: Path, sample: int) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    n = con.execute("SELECT count(*) FROM episodes").fetchone()[0] or 1
    print(f"SQLite {db.name}: {n:,} episodes, page size {con.execute('PRAGMA page_size').fetchone()[0]}")
    rows = con.execute("SELECT name, sum(pgsize), sum(payload) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
    total = sum(r[1] for r in rows)
    for name, size, payload in rows:
        if size / n >= 0.5:
            print(f"  {name:32s} {size / 1e6:9.1f} MB {size / n:8.1f} B/episode (payload {payload / n:.1f})")
    print(f"  {'file':32s} {total / 1e6:9.1f} MB {total / n:8.1f} B/episode")
    keys: collections.Counter[str] = collections.Counter()
    values: collections.Counter[str] = collections.Counter()
    step = max(1, n // sample)
    got = size = 0
    for (data,) in con.execute("SELECT data FROM episodes WHERE rowid % ? = 0 LIMIT ?", (step, sample)):
        rec: dict[str, Any] = json.loads(data)
        got += 1
        size += len(data.encode())
        for k, v in rec.items():
            keys[k] += len(k.encode()) + 4  # the quotes, the colon and the comma
            values[k] += len(json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode())
    con.close()
    if got:
        print(f"  record JSON, {got:,} sampled: mean {size / got:.0f} B; by key (key + value bytes):")
        for k in sorted(values, key=lambda k: -(keys[k] + values[k])):
            print(f"    {k:30s} {keys[k] / got:6.1f} + {values[k] / got:7.1f}")
    return n


def lance_part(table: Path, n: int) -> None:
    import lance
    import lance.file as lf

    ds = lance.dataset(str(table))
    rows = ds.count_rows() or 1
    names: dict[int, str] = {}

    def walk(field: Any, parent: str = "") -> None:
        names[field.id()] = parent + field.name()
        for child in field.children():
            walk(child, names[field.id()] + ".")

    for field in ds.lance_schema.fields():
        walk(field)
    cols: collections.Counter[str] = collections.Counter()
    live = 0
    for frag in ds.get_fragments():
        for df in frag.data_files():
            path = table / "data" / df.path
            live += path.stat().st_size
            meta = lf.LanceFileReader(str(path)).metadata()
            for fid, col in zip(df.fields, meta.columns, strict=False):
                cols[names.get(fid, str(fid))] += (sum(b.size for p in col.pages for b in p.buffers)
                                                   + sum(b.size for b in col.column_buffers))
    print(f"LanceDB {table.name}: {rows:,} rows, version {ds.version}")
    for name, size in cols.most_common():
        if size / rows >= 0.5:
            print(f"  column {name:28s} {size / 1e6:9.1f} MB {size / rows:8.1f} B/row")
    print(f"  live data files {live / 1e6:9.1f} MB {live / rows:8.1f} B/row; all data files "
          f"{du(table / 'data') / 1e6:.1f} MB (the rest: old versions)")
    idx_live = 0
    for ix in ds.describe_indices():
        idx_live += ix.total_size_bytes
        print(f"  index {ix.name:29s} {ix.total_size_bytes / 1e6:9.1f} MB {ix.total_size_bytes / rows:8.1f} B/row")
    print(f"  live indexes {idx_live / 1e6:9.1f} MB {idx_live / rows:8.1f} B/row; all index files "
          f"{du(table / '_indices') / 1e6:.1f} MB")
    mirror = table.parent / "_mirror" / table.name.removesuffix(".lance")
    if mirror.exists():
        files = sorted((p.stat().st_size, p.name) for p in mirror.iterdir() if p.is_file())
        print(f"  mirror {sum(s for s, _ in files) / 1e6:.1f} MB {sum(s for s, _ in files) / rows:.1f} B/row: "
              + ", ".join(f"{name} {s / rows:.1f}" for s, name in reversed(files) if s / rows >= 0.5))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--sample", type=int, default=3000, help="episode records sampled for the by-key table")
    args = ap.parse_args()
    n = sqlite_part(args.data / "worldgraph.db", args.sample)
    lancedb = args.data / "lancedb"
    for table in sorted(lancedb.glob("ep-*.lance")):
        lance_part(table, n)
    total = du(args.data)
    print(f"data folder {total / 1e6:.1f} MB: {total / n:.0f} B/episode, {total / n * 1e7 / 1e9:.1f} GB at 10M "
          f"(SQLite with its WAL {sum(os.path.getsize(p) for p in args.data.glob('worldgraph.db*')) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
