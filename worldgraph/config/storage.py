"""The settings of the stores and the index: the embedded store's SQLite file, the LanceDB index
and its upkeep, the background re-indexing and purge, and Neo4j with the Cypher limits of both
stores. Parts of ``WorldGraphConfig`` (settings.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class StorageSettings(BaseModel):
    """Where the index lives, the SQLite file's settings and the LanceDB index's upkeep."""

    # Storage
    # relative to the data directory given to WorldModel.open, or an object store URI such as
    # "s3://bucket/prefix" (credentials and endpoint from the standard AWS_* variables: see
    # object_store_options)
    lancedb_path: str = "lancedb"
    # The embedded store's SQLite file (worldgraph.db). Page cache of the writing connection, in
    # MiB: the episode indexes of a million episodes (~100 MB) stay in memory instead of being
    # read back for each batch's inserts. WAL pages written before SQLite copies them into the
    # database: a page that batch after batch rewrites (the index pages random ids land on) is
    # copied once per checkpoint, not once a batch. Measured at 50-100k episodes (bench/README,
    # "Recording"): the store's share of a batch 90 -> 32 us an episode. The WAL file grows to
    # about this many 4 KiB pages between checkpoints.
    sqlite_cache_mb: int = Field(256, ge=2)
    sqlite_wal_autocheckpoint_pages: int = Field(16_384, ge=1)

    # LanceDB maintenance
    ann_index_min_rows: int = Field(10_000, gt=0)  # below it an exact scan is fast enough
    compact_every_writes: int = Field(200, gt=0)
    # Background optimize of a tenant's table also once this many rows were written to it (in this
    # process) since the last one: rows written after an index was built are flat-scanned until then.
    optimize_every_rows: int = Field(5_000, gt=0)
    # ... and once a table searched through LanceDB (more rows than are searched in process) has
    # at least optimize_idle_rows rows not folded (written through this process since its last
    # fold, or found at its first full-text search in this process, whoever wrote them) and no
    # write through this process for optimize_idle_seconds (0 rows: never): the rows a bulk ingest
    # leaves cost every text search ~9 ms per 1,000 at any table size until folded
    # (bench/README.md, "Rows left unfolded after an ingest").
    optimize_idle_rows: int = Field(200, ge=0)
    optimize_idle_seconds: float = Field(5.0, gt=0)
    # The ANN index of a tenant's table, chosen by measurement (bench/README.md, "Choosing the ANN
    # index"): IVF partitions of ~ann_partition_rows rows holding 4-bit RaBitQ codes; a search
    # probes at least ann_nprobes partitions and re-ranks at least ann_candidates hits (and k) by
    # their full vectors. At 1M episodes: recall@10 1.0 against exact search, ~12 ms a search.
    ann_index_type: Literal["IVF_PQ", "IVF_RQ", "IVF_SQ", "IVF_HNSW_SQ"] = "IVF_RQ"
    ann_partition_rows: int = Field(8_192, gt=0)
    ann_rq_bits: int = Field(4, ge=1, le=8)  # IVF_RQ: bits per dimension of the RaBitQ codes
    ann_nprobes: int = Field(20, gt=0)
    ann_candidates: int = Field(100, gt=0)
    # Retrain the ANN index once the table wants this many times the partitions it was built with.
    # 2, not 4: a search probes ann_nprobes partitions whatever their size, so partitions grown 4x
    # scanned up to 4x the codes (at 1M, an index trained at 300k: 37 partitions for 122).
    ann_retrain_growth: float = Field(2.0, gt=1.0)
    # ... and this many times for a table searched through its mirror (local, at least
    # mirror_min_rows rows): LanceDB's index then serves only until the mirror is ready, and a
    # retrain re-encodes every row (at 1.1M rows 78 CPU-s, 3/4 of the upkeep of 1M -> 1.2M).
    ann_retrain_growth_mirrored: float = Field(4.0, gt=1.0)
    # ... and such a table's index is not retrained at all by a retrain that would fall past this
    # many rows (0: no cap). From the ~33k rows it is first trained at, its retrains fall at 131k,
    # 524k, 2.1M, 8.4M rows (growth 4); the one at 8.4M took 2,597 CPU-s and 28 minutes beside a
    # 10M ingest's writers (bench/README.md, "The 10M run with today's code"). Past the cap its
    # partitions grow with the table (new rows are folded in, none is missed): a search before the
    # mirror is ready reads more codes ("A row cap on retraining").
    ann_retrain_max_rows_mirrored: int = Field(4_000_000, ge=0)
    # Old table versions (and the files only they use) are deleted this long after they stop being
    # the newest; a reader always works on the newest, so this only needs to outlast one search.
    index_version_retention_seconds: float = Field(300.0, ge=0)
    # ... by a background optimize at most this often (0: each one): the cleanup lists every file
    # of the table, and during an ingest an optimize runs every few seconds (1M -> 1.2M: 38 runs,
    # 3.9 CPU-s of cleanup); an explicit optimize always cleans up.
    index_cleanup_every_seconds: float = Field(60.0, ge=0)
    # Compaction merges small fragments into fragments of this many rows, and once there are
    # index_policy.COMPACT_TIER of those, them into fragments of COMPACT_TIER times as many (each
    # row is rewritten about twice). Fewer fragments, faster reads: every search reads its rows
    # from each fragment they are in (two copies of a 1M table with the same index: 16 fragments
    # 11.0 ms, 4 fragments 9.5 ms for a recall's two searches).
    compact_target_rows: int = Field(65_536, gt=0)
    # New rows are indexed as small delta segments; an index with more segments than this (every
    # search reads each one) has its newest ones merged by the next background optimize. The
    # segments covering the second compaction tier's fragments are not counted: they are merged
    # as the table doubles (docs/architecture.md, "Compaction and index segments").
    index_max_segments: int = Field(8, ge=1)
    # The in-process index in front of a table of at least mirror_min_rows rows (memory/index/
    # mirror.py; 0: never): its filter columns and int8 vector codes in this process. A filter
    # that at most mirror_exact_rows rows pass (by its mask) is searched exactly over the codes of
    # its rows in the lists nearest the query (mirror_search.py; a filter's rows from the mirror's
    # postings, filter_postings.py, are searched so while that is cheaper than the lists path).
    mirror_min_rows: int = Field(20_000, ge=0)
    mirror_exact_rows: int = Field(50_000, ge=0)

    # Memory of a process (docs/architecture.md, "Memory of a process"). LanceDB's caches of
    # opened indexes (BM25 postings, scalar and ANN index pages) and of file metadata, in MiB, for
    # the whole process: one LanceDB and one pylance session shared by every table and dataset
    # (lance's defaults, 6 GiB and 1 GiB, held per connection and per dataset opened).
    lance_index_cache_mb: int = Field(1024, ge=0)
    lance_metadata_cache_mb: int = Field(256, ge=0)
    # The maintenance child's glibc malloc arenas (MALLOC_ARENA_MAX in its environment; 0: glibc's
    # default of 8 per core). LanceDB's many threads each got an arena of their own that kept the
    # memory of the last ANN build or compaction; the child also gives free memory back to the
    # system (malloc_trim) after each run.
    maintenance_malloc_arena_max: int = Field(2, ge=0)
    # How much lower the maintenance child's CPU priority is than its parent's (its nice value is the
    # parent's plus this; 0: the same). Its builds and compactions use every core LanceDB gets; on a
    # small machine they then took CPU from the recording and recalling threads of the parent.
    maintenance_nice: int = Field(10, ge=0, le=19)
    # Rows a mirror build holds in memory before it writes them to its files (mirror_files.py):
    # a build from the table (10M rows) held every row's codes in memory until its end.
    mirror_build_rows: int = Field(262_144, gt=0)


class UpkeepSettings(BaseModel):
    """The background work of a long-running process on what is stored: re-indexing, purging, and
    how long the index's object store may take to answer."""

    # After an index write failed (object store unreachable), a long-running process re-indexes the
    # pending episodes this often until none is left.
    index_retry_seconds: float = Field(30.0, gt=0)
    # After a forget, the background purge removes the forgotten bytes from the files within this many
    # seconds (while the process runs; a process that stops first leaves it to the next one that opens
    # the folder, or to `worldgraph purge`). 0: purge right after each forget.
    purge_after_seconds: float = Field(60.0, ge=0)
    # Every call to the index's object store (s3://) answers within this or fails with
    # StoreUnavailableError: a write leaves its episodes stored and pending (indexed later), a
    # recall fails (503). Also the per-request timeout given to LanceDB's object-store client.
    object_store_timeout_seconds: float = Field(20.0, gt=0, le=3600)


