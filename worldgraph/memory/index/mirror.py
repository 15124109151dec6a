"""The in-process index in front of a big table: its filter columns and int8 codes of its vectors,
row by row, so a filtered search is decided and mostly run without LanceDB.

What a search of a big table cost in LanceDB (1M rows, bench/README.md "Filtered recall and ten
million episodes"): a prefilter's mask, the IVF search probing until k rows pass (a narrow
filter's nearest rows are spread over every partition), and reading the hits' rows (~25 us a
row). A ``Mirror`` holds, for every row of one version of the table, what a filter reads (hashes of
``agent_role``, ``agent_id`` and ``canvas_id``, ``timestamp``, ``success``), an int8 code of
its vector and the code's 4-bit residual (codes.py), and where the row is in LanceDB (its row
address). A filter becomes a numpy mask over the mirror's rows; a narrow one is searched exactly
over the codes of the rows that pass, a wide one through the lists over the codes (ivf.py) or
LanceDB's ANN index, their rows checked against the mask; the final candidates are re-ranked by
the float query against code plus residual (``results``). Columns the mirror does not hold are
read from LanceDB for the final hits only (``_take_rows`` by row address).

The generation check. A mirror belongs to one version of the table. ``IndexTables.latest_dataset``
moves to the newest version before every search (this or another process's commits), and
``refresh`` brings the mirror to it by comparing fragments (a fragment's data files are unique
per write, see ``small.fragment_files``): a new fragment's rows are read and appended; a fragment
whose deletion file changed has its live rows read again (a forget is seen by the next search of
every process); a fragment that is gone takes its rows with it, unless a new fragment holds the
same episode ids with the same filter columns (a compaction moves rows without changing them:
only their ids, addresses and filter columns are read, not their vectors). A table dropped and
made again (a rebuild) starts a new mirror. The mirror holds no text: episode ids, hashes of
the filter values and codes of vectors, all derived from the table, dropped with it on purge.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pyarrow as pa

from worldgraph.memory.index.codes import decode, quantize, quantize_fine
from worldgraph.memory.index.columns import Columns, hash_value, id_hashes, one_of
from worldgraph.memory.index.schema import as_timestamp

FILTER_COLUMNS = ("episode_id", "agent_role", "agent_id", "canvas_id", "timestamp", "success")
OFFSET_MASK = np.int64(0xFFFFFFFF)  # a row address: fragment id << 32 | row offset in the fragment
READ_BATCH = 65_536  # rows read at a time while a fragment is mirrored (their filter columns only)
# ... and with their vectors, quantized QUANTIZE_ROWS at a time: a batch's read buffers and
# float32 temporaries were most of a build's memory (1M rows: 1.1 GB over the process's at
# 65,536 rows quantized at once, ~0.45 GB at these; bench/README.md, "Bounded memory").
VECTOR_BATCH = 16_384
QUANTIZE_ROWS = 8_192
SHARE_SAMPLE = 16_384  # rows a filter's share is estimated from (Mirror.share)


class Fragment:
    """One fragment of the mirror's version: its files, and the mirror row of each of its rows."""

    __slots__ = ("files", "deletion", "by_offset", "file")

    def __init__(self, files: tuple[str, ...], deletion: str | None, by_offset: np.ndarray) -> None:
        self.files = files
        self.deletion = deletion
        self.by_offset = by_offset  # row offset in the fragment -> mirror row (-1: deleted)
        self.file: str | None = None  # the file it is saved in (mirror_files.py; None: not saved as it is)

    @property
    def rows(self) -> np.ndarray:
        """The mirror rows of the fragment's live rows."""
        return self.by_offset[self.by_offset >= 0]


