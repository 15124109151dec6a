"""How the episode index is built, searched and kept up: the ANN index choice and its search
knobs, and when new rows are folded into the indexes. Pure decisions plus the pylance calls that
carry them out; ``index.py`` decides when to call them.

The choices were measured at 200k and 1M episodes (bench/README.md, "Choosing the ANN index" and
"A million episodes").
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from worldgraph.config import WorldGraphConfig, set_library_defaults

log = logging.getLogger(__name__)

# lance's vector index statistics include every centroid unless told otherwise (and warn about
# it on each call); only the partition count is read here. This opts in to lance's announced
# default (config.LIBRARY_DEFAULTS), for this process and the maintenance processes it starts.
set_library_defaults()


def ann_partitions_for(config: WorldGraphConfig, rows: int) -> int:
    """IVF partitions for a table of ``rows`` rows: about ``ann_partition_rows`` rows each."""
    return max(1, int(rows) // config.ann_partition_rows)


def vector_index_config(config: WorldGraphConfig, rows: int, dimensions: int) -> Any:
    """The lancedb config of the ANN index for a table of ``rows`` rows (cosine distance).

    IVF_RQ (the default) keeps ``ann_rq_bits`` bits per dimension (RaBitQ; 4 bits: 217 MB of
    codes for 1M 384-d vectors, 1/7 of the vectors); IVF_PQ one 8-bit code per 8 dimensions (its
    training took 26 times as long); IVF_SQ one byte per dimension; IVF_HNSW_SQ one byte per
    dimension plus a graph per partition (the slowest to build by far). Whatever the codes, the
    best ``ann_candidates`` hits are re-ranked by their full vectors (``ann_search_params``).
    """
    from lancedb.index import IvfHnswSq, IvfPq, IvfRq, IvfSq

    partitions = ann_partitions_for(config, rows)
    kind = config.ann_index_type
    if kind == "IVF_HNSW_SQ":
        return IvfHnswSq(distance_type="cosine", num_partitions=partitions)
    if kind == "IVF_RQ":
        return IvfRq(distance_type="cosine", num_partitions=partitions, num_bits=config.ann_rq_bits)
    if kind == "IVF_SQ":
        return IvfSq(distance_type="cosine", num_partitions=partitions)
    sub_vectors = dimensions // 8 if dimensions % 8 == 0 else None  # None: lance picks
    return IvfPq(distance_type="cosine", num_partitions=partitions, num_sub_vectors=sub_vectors)


def ann_search_params(config: WorldGraphConfig, k: int, overfetch: int = 0) -> dict[str, Any]:
    """Lance ``nearest`` settings of one ANN search for the top ``k``.

    At least ``ann_candidates`` (and k) quantised hits are re-ranked by their full vectors
    (lance's refine step: it reads only those vectors), from at least ``ann_nprobes`` partitions;
    lance probes further when a filter leaves fewer than k rows in those.
    """
    candidates = max(k + min(k, max(0, overfetch)), config.ann_candidates)
    refine = -(-candidates // k)
    params: dict[str, Any] = {"minimum_nprobes": config.ann_nprobes}
    if refine > 1:
        # With refine 1 lance would re-read the k vectors to re-order them: vector_search
        # re-scores the k rows it returns with exact cosine anyway (~1.5 ms saved at 1M).
        params["refine_factor"] = refine
    if config.ann_index_type == "IVF_HNSW_SQ":
        params["ef"] = refine * k  # the graph search must yield every candidate
    return params


NEVER_DUE = sys.maxsize  # ann_due_rows of an index no row count retrains


def ann_due_rows(config: WorldGraphConfig, partitions: int | None, mirrored: bool = False) -> int:
    """Rows at which a table's ANN index is built (``partitions`` None: no index yet) or
    retrained: once its partitions, trained on the first rows, would each hold
    ``ann_retrain_growth`` times the rows they were sized for. Geometric growth keeps the total
    training work within a small multiple of the last build.

    ``mirrored``: the table is searched through its in-process mirror (mirror.py, with its own
    lists: ivf.py), and LanceDB's index only serves until the mirror is ready; its retrain waits
    for ``ann_retrain_growth_mirrored`` (a retrain re-encodes every row: at 1.1M rows it took 78
    CPU-seconds, three quarters of the upkeep of the 200k rows it fell among; bench/README.md,
    "Less upkeep per row"). Rows past its partitions are still indexed by each fold: a search
    of the grown partitions reads more codes, it misses no more rows. A mirrored table's
    retrain that would fall past ``ann_retrain_max_rows_mirrored`` rows never comes
    (``NEVER_DUE``): the index keeps its partitions, and folds take in the rows past them."""
    if partitions is None:
        return config.ann_index_min_rows
    growth = config.ann_retrain_growth_mirrored if mirrored else config.ann_retrain_growth
    due = math.ceil(growth * partitions) * config.ann_partition_rows
    if mirrored and 0 < config.ann_retrain_max_rows_mirrored < due:
        return NEVER_DUE
    return due


def ann_mirrored(config: WorldGraphConfig, local: bool, partitions: int) -> bool:
    """Whether the table of an ANN index of ``partitions`` is searched through its mirror: a
    local table (an object store's has none) whose index was trained on at least
    ``mirror_min_rows`` rows (``partitions`` of ``ann_partition_rows``: it has them still)."""
    return local and 0 < config.mirror_min_rows <= partitions * config.ann_partition_rows


def index_partitions(dataset: Any, name: str) -> int | None:
    """IVF partitions of the vector index ``name`` of a pylance dataset (None: no such index)."""
    try:
        stats = dataset.stats.index_stats(name)
    except Exception:  # no such index (yet)
        return None
    found = [int(ix.get("num_partitions") or 1) for ix in stats.get("indices", [])]
    return max(found) if found else 1


DELETED_SHARE = 0.1  # lance's compaction rewrites a fragment for its deletions past this share


def deleted_fragments(dataset: Any) -> set[int]:
    """The fragments of a pylance dataset with more than ``DELETED_SHARE`` of their rows deleted
    (a compaction rewrites them to drop those rows)."""
    out = set()
    for frag in dataset.get_fragments():
        meta = frag.metadata
        deleted = meta.deletion_file.num_deleted_rows if meta.deletion_file is not None else 0
        if deleted > DELETED_SHARE * meta.physical_rows:
            out.add(int(frag.fragment_id))
    return out


COMPACT_TIER = 4  # fragments of compact_target_rows merge into one COMPACT_TIER times as big


def index_segments(dataset: Any) -> dict[str, list[set[int]]]:
    """The fragments each index segment covers: index name -> one set of fragment ids per segment,
    oldest first."""
    out: dict[str, list[set[int]]] = {}
    for desc in dataset.describe_indices():
        segs = sorted(desc.segments, key=lambda s: s.created_at)
        out[desc.name] = [set(int(f) for f in s.fragment_ids) for s in segs]
    return out


def fragment_rows(dataset: Any) -> dict[int, int]:
    """Physical rows of each fragment of a pylance dataset, by fragment id (in the table's order)."""
    return {int(f.fragment_id): int(f.metadata.physical_rows) for f in dataset.get_fragments()}


def free_small_fragments(rows: dict[int, int], segments: dict[str, list[set[int]]], target_rows: int) -> dict[int, int]:
    """The small fragments (under ``target_rows``) a compaction to ``target_rows`` can merge: those
    no index segment covers together with a fragment of ``target_rows`` or more. Lance merges only
    neighbouring fragments that the same segments of every index cover, and a fragment of the
    target size is never merged again by that tier, so a small fragment beside one in a segment (a
    remainder of the last merge) waits for a later merge that takes in that segment
    (``tier_merges``)."""
    stuck: set[int] = set()
    for segs in segments.values():
        for frags in segs:
            if any(rows.get(f, 0) >= target_rows for f in frags):
                stuck |= frags
    return {f: r for f, r in rows.items() if r < target_rows and f not in stuck}


def compaction_target(dataset: Any, target_rows: int, full: bool = False,
                      segments: dict[str, list[set[int]]] | None = None) -> int | None:
    """The fragment size a compaction should aim at now, or None when none is worth a rewrite.

    Each write adds a small fragment. Compacting at every optimize rewrote the growing merged
    fragment again and again (and held the table's write lock meanwhile), so small fragments
    wait until they add up to a full one (``target_rows``), and a fragment with more than
    ``DELETED_SHARE`` of its rows deleted is rewritten to drop them. A second tier keeps the
    count of fragments down as the table grows (a search reads its hits from every fragment
    they are in, at a cost per fragment): once ``COMPACT_TIER`` fragments of ``target_rows``
    to ``COMPACT_TIER * target_rows`` rows exist, they are merged into fragments of up to
    ``COMPACT_TIER * target_rows``. Each row is so rewritten about twice. ``full`` (an
    explicit optimize) merges everything below the second tier's size at once.

    ``segments`` (``index_segments``): the small fragments counted for the first tier are only
    those it can merge (``free_small_fragments``); counting the others kept the trigger true at
    every run while lance merged only the few newest fragments (bench/README.md, "The first
    compaction tier"). Likewise the second tier counts only the fragments no segment covers
    together with one of its size (``tier_merges``: it rewrites no other).
    """
    big = target_rows * COMPACT_TIER
    if full:
        return big
    small = count = mid = 0
    free = free_mid = None
    if segments is not None:
        rows = fragment_rows(dataset)
        free, free_mid = free_small_fragments(rows, segments, target_rows), free_small_fragments(rows, segments, big)
    for frag in dataset.get_fragments():
        meta = frag.metadata
        deleted = meta.deletion_file.num_deleted_rows if meta.deletion_file is not None else 0
        if deleted > DELETED_SHARE * meta.physical_rows:
            return target_rows
        if meta.physical_rows < target_rows:
            if free is None or int(frag.fragment_id) in free:
                small += meta.physical_rows
                count += 1
        elif meta.physical_rows < big:
            if free_mid is None or int(frag.fragment_id) in free_mid:
                mid += 1
    if mid >= COMPACT_TIER:
        return big
    return target_rows if count >= 2 and small >= target_rows else None


def segments_to_merge(sizes: list[int], max_segments: int) -> int:
    """How many of an index's newest segments to merge into one (0: none).

    ``sizes`` are the segments' sizes, oldest first. Nothing is merged while there are at most
    ``max_segments``. Past that, the newest run of segments is merged, taking in each older one
    while it is no bigger than the run so far (at least the two newest): small deltas merge with
    each other, and a big segment is only rewritten once the run has grown to its size, so each
    row is rewritten a few times, not once per fold (size-tiered, as in an LSM tree).
    """
    if len(sizes) <= max_segments:
        return 0
    run, n = sizes[-1], 1
    for size in reversed(sizes[:-1]):
        if n >= 2 and size > run:
            break
        run += size
        n += 1
    return n


def newest_covering(segs: list[set[int]], frags: set[int]) -> int:
    """How many of an index's newest segments (``segs``, oldest first) it takes to cover ``frags``
    (those of them the index covers: a fragment written since its last fold is in none)."""
    want = frags & set().union(*segs)
    covered: set[int] = set()
    n = 0
    for seg in reversed(segs):
        if want <= covered:
            break
        covered |= seg
        n += 1
    return n


def merges_covering(segments: dict[str, list[set[int]]], frags: set[int]) -> dict[str, int]:
    """Per index, how many of its newest segments to merge so that one segment covers ``frags``
    (indexes where that is already so are left out)."""
    plan = {name: newest_covering(segs, frags) for name, segs in segments.items()}
    return {name: n for name, n in plan.items() if n >= 2}


def aligned_merges(segments: dict[str, list[set[int]]], rows: dict[int, int], max_segments: int,
                   settled_rows: int | None = None) -> dict[str, int]:
    """Per index, how many of its newest segments to merge (``segments_to_merge``), chosen once for
    every index: from the rows each segment of the index with the most segments covers, then, for
    every index, the newest segments covering the same fragments.

    Each index chose on its own from its own bytes, so their segments came to cover different
    fragments (at 1.06M rows the 10 indexes' second segments covered 42 to 46 of the newest
    fragments), and lance merges only fragments the same segments of every index cover: the
    first compaction tier could merge only the newest, unindexed fragments (26-27 compactions
    per 200k rows, where ~3 were meant). Every fold adds one segment covering the same
    fragments to every index, so merges chosen alike keep the indexes' segments alike.

    ``settled_rows``: only the segments after the newest one covering a fragment of that many rows
    (a second compaction tier's output: ``settled_segments``) count and merge here; those are
    merged by the second tier (``tier_merges``), in sizes doubling from the newest to the oldest.
    Counted here, a few of them would leave room for as few as two newer segments, and every fold
    would then merge its rows into the newest."""
    if not segments:
        return {}
    ref = max(sorted(segments), key=lambda name: len(segments[name]))
    segs = segments[ref]
    if settled_rows is not None:
        segs = segs[settled_segments(segs, rows, settled_rows):]
    n = segments_to_merge([sum(rows.get(f, 0) for f in seg) for seg in segs], max_segments)
    if n < 2:
        return {}
    return merges_covering(segments, set().union(*segs[-n:]))


def merge_segments(dataset: Any, plan: dict[str, int],
                   timed: Callable[[str], AbstractContextManager[Any]] | None = None) -> Any:
    """Merge each index's newest ``plan[name]`` segments into one: the indexes merging as many in
    one call (one version: rows written meanwhile are folded into every index's merged segment
    alike). Returns the dataset at its newest version."""
    step = timed if timed is not None else (lambda _name: nullcontext())
    by_count: dict[int, list[str]] = {}
    for name, n in sorted(plan.items()):
        by_count.setdefault(n, []).append(name)
    for n, names in sorted(by_count.items()):
        log.info("merging the %d newest segments of indexes %s", n, ", ".join(names))
        with step("merge segments"):
            dataset.optimize.optimize_indices(index_names=names, num_indices_to_merge=n)
        dataset = dataset.checkout_version(dataset.latest_version)
    return dataset


def fold_new_rows(dataset: Any, config: WorldGraphConfig, full: bool = False,
                  timed: Callable[[str], AbstractContextManager[Any]] | None = None) -> Any:
    """Index the rows written since the last fold, then merge segments where needed; returns the
    dataset at its newest version.

    New rows go into a new delta segment of each index, at a cost that follows the new rows
    (merging them into the full-text index instead rewrote all of it: ~30 s at 1M rows, each
    time). Segments are then merged by ``aligned_merges``; ``full`` merges each index into one
    segment (a search reads every segment). ``timed(step)`` (a context manager) times each step.
    """
    step = timed if timed is not None else (lambda _name: nullcontext())
    with step("fold"):
        # every index in one call, on one version: each index's new segment covers the same
        # fragments (a compaction merges only fragments every index covers alike). Folded one at
        # a time (timed each), at 1M -> 1.2M: IVF_RQ 9.9 CPU-s, BM25 2.6, the 8 scalar 1.5 in all.
        dataset.optimize.optimize_indices(num_indices_to_merge=0)
    dataset = dataset.checkout_version(dataset.latest_version)
    segments = index_segments(dataset)
    if full:
        plan = {name: len(segs) for name, segs in segments.items() if len(segs) > 1}
    else:
        plan = aligned_merges(segments, fragment_rows(dataset), config.index_max_segments,
                              config.compact_target_rows * COMPACT_TIER)
    return merge_segments(dataset, plan, timed)


def merge_for_compaction(dataset: Any, target_rows: int, tier_rows: int,
                         timed: Callable[[str], AbstractContextManager[Any]] | None = None) -> tuple[Any, set[int]]:
    """Before a background compaction to ``tier_rows``: merge, in every index, the newest segments
    covering the fragments it can merge into one (``tier_merges``), so lance merges them all (it
    merges only neighbouring fragments the same segments cover). Returns the dataset at its newest
    version and the fragments the compaction may rewrite."""
    segments = index_segments(dataset)
    plan, only = tier_merges(segments, fragment_rows(dataset), target_rows, tier_rows)
    return merge_segments(dataset, plan, timed), only


SETTLED_SLACK = 1.5  # settled_run takes in an older segment up to this many times the run's rows


def settled_run(sizes: list[int], n: int) -> int:
    """How many of an index's newest segments (``sizes``: their rows, oldest first) to merge when the
    newest ``n`` must be: each older one is taken in while it holds at most ``SETTLED_SLACK`` times
    the rows of the run so far. Segments so grow about twofold from the newest to the oldest, as a
    binary counter's bits: a segment is rewritten once about as many rows have come after it, the
    whole index about once each time the table doubles. The slack: a second tier's rows vary
    (~280-420k at 1-5M rows), and with none, a newer run a little smaller than its neighbour would
    leave it alone, and so would each later one (simulated with such tiers: 6-11 settled segments
    at 5-10M rows instead of 4-5; bench/README.md, "Whole index rewrites during the ingest")."""
    run = sum(sizes[len(sizes) - n:])
    while 0 < n < len(sizes) and sizes[-n - 1] <= SETTLED_SLACK * run:
        run += sizes[-n - 1]
        n += 1
    return n


def tier_merges(segments: dict[str, list[set[int]]], rows: dict[int, int], target_rows: int,
                tier_rows: int) -> tuple[dict[str, int], set[int]]:
    """Before a background compaction to ``tier_rows`` (``target_rows``: the first tier; COMPACT_TIER
    times it: the second): per index, how many of its newest segments to merge so that one
    segment covers the fragments it can merge (``free_small_fragments`` at ``tier_rows``), and the
    fragments the compaction may rewrite (those under ``tier_rows`` the merged segments cover).

    A compaction rewrites every index segment covering a fragment it merges (lance remaps the row
    addresses of the whole segment), and lance merges only fragments the same segments cover. The
    second tier merged each index into one segment first, so each one (every ~300-400k rows at
    4-5M) rewrote the whole of every index twice, the merge and the remap (bench/README.md, "Whole
    index rewrites during the ingest"). It now merges the newest segments covering its fragments,
    taking in older ones only by ``settled_run``: a big segment is rewritten once the rows after it
    have grown to about its size. The compaction is kept to the returned fragments (the others stay
    where they are), so no segment but the merged one is remapped."""
    free = free_small_fragments(rows, segments, tier_rows)
    if not segments:
        return {}, set(free)
    ref = max(sorted(segments), key=lambda name: len(segments[name]))
    segs = segments[ref]
    n = newest_covering(segs, set(free)) if free else 0
    if n and tier_rows > target_rows:
        n = settled_run([sum(rows.get(f, 0) for f in seg) for seg in segs], n)
    frags = set(free).union(*segs[len(segs) - n:]) if n else set(free)
    only = {f for f in frags if rows.get(f, 0) < tier_rows}
    return merges_covering(segments, frags), only


def settled_segments(segments: list[set[int]], rows: dict[int, int], settled_rows: int) -> int:
    """How many of an index's segments (oldest first) up to the newest one covering a fragment of
    ``settled_rows`` or more (a second tier's output, never compacted again by size)."""
    for i in range(len(segments) - 1, -1, -1):
        if any(rows.get(f, 0) >= settled_rows for f in segments[i]):
            return i + 1
    return 0