class Neo4jSettings(BaseModel):
    """The Neo4j store, and the limits of ``cypher()`` on either store."""

    # Neo4j
    neo4j_uri: str = "bolt://127.0.0.1:7687"
    neo4j_user: str = "neo4j"
    neo4j_password: str = "worldgraph-dev"
    neo4j_database: str = "neo4j"
    # a snapshot import (replace_world) of more records than this runs in transactions of this many
    neo4j_import_batch: int = Field(10_000, gt=0)
    # cypher(): each query runs in one READ transaction with this timeout, and the call returns or
    # fails by then (plus the ~1 s it may take to end the transaction); more rows is an error
    cypher_timeout_seconds: float = Field(30.0, gt=0)
    cypher_max_rows: int = Field(10_000, gt=0)
    # ... and more than this many bytes of rows (their JSON size, roughly) is an error too
    cypher_max_result_bytes: int = Field(16 * 1024 * 1024, gt=0)
    # refused before any store sees them (worldgraph.kg.cypher_limits): a longer query text, one
    # nesting brackets / CASE deeper (a parser recurses per level), params nested deeper or bigger
    cypher_max_query_bytes: int = Field(65_536, gt=0)
    cypher_max_nesting_depth: int = Field(64, gt=0)
    cypher_max_params_bytes: int = Field(1_048_576, gt=0)
    # Cypher queries in flight per tenant and per process, on both stores (past either: 429 with
    # Retry-After); an embedded query child's memory beyond its engine's reservations; and whether
    # `serve` runs API keys' embedded Cypher where Landlock is unavailable (docs/cypher.md)
    cypher_max_in_flight_per_tenant: int = Field(2, gt=0)
    cypher_max_in_flight: int = Field(8, gt=0)
    cypher_child_memory_mb: int = Field(1024, gt=0)
    cypher_allow_unsandboxed: bool = False
    # tests only (docs/cypher.md): embedded Cypher without its text guard (honoured only where the
    # sandbox holds), and the sandbox taken as unavailable
    testing_cypher_guard_off: bool = False
    testing_no_landlock: bool = False