def quantize_rows(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``quantize_fine`` of ``vectors``, ``QUANTIZE_ROWS`` rows at a time (its float32
    temporaries are ~8 times the float16 rows it is given)."""
    n, d = vectors.shape
    codes, fine = np.empty((n, d), np.int8), np.empty((n, (d + 1) // 2), np.uint8)
    for start in range(0, n, QUANTIZE_ROWS):
        codes[start:start + QUANTIZE_ROWS], fine[start:start + QUANTIZE_ROWS] = \
            quantize_fine(vectors[start:start + QUANTIZE_ROWS])
    return codes, fine


def fragment_key(frag: Any) -> tuple[tuple[str, ...], str | None]:
    deleted = frag.deletion_file()
    return tuple(d.path for d in frag.data_files()), None if deleted is None else str(deleted)


class Mirror:
    """The filter columns and vector codes of one table, at one version (see the module docstring)."""

    def __init__(self, dimensions: int) -> None:
        self.cols = Columns(dimensions)
        self.frags: dict[int, Fragment] = {}
        self.version: int | None = None
        self.alive = np.zeros(0, bool)
        self.live = 0
        self.uid = uuid.uuid4().hex  # names this mirror's rows: lists of another mirror's rows are not used
        self.lists: Any = None  # ivf.Ivf over the codes of the first rows (None: none yet)
        self.postings: Any = None  # filter_postings.Postings of the first rows (None: none yet; in memory only)
        self.dirty = False  # changed since it was last saved (mirror_files.py)
        self.saved_rows = 0  # rows of the saved state (manifest) this mirror continues (mirror_files.py)
        self._spill: tuple[int, Any] | None = None  # during a refresh: (rows, write the tail to files)
        self.coarse = False  # saved by a version without residuals, not read yet (fill_fine)
        self.saved_at = 0.0  # time.monotonic() of the last save
        self.order_tried = -1e9  # time.monotonic() when its codes were last put in list order (mirror_files.order_codes)
        self.counts = {"read_rows": 0, "moved_rows": 0, "refreshes": 0}
        self._id_masks: dict[int, tuple[Any, tuple[str, Any, int], np.ndarray]] = {}  # Mirror.mask of episode ids
        # Mirror.share's sample: (rows held when it was drawn, its rows, field -> their values, read once)
        self._sample: tuple[int, np.ndarray, dict[str, np.ndarray]] | None = None

    def stats(self) -> dict[str, Any]:
        """Rows held, live, saved; rows read from LanceDB and moved by compactions so far."""
        return {"rows": self.cols.n, "live": self.live, "saved_rows": self.saved_rows, "version": self.version,
                **self.counts}

    def behind(self, ds: Any) -> int:
        """Rows of ``ds``'s version the mirror has not seen: the physical rows of its fragments
        that are new to the mirror (fragment metadata only, no data read)."""
        if ds.version == self.version:
            return 0
        rows = 0
        for frag in ds.get_fragments():
            held = self.frags.get(frag.fragment_id)
            if held is None or held.files != tuple(d.path for d in frag.data_files()):
                rows += int(frag.metadata.physical_rows)
        return rows

    # -- the generation check -----------------------------------------------------------------

    def refresh(self, ds: Any, spill: Any = None, spill_rows: int = 0) -> None:
        """Bring the mirror to ``ds``'s version (see the module docstring). ``spill``: called
        (to write the rows held in memory to the mirror's files, mirror_files.write_rows) each
        time ``spill_rows`` new rows are held, so a build from the table holds that many rows in
        memory, not the table's."""
        if ds.version == self.version:
            return
        self._spill = (spill_rows, spill) if spill is not None and spill_rows > 0 else None
        try:
            self._refresh(ds)
        finally:
            self._spill = None

    def _refresh(self, ds: Any) -> None:
        cols = self.cols
        current = {f.fragment_id: f for f in ds.get_fragments()}
        keys = {fid: fragment_key(f) for fid, f in current.items()}
        gone: list[int] = []
        for fid, held in self.frags.items():
            key = keys.get(fid)
            if key is None or key[0] != held.files:
                gone.append(fid)
        new = [fid for fid in current if fid not in self.frags or fid in gone]
        freed = np.concatenate([self.frags[f].rows for f in gone]) if gone else np.zeros(0, np.int64)
        for fid in gone:
            del self.frags[fid]
        moved: dict[str, int] = {}
        if len(freed):
            moved = dict(zip(cols.episode_ids(freed), freed.tolist()))
        for fid in new:
            frag = current[fid]
            files, deletion = keys[fid]
            self.frags[fid] = Fragment(files, deletion, self._read(ds, frag, moved))
        for fid, held in self.frags.items():
            files, deletion = keys[fid]
            if fid not in new and deletion != held.deletion:  # a delete (a forget) in that fragment
                held.by_offset = self._live_rows(ds, current[fid], held)
                held.deletion = deletion
                held.file = None
        alive = np.zeros(cols.n, bool)
        for held in self.frags.values():
            alive[held.rows] = True
        cols.addr[:cols.n][~alive] = -1
        self.dirty = True
        self.alive = alive
        self.live = int(alive.sum())
        self.version = ds.version
        self.counts["refreshes"] += 1

    def _read(self, ds: Any, frag: Any, moved: dict[str, int]) -> np.ndarray:
        """Offset -> mirror row of a new fragment: its live rows moved from a fragment that is gone
        (same id and filter columns), else appended (their vectors read, a batch at a time)."""
        by_offset = np.full(int(frag.metadata.physical_rows), -1, np.int64)
        columns = list(FILTER_COLUMNS) if moved else [*FILTER_COLUMNS, "vector"]  # vectors: of new rows only
        for batch in ds.scanner(columns=columns, fragments=[frag], with_row_address=True,
                                batch_size=READ_BATCH if moved else VECTOR_BATCH).to_batches():
            tbl = pa.Table.from_batches([batch])
            addrs = tbl.column("_rowaddr").to_numpy().astype(np.int64)
            by_offset[addrs & OFFSET_MASK] = self._read_rows(ds, tbl, addrs, moved)
            if self._spill is not None and self.cols.n_tail >= self._spill[0]:
                self._spill[1]()
        return by_offset

    def _read_rows(self, ds: Any, tbl: pa.Table, addrs: np.ndarray, moved: dict[str, int]) -> np.ndarray:
        cols = self.cols
        out = np.full(tbl.num_rows, -1, np.int64)
        if moved and tbl.num_rows:
            ids = tbl.column("episode_id").to_pylist()
            cand = np.array([moved.get(e, -1) for e in ids], np.int64)
            known = cand >= 0
            if known.any():
                ok = np.zeros(len(cand), bool)
                ok[known] = cols.same_filters(cand[known], tbl.filter(pa.array(known)))
                out[ok] = cand[ok]
                cols.addr[cand[ok]] = addrs[ok]
                self.counts["moved_rows"] += int(ok.sum())
        fresh = np.flatnonzero(out < 0)
        if len(fresh):
            sub = tbl if len(fresh) == tbl.num_rows else tbl.take(pa.array(fresh))
            vec_tbl = sub if "vector" in tbl.column_names else ds._take_rows(addrs[fresh].tolist(), columns=["vector"])
            vectors = vec_tbl.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
            codes, fine = quantize_rows(vectors.reshape(len(fresh), cols.dimensions))
            out[fresh] = cols.append(sub, codes, fine, addrs[fresh])
            self.counts["read_rows"] += len(fresh)
        return out

    def fill_fine(self, ds: Any) -> None:
        """Read the residuals of every live row from ``ds`` (the mirror's version): a mirror saved
        before they existed (format 1) keeps its rows, row numbers and lists, and gains them."""
        cols = self.cols
        for batch in ds.scanner(columns=["vector"], with_row_address=True, batch_size=VECTOR_BATCH).to_batches():
            rows = self.rows_of(batch.column("_rowaddr").to_numpy().astype(np.int64))
            found = rows >= 0
            vectors = batch.column("vector").flatten().to_numpy(zero_copy_only=False).reshape(-1, cols.dimensions)
            cols.put("fine", rows[found], quantize_rows(vectors[found])[1])
        self.coarse = False
        self.dirty = True

    @staticmethod
    def _live_rows(ds: Any, frag: Any, held: Fragment) -> np.ndarray:
        """A fragment's offset -> mirror row once some of its rows were deleted (-1 for those)."""
        live = ds.scanner(columns=[], fragments=[frag], with_row_address=True).to_table()
        offsets = live.column("_rowaddr").to_numpy().astype(np.int64) & OFFSET_MASK
        out = np.full(len(held.by_offset), -1, np.int64)
        out[offsets] = held.by_offset[offsets]
        return out

    # -- searching --------------------------------------------------------------------------

    @staticmethod
    def _checks(where: dict[str, Any] | None) -> list[tuple[str, Any]]:
        """``where`` (validated by ``metadata_filter``) as (field, test of a column's values)."""
        w = where or {}
        checks: list[tuple[str, Any]] = []
        for key, field in (("agent_role", "role"), ("agent_id", "agent")):
            if w.get(key) is not None:
                value = np.uint64(hash_value(w[key]))
                checks.append((field, lambda col, value=value: col == value))
        canvas_ids = w.get("canvas_ids")
        if canvas_ids:
            wanted = [hash_value(c) for c in ([canvas_ids] if isinstance(canvas_ids, str) else list(canvas_ids))]
            checks.append(("canvas", lambda col: one_of(col, wanted)))
        if w.get("start") is not None:
            start = as_timestamp(w["start"], "where.start")
            checks.append(("ts", lambda col: col >= start))
        if w.get("end") is not None:
            end = as_timestamp(w["end"], "where.end")
            checks.append(("ts", lambda col: col <= end))
        if w.get("success_only"):
            checks.append(("ok", lambda col: col))
        return checks  # (episode_ids: Mirror.mask and Mirror.passes, by the ids' rows)

    def mask(self, where: dict[str, Any] | None) -> np.ndarray:
        """Live mirror rows passing ``where``, every row of the mirror (a pass of numpy over each
        filter column: ~1 ms a column at 1M rows, 18-34 ms at 10M)."""
        cols = self.cols
        if where and where.get("episode_ids") is not None:  # the rows of those ids, then the rest of where
            # kept for the same ids object at the same version: a recall's vector and text searches
            # (and its sub-queries) mask with the same filter (~1 ms a mask for 10k ids at 1M rows)
            ids, rest = where["episode_ids"], {k: v for k, v in where.items() if k != "episode_ids"}
            key = (repr(sorted(rest.items())), self.version, cols.n)
            held = self._id_masks.get(id(ids))
            if held is not None and held[0] is ids and held[1] == key:
                return held[2]
            rows = cols.rows_with_ids(_id_hashes(ids))
            rows = rows[rows < len(self.alive)]  # (rows appended by a refresh running beside this search)
            only = np.zeros(cols.n, bool)
            only[rows[self.passes(rest, rows)]] = True
            only.flags.writeable = False
            if len(self._id_masks) >= 4:
                self._id_masks.clear()
            self._id_masks[id(ids)] = (ids, key, only)
            return only
        checks = self._checks(where)
        keep: np.ndarray = self.alive[:cols.n].copy()
        offset = 0
        for segment in range(2):  # the base, then the tail
            size = cols.n_base if segment == 0 else cols.n_tail
            if size:
                part = keep[offset:offset + size]
                for field, check in checks:
                    part &= check(cols.segments(field)[segment])
                    if segment == 0:
                        cols.scanned(field)
            offset += size
        return keep

    def passes(self, where: dict[str, Any] | None, rows: np.ndarray) -> np.ndarray:
        """Whether each of mirror ``rows`` is live and passes ``where`` (its columns read for those
        rows only: a wide filter's candidates, without a mask of every row)."""
        if where and where.get("episode_ids") is not None:  # the mask of those ids (kept: Mirror.mask)
            mask = self.mask(where)
            inside = rows < len(mask)
            out = np.zeros(len(rows), bool)
            out[inside] = mask[rows[inside]]
            return out
        keep: np.ndarray = self.alive[rows]
        for field, check in self._checks(where):
            keep &= check(self.cols.take(field, rows))
        return keep

    def share(self, where: dict[str, Any] | None) -> float:
        """The share of live rows passing ``where``, estimated from ``SHARE_SAMPLE`` rows spread
        evenly over the mirror (all of them in a smaller one). The sample's column values are
        read once and kept (a row's values never change) until the mirror has grown by an eighth:
        read each time, its 16k scattered rows cost ~2 ms a column at 10M rows, in every
        filtered search."""
        if where and where.get("episode_ids") is not None:  # at most that many: as good as a sample's guess
            return min(1.0, len(where["episode_ids"]) / max(self.live, 1))
        rows, values = self._sampled()
        keep = self.alive[rows]
        live = int(keep.sum())
        for field, check in self._checks(where):
            column = values.get(field)
            if column is None:
                column = values[field] = self.cols.take(field, rows)
            keep = keep & check(column)
        return float(keep.sum()) / max(live, 1)

    def _sampled(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Mirror.share's sample rows and the values of them read so far (drawn anew once the
        mirror holds an eighth more rows, or any more while it is smaller than the sample)."""
        n = self.cols.n
        held = self._sample
        if held is not None:
            drawn = held[0]
            if n == drawn or (n > SHARE_SAMPLE and drawn <= n < drawn + drawn // 8):
                return held[1], held[2]
        rows = np.arange(n, dtype=np.int64) if n <= SHARE_SAMPLE else \
            np.linspace(0, n - 1, SHARE_SAMPLE).astype(np.int64)
        self._sample = (n, rows, {})
        return rows, self._sample[2]

    def nearest_codes(self, q: np.ndarray, k: int, rows: np.ndarray,
                      probe: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` of mirror ``rows`` nearest to ``q`` by the cosine of their codes (the query's
        own int8 code against theirs, SIMD: ~0.5 ms for 15k rows), best first, and their codes
        (``results`` re-ranks them without reading them again). ``probe``: the rows of the lists
        nearest the query (a few runs of the codes in list order), taken in that order; else (a
        filter's rows) in row order. Either is read through the map or, scattered over a big
        file, by pread (Columns.codes)."""
        import numkong

        cols = self.cols
        if not len(rows):
            return rows, np.zeros((0, cols.dimensions), np.int8)
        # a probe's rows come list by list, each list's a run of the codes' file (in list order);
        # a filter's rows are read in row order (in list order as scattered as in arrival order:
        # sorting them by place costs more, ~2 ms for 40k rows, than it saves on mapped pages)
        rows = rows if probe else np.sort(rows)
        qc = quantize(np.asarray(q, np.float32).reshape(1, -1))
        sims = np.empty(len(rows), np.float64)
        blocks = []
        for start in range(0, len(rows), READ_BATCH):  # a block of codes at a time
            part = rows[start:start + READ_BATCH]
            codes = cols.codes(part)
            blocks.append(codes)
            dots = np.asarray(numkong.cdist(codes, qc, metric="dot")).reshape(-1)
            sims[start:start + len(part)] = dots / np.maximum(cols.take("norms", part), 1e-9)
        top = np.argpartition(-sims, k - 1)[:k] if len(rows) > k else np.arange(len(rows))
        top = top[np.argsort(-sims[top], kind="stable")]
        kept = blocks[0][top] if len(blocks) == 1 else np.concatenate(blocks)[top]
        return rows[top], kept

    def unit_vectors(self, rows: np.ndarray, codes: np.ndarray | None = None) -> np.ndarray:
        """The unit vectors (float32) of mirror ``rows``, from their codes (given: ``nearest_codes``
        read them; else read) and residuals, read from their files (Columns.read: a search's
        final rows, scattered, would map 64 KB each)."""
        cols = self.cols
        scaled = decode(cols.read("codes", rows) if codes is None else codes, cols.read("fine", rows))
        unit: np.ndarray = scaled / np.maximum(np.linalg.norm(scaled, axis=1), 1e-9)[:, None]
        return unit

    def results(self, rows: np.ndarray, q: np.ndarray, k: int,
                codes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The best ``k`` of mirror ``rows`` by the cosine of the float query with their codes plus
        residuals: the rows, their unit vectors (float32) and their cosines, best first
        (``codes``: the rows' codes, when the caller holds them)."""
        unit = self.unit_vectors(rows, codes)
        sims = unit @ (np.asarray(q, np.float32) / (float(np.linalg.norm(q)) or 1.0))
        order = np.argsort(-sims, kind="stable")[:k]
        return rows[order], unit[order], sims[order]

    def addresses(self, rows: np.ndarray) -> list[int]:
        return [int(a) for a in self.cols.addr[rows]]

    def rows_of(self, addrs: np.ndarray) -> np.ndarray:
        """Mirror rows of LanceDB row addresses (-1: not a live row of the mirror's version)."""
        a = np.asarray(addrs, dtype=np.int64)
        out = np.full(len(a), -1, np.int64)
        frag_ids = a >> 32
        for fid in np.unique(frag_ids).tolist():
            held = self.frags.get(int(fid))
            if held is None:
                continue
            sel = frag_ids == fid
            offsets = a[sel] & OFFSET_MASK
            inside = offsets < len(held.by_offset)
            found = np.full(len(offsets), -1, np.int64)
            found[inside] = held.by_offset[offsets[inside]]
            out[sel] = found
        return out


_HASHED: list[tuple[Any, np.ndarray]] = []  # the last filter's ids (held: its id() stays theirs) and hashes


def _id_hashes(episode_ids: Any) -> np.ndarray:
    """The sorted distinct hashes of a ``where`` filter's episode ids (columns.id_hashes), kept for
    the same ids object: a search masks, checks and estimates with them (~3 ms for 5k ids)."""
    held = _HASHED[0] if _HASHED else None
    if held is not None and held[0] is episode_ids:
        return held[1]
    hashes = np.unique(id_hashes(pa.array(list(episode_ids), pa.string())))
    _HASHED[:] = [(episode_ids, hashes)]
    return hashes
