"""mirror.py: a big table is searched through its in-process mirror (filter columns and int8 codes),
with the results of an exact filtered search, and every search sees the table's newest version:
rows another writer appended, deleted (a forget) or compacted."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from worldgraph.config import WorldGraphConfig
from worldgraph.memory.index.codes import decode, quantize, quantize_fine
from worldgraph.memory.index.episode_index import EpisodeIndex

D = 48
DAY = 86400.0
NOW = 1_800_000_000.0
ROLES = ["Finance", "Ops", "Sales"]


def config() -> WorldGraphConfig:
    # mirrored from the first row; an ANN index from 1,000 rows; exact below 300 passing rows
    return WorldGraphConfig(mirror_min_rows=1, mirror_exact_rows=300, ann_index_min_rows=1_000,
                            ann_partition_rows=256, index_version_retention_seconds=0)


def make_rows(start: int, n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(0).standard_normal((12, D)).astype(np.float32)
    rows = []
    for i in range(start, start + n):
        vec = centres[i % 12] + 0.6 * rng.standard_normal(D).astype(np.float32)
        rows.append({"episode_id": f"e{i}", "tenant_id": "A", "agent_role": ROLES[i % 3], "agent_id": f"a{i % 11}",
                     "canvas_id": f"c{i % 40}" if i % 2 else None, "timestamp": NOW - (i % 90) * DAY - i,
                     "text": f"run {i} ledger", "vector": vec, "success": bool(i % 4)})
    return rows


def passes(row: dict, where: dict | None) -> bool:
    w = where or {}
    if w.get("agent_role") and row["agent_role"] != w["agent_role"]:
        return False
    if w.get("agent_id") and row["agent_id"] != w["agent_id"]:
        return False
    if w.get("canvas_ids") and row["canvas_id"] not in w["canvas_ids"]:
        return False
    if w.get("start") is not None and row["timestamp"] < w["start"]:
        return False
    if w.get("end") is not None and row["timestamp"] > w["end"]:
        return False
    if w.get("episode_ids") is not None and row["episode_id"] not in w["episode_ids"]:
        return False
    return not (w.get("success_only") and not row["success"])


def exact(rows: list[dict], q: np.ndarray, k: int, where: dict | None) -> list[str]:
    kept = [r for r in rows if passes(r, where)]
    if not kept:
        return []
    m = np.stack([r["vector"] for r in kept])
    sims = m @ q / (np.linalg.norm(m, axis=1) * np.linalg.norm(q))
    return [kept[i]["episode_id"] for i in np.argsort(-sims)[:k]]


WHERES = [None, {"agent_role": "Ops"}, {"agent_id": "a3"}, {"canvas_ids": ["c5", "c7"]},
          {"start": NOW - 30 * DAY, "end": NOW}, {"agent_role": "Sales", "start": NOW - 10 * DAY},
          {"success_only": True}, {"canvas_ids": ["c1"], "success_only": True},
          # the episodes of a session or of a feedback floor, as recall passes them (wide: through the lists)
          {"episode_ids": ["e5", "e17", "e2999", "e-none"]}, {"episode_ids": [f"e{i}" for i in range(0, 3000, 7)]},
          {"episode_ids": [f"e{i}" for i in range(0, 3000, 3)], "agent_role": "Finance"}]


@pytest.fixture()
def loaded(tmp_path):
    idx = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    rows = make_rows(0, 3_000, 1)
    for start in range(0, len(rows), 500):
        idx.upsert(rows[start:start + 500])
    idx.ensure_indexes()
    idx._small.max_rows = 0  # never the small-table copy: these tests are about the mirror
    yield idx, rows
    idx.close()


def test_codes_keep_the_cosine():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((200, 384)).astype(np.float32), rng.standard_normal((200, 384)).astype(np.float32)
    b = a + 0.5 * b
    want = np.einsum("ij,ij->i", a, b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    ca, cb = quantize(a).astype(np.float32), quantize(b).astype(np.float32)
    got = np.einsum("ij,ij->i", ca, cb) / (np.linalg.norm(ca, axis=1) * np.linalg.norm(cb, axis=1))
    assert np.abs(got - want).max() < 2e-3
    # with the residuals, ~15 times closer: what ranks the final hits (float query against a row)
    codes, fine = quantize_fine(b)
    assert (codes == quantize(b)).all() and fine.shape == (200, 192)
    rows = decode(codes, fine)
    top = np.abs(b).max(axis=1, keepdims=True)
    assert np.abs(rows - b * (127.0 / top)).max() <= 1 / 30 + 1e-4
    fine_cos = np.einsum("ij,ij->i", a, rows) / (np.linalg.norm(a, axis=1) * np.linalg.norm(rows, axis=1))
    code_cos = np.einsum("ij,ij->i", a, cb) / (np.linalg.norm(a, axis=1) * np.linalg.norm(cb, axis=1))
    assert np.abs(fine_cos - want).max() < np.abs(code_cos - want).max() / 8
    odd = np.random.default_rng(5).standard_normal((3, 7)).astype(np.float32)  # an odd width
    assert np.abs(decode(*quantize_fine(odd)) - odd * (127.0 / np.abs(odd).max(axis=1, keepdims=True))).max() <= 1 / 30 + 1e-4


@pytest.mark.parametrize("where", WHERES)
def test_filtered_search_matches_exact(loaded, where):
    idx, rows = loaded
    assert idx.has_vector_index("A")
    rng = np.random.default_rng(9)
    recalls = []
    for _ in range(8):
        q = rng.standard_normal(D).astype(np.float32)
        want = exact(rows, q, 10, where)
        hits = idx.vector_search("A", q, k=10, where=where, columns=["episode_id", "agent_role", "timestamp"])
        assert all(passes({**r, **h}, where) for h, r in zip(hits, [next(x for x in rows if x["episode_id"] == h[
            "episode_id"]) for h in hits]))
        assert [h["similarity"] for h in hits] == sorted((h["similarity"] for h in hits), reverse=True)
        for h in hits:  # the cosine of the stored vector, within the codes' precision
            v = next(r["vector"] for r in rows if r["episode_id"] == h["episode_id"])
            assert abs(h["similarity"] - float(v @ q / np.linalg.norm(v) / np.linalg.norm(q))) < 3e-3
            assert h["vector"].shape == (D,)
        recalls.append(len(set(want) & {h["episode_id"] for h in hits}) / max(len(want), 1))
    assert np.mean(recalls) >= 0.95
    assert idx._mirrors.get("ep-A", idx._part("A").latest_dataset()).live == 3_000


def test_text_search_takes_rows_from_the_mirror(loaded):
    idx, rows = loaded
    hits = idx.text_search("A", "ledger", k=5, where={"agent_role": "Ops"}, columns=["episode_id", "timestamp"])
    assert len(hits) == 5
    by_id = {r["episode_id"]: r for r in rows}
    for h in hits:
        assert by_id[h["episode_id"]]["agent_role"] == "Ops"
        assert h["timestamp"] == pytest.approx(by_id[h["episode_id"]]["timestamp"])
        v = by_id[h["episode_id"]]["vector"]
        assert float(h["vector"] @ v / np.linalg.norm(v)) > 0.998  # the unit vector of its code


def test_another_writer_appends_deletes_and_compacts(loaded, tmp_path):
    """A second index object on the same folder (another process's view: its own tables and
    mirror) writes; the first one's next search sees each change."""
    idx, rows = loaded
    other = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    q = np.asarray(rows[10]["vector"], np.float32)
    assert idx.vector_search("A", q, k=1)[0]["episode_id"] == "e10"
    mirror = idx._mirrors.get("ep-A", idx._part("A").latest_dataset())
    read_before = mirror.counts["read_rows"]
    # appended elsewhere: a near copy of e10 under a new id is found
    new = make_rows(3_000, 200, 2)
    new[0]["vector"] = q * 1.0001
    other.upsert(new)
    assert idx.vector_search("A", q, k=2, columns=["episode_id"])[0]["episode_id"] in {"e10", "e3000"}
    assert {h["episode_id"] for h in idx.vector_search("A", q, k=2)} == {"e10", "e3000"}
    # forgotten elsewhere: gone from the next search, filtered or not
    other.delete(["e10", "e3000"])
    for where in (None, {"agent_role": rows[10]["agent_role"]}, {"agent_id": rows[10]["agent_id"]}):
        assert not {h["episode_id"] for h in idx.vector_search("A", q, k=20, where=where)} & {"e10", "e3000"}
    assert not {h["episode_id"] for h in idx.text_search("A", "ledger run 10", k=50)} & {"e10", "e3000"}
    # compacted elsewhere (the rows move to new fragments): found by id, not read again
    other.optimize()
    mirror = idx._mirrors.get("ep-A", idx._part("A").latest_dataset())
    moved = mirror.counts["moved_rows"]
    rows_read = mirror.counts["read_rows"] - read_before
    assert moved > 0 and rows_read <= 200
    q2 = np.asarray(rows[20]["vector"], np.float32)
    assert idx.vector_search("A", q2, k=1)[0]["episode_id"] == "e20"
    assert mirror.live == 3_198
    assert idx.count("A") == 3_198
    other.close()


def _saved_mirror(loaded):
    """The loaded index closed (its mirror saved): a query vector, its Ops-filtered answer before
    the close, and the saved mirror's folder."""
    from worldgraph.memory.index import mirror_files

    idx, rows = loaded
    q = np.asarray(rows[42]["vector"], np.float32)
    want = [h["episode_id"] for h in idx.vector_search("A", q, k=10, where={"agent_role": "Ops"})]
    idx.close()
    return q, want, mirror_files.folder_of(idx.path, "eph-41")


def test_saved_mirror_reopens_and_survives_a_killed_save(loaded, tmp_path):
    """close() saves the mirror; a new index object opens it without reading a vector, brings it
    to the table's newest version, and a save killed halfway (rows past the manifest's count, files
    it does not name) changes nothing of what the next process reads."""
    from worldgraph.memory.index import mirror_files

    q, want, folder = _saved_mirror(loaded)
    manifest = (folder / "manifest.json").read_text()
    assert '"rows": 3000' in manifest
    # a save killed halfway: bytes past the count in every field file, a stray map and ids file
    for field in mirror_files.FIELDS:
        with open(folder / f"{field}.bin", "ab") as fh:
            fh.write(b"\x07" * 4096)
    (folder / "map-99-deadbeef.npy").write_bytes(b"partial")
    (folder / "ids-9999.arrow").write_bytes(b"partial")
    other = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    other._small.max_rows = 0
    other.upsert(make_rows(3_000, 100, 7))  # a version the saved mirror has not seen
    got = [h["episode_id"] for h in other.vector_search("A", q, k=10, where={"agent_role": "Ops"})]
    mirror = other._mirrors.get("eph-41", other._part("A").latest_dataset())
    assert mirror.counts["read_rows"] == 100 and mirror.cols.n_base >= 3_000  # only the new rows were read
    assert set(got) - {f"e{i}" for i in range(3_000, 3_100)} <= set(want)
    other.close()
    assert not (folder / "map-99-deadbeef.npy").exists() and not (folder / "ids-9999.arrow").exists()
    third = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    mirror = third._mirrors.get("eph-41", third._part("A").latest_dataset())
    assert mirror.counts["read_rows"] == 0 and mirror.live == 3_100
    # a malformed manifest: the mirror is built again from the table
    third._mirrors.drop()
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text("{not json")
    fourth = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    mirror = fourth._mirrors.get("eph-41", fourth._part("A").latest_dataset())
    assert mirror.counts["read_rows"] == 3_100
    # a manifest of another format (valid JSON): its files are replaced by the rebuilt mirror's
    fourth._mirrors.save_all()
    (folder / "manifest.json").write_text('{"format": 0, "rows": 3100}')
    fifth = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    assert fifth._mirrors.get("eph-41", fifth._part("A").latest_dataset()).counts["read_rows"] == 3_100
    fifth._mirrors.save_all()
    sixth = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    assert sixth._mirrors.get("eph-41", sixth._part("A").latest_dataset()).counts["read_rows"] == 0
    for done in (third, fourth, fifth, sixth):
        done.close()


def test_a_mirror_saved_before_residuals_gains_them_in_place(loaded, tmp_path):
    """A mirror saved by the previous version (format 1: int8 codes without their residuals, and
    an HNSW graph beside it) keeps its rows and row numbers: the residuals are read from the
    table in the background (LanceDB answers meanwhile), the same as a new mirror's, and saved as
    format 2; the old graph's files are deleted."""
    import json

    from worldgraph.memory.index import mirror_files

    q, want, folder = _saved_mirror(loaded)
    fine, eid = (folder / "fine.bin").read_bytes(), (folder / "eid.bin").read_bytes()
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "fine.bin").unlink()
    (folder / "eid.bin").unlink()
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format": 1}))
    (folder / "graph.usearch").write_bytes(b"an HNSW graph")
    (folder / "graph.json").write_text(json.dumps({"mirror": manifest["uid"], "covered": 3000}))
    other = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    other._small.max_rows = 0
    assert [h["episode_id"] for h in other.vector_search("A", q, k=10, where={"agent_role": "Ops"})] == want
    assert other.warm_mirror("A", timeout=60)
    mirror = other._mirrors.held("eph-41")
    assert not mirror.coarse and mirror.uid == manifest["uid"] and mirror.counts["read_rows"] == 0
    assert [h["episode_id"] for h in other.vector_search("A", q, k=10, where={"agent_role": "Ops"})] == want
    other._mirrors.save_all()
    assert json.loads((folder / "manifest.json").read_text())["format"] == mirror_files.FORMAT == 4
    assert (folder / "fine.bin").read_bytes() == fine and (folder / "eid.bin").read_bytes() == eid
    assert not (folder / "graph.usearch").exists() and not (folder / "graph.json").exists()
    other.close()


def test_a_mirror_saved_before_the_id_hashes_gains_them_on_opening(loaded, tmp_path):
    """A mirror saved by the previous version (format 2: no eid.bin) opens without reading the
    table: the hashes of its episode ids are made from its id files, an episode-id filter is
    answered in process at once, and the next save writes them (format 3)."""
    import json

    from worldgraph.memory.index import mirror_files

    idx, rows = loaded
    q = np.asarray(rows[42]["vector"], np.float32)
    where = {"episode_ids": [f"e{i}" for i in range(5, 3000, 11)]}
    want = exact(rows, q, 10, where)
    assert len(set(want) & {h["episode_id"] for h in idx.vector_search("A", q, k=10, where=where)}) >= 9
    idx.close()
    folder = mirror_files.folder_of(idx.path, "eph-41")
    eid = (folder / "eid.bin").read_bytes()
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "eid.bin").unlink()
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format": 2}))
    other = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    other._small.max_rows = 0
    got = [h["episode_id"] for h in other.vector_search("A", q, k=10, where=where)]
    mirror = other._mirrors.held("eph-41")
    assert mirror is not None and mirror.counts["read_rows"] == 0 and mirror.uid == manifest["uid"]
    assert len(set(got) & set(want)) >= 9
    other._mirrors.save_all()
    assert json.loads((folder / "manifest.json").read_text())["format"] == mirror_files.FORMAT
    assert (folder / "eid.bin").read_bytes() == eid
    other.close()


def test_an_empty_id_filter_passes_nothing(loaded):
    idx, rows = loaded
    q = np.asarray(rows[42]["vector"], np.float32)
    assert idx.vector_search("A", q, k=10, where={"episode_ids": []}) == []
    assert idx.text_search("A", "ledger", k=10, where={"episode_ids": []}) == []
    assert [h["episode_id"] for h in idx.text_search("A", "ledger", k=10, where={"episode_ids": ["e7", "e9"]})] \
        in (["e7", "e9"], ["e9", "e7"])


def test_purge_deletes_the_saved_mirror(loaded, tmp_path):
    from worldgraph.memory.index import mirror_files

    idx, rows = loaded
    idx.vector_search("A", np.asarray(rows[1]["vector"], np.float32), k=5)
    idx._mirrors.save_all()
    folder = mirror_files.folder_of(idx.path, "eph-41")
    assert (folder / "manifest.json").exists()
    idx.delete(["e1"])
    idx.purge([], ["A"], [])
    assert not folder.exists()
    assert "e1" not in {h["episode_id"] for h in idx.vector_search("A", np.asarray(rows[1]["vector"], np.float32), k=5)}


def test_a_big_unmirrored_table_is_searched_by_lancedb_while_its_mirror_builds(loaded, monkeypatch):
    """More rows new to the mirror than a search reads itself: the search goes to LanceDB and
    the mirror is built in the background; warm_mirror waits for it."""
    from worldgraph.memory.index import mirror_files

    idx, rows = loaded
    monkeypatch.setattr(mirror_files, "SYNC_ROWS", 100)
    release = __import__("threading").Event()
    real = mirror_files.Mirrors._refresh_bounded  # a build's refresh

    def slow(self, name, mirror, ds):
        release.wait(30)
        return real(self, name, mirror, ds)

    monkeypatch.setattr(mirror_files.Mirrors, "_refresh_bounded", slow)
    q = np.asarray(rows[7]["vector"], np.float32)
    hits = idx.vector_search("A", q, k=3, where={"agent_role": rows[7]["agent_role"]})
    assert hits[0]["episode_id"] == "e7"  # answered by LanceDB: no mirror yet
    assert idx.mirror_stats("A")["rows"] == 0
    release.set()
    assert idx.warm_mirror("A", timeout=60)
    assert idx.mirror_stats("A")["live"] == 3_000
    assert idx.vector_search("A", q, k=1)[0]["episode_id"] == "e7"


def test_a_saved_mirror_far_behind_is_opened_in_the_background(loaded, tmp_path, monkeypatch):
    """After a crash mid-ingest the saved mirror lacks more rows than a search reads itself: the
    first search does not open its files either (~0.4 s at 1M rows); it goes to LanceDB while
    the mirror is opened and brought up to date in the background, which then reads only the
    new rows."""
    import threading

    from worldgraph.memory.index import mirror_files

    q, _, folder = _saved_mirror(loaded)
    monkeypatch.setattr(mirror_files, "SYNC_ROWS", 100)
    writer = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    writer.upsert(make_rows(3_000, 300, 9))  # the ingest the saved mirror has not seen
    writer.close()
    assert mirror_files.saved_behind(folder, writer._part("A").latest_dataset()) == 300
    loads: list[str] = []
    real = mirror_files.load

    def watched(folder, dimensions):
        loads.append(threading.current_thread().name)
        return real(folder, dimensions)

    monkeypatch.setattr(mirror_files, "load", watched)
    fresh = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    fresh._small.max_rows = 0
    try:
        hits = fresh.vector_search("A", np.asarray(make_rows(3_000, 300, 9)[5]["vector"], np.float32), k=1)
        assert hits[0]["episode_id"] == "e3005"  # answered (by LanceDB), the new rows included
        assert fresh.warm_mirror("A", timeout=60)
        assert loads == ["worldgraph-index-mirror"], loads  # opened once, not in the searching thread
        stats = fresh.mirror_stats("A")
        assert stats["live"] == 3_300 and stats["read_rows"] == 300  # the saved rows were not read again
        assert fresh.vector_search("A", q, k=1)[0]["episode_id"] == "e42"
    finally:
        fresh.close()


def test_lists_over_the_codes_are_extended_saved_and_reopened(loaded, tmp_path, monkeypatch):
    """The lists (ivf.py) are trained and filled in the background once a table is searched; rows
    written after them are searched exactly beside them; a forgotten row is never returned; a new
    process opens the saved lists of the same mirror; the graph files of an earlier version go."""
    from worldgraph.memory.index import ivf, mirror_files

    monkeypatch.setattr(ivf, "MIN_ROWS", 100)
    monkeypatch.setattr(ivf, "CHUNK", 700)
    idx, rows = loaded
    folder = mirror_files.folder_of(idx.path, "eph-41")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "graph.usearch").write_bytes(b"an earlier version's graph")
    q = np.asarray(rows[33]["vector"], np.float32)
    idx.vector_search("A", q, k=5)
    assert idx.wait_for_maintenance(120)
    mirror = idx._mirrors.held("eph-41")
    assert mirror.lists is not None and mirror.lists.covered == 3_000
    assert mirror.lists.nlist == ivf.lists_for(3_000)
    assert not (folder / "graph.usearch").exists()
    rng = np.random.default_rng(2)
    for where in (None, {"agent_role": "Ops"}, {"success_only": True}, {"start": NOW - 45 * DAY}):
        recalls = []
        for i in range(6):  # queries near the stored vectors, as an embedded question is
            v = np.asarray(rows[i * 101]["vector"], np.float32) + 0.6 * rng.standard_normal(D).astype(np.float32)
            want = exact(rows, v, 10, where)
            got = {h["episode_id"] for h in idx.vector_search("A", v, k=10, where=where)}
            recalls.append(len(set(want) & got) / 10)
        assert np.mean(recalls) >= 0.95
    other = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    new = make_rows(3_000, 50, 3)
    new[0]["vector"] = q * 1.0001
    other.upsert(new)
    hits = [h["episode_id"] for h in idx.vector_search("A", q, k=2)]
    assert set(hits) == {"e33", "e3000"}  # e3000 is outside the lists yet: found in the tail
    other.delete(["e33"])
    assert "e33" not in {h["episode_id"] for h in idx.vector_search("A", q, k=10)}
    assert idx.wait_for_maintenance(120) and mirror.lists.covered == 3_050
    idx.close()
    assert (folder / "ivf.npz").exists() and (folder / "ivf.json").exists()
    old_umask = os.umask(0o022)
    os.umask(old_umask)
    if old_umask & 0o077 != 0o077:  # under a host's umask too, the codes and lists are private
        assert [p.name for p in folder.iterdir() if p.stat().st_mode & 0o077] == []
    third = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    assert third.vector_search("A", q, k=1)[0]["episode_id"] == "e3000"
    held = third._mirrors.held("eph-41")
    assert held.lists is not None and held.lists.covered == 3_050 and held.counts["read_rows"] == 0
    other.upsert(make_rows(4_000, 60, 5))
    third.vector_search("A", q, k=1)
    assert third.wait_for_maintenance(120)
    assert third._mirrors.held("eph-41").lists.covered == 3_110
    other.close()
    third.close()


def listed(loaded, monkeypatch):
    """The loaded index once its lists (ivf.py, from 100 rows here) cover its 3,000 rows."""
    from worldgraph.memory.index import ivf

    monkeypatch.setattr(ivf, "MIN_ROWS", 100)
    idx, rows = loaded
    idx.vector_search("A", np.asarray(rows[0]["vector"], np.float32), k=5)
    assert idx.wait_for_maintenance(120) and idx._mirrors.held("eph-41").lists.covered == 3_000
    return idx, rows


def test_a_wide_filter_is_checked_on_the_lists_rows_without_a_mask(loaded, monkeypatch):
    """A filter a sample says many rows pass is evaluated on the rows of the lists only (a mask of
    every row costs 18-34 ms a column at 10M rows); a narrower one gets its mask, cheaper than
    its scalar index's rows at 3,000 rows. Each gives the exact filtered top 10."""
    from worldgraph.memory.index.mirror import Mirror

    idx, rows = listed(loaded, monkeypatch)
    masks: list[dict] = []
    real = Mirror.mask
    monkeypatch.setattr(Mirror, "mask", lambda self, where: masks.append(where) or real(self, where))
    rng = np.random.default_rng(6)
    for where, masked in (({"success_only": True}, False), ({"start": NOW - 60 * DAY}, False),
                          ({"canvas_ids": ["c1", "c3"]}, True), ({"agent_role": "Ops", "start": NOW - 30 * DAY}, True)):
        recalls = []
        for i in range(6):
            v = np.asarray(rows[i * 97]["vector"], np.float32) + 0.6 * rng.standard_normal(D).astype(np.float32)
            got = {h["episode_id"] for h in idx.vector_search("A", v, k=10, where=where)}
            recalls.append(len(set(exact(rows, v, 10, where)) & got) / 10)
        assert np.mean(recalls) >= 0.95
        assert (where in masks) == masked


def test_a_narrow_filters_rows_from_the_scalar_indexes_are_the_masks(loaded, tmp_path, monkeypatch):
    """A narrow filter whose mask costs more than its scalar index's rows (priced here as a 10M
    table's: 13-18 ms a mask against 7-9 ms) takes its rows from LanceDB's scalar index: the same
    hits and scores as the mask gives, a row forgotten elsewhere never among them, and a mask
    where no clause's column has its scalar index or the filter names episode ids."""
    from worldgraph.memory.index import mirror_search
    from worldgraph.memory.index.mirror_search import MirrorSearch

    idx, rows = listed(loaded, monkeypatch)
    monkeypatch.setattr(mirror_search, "MASK_NS_PER_ROW", 10_000.0)
    found: list[int] = []
    real = MirrorSearch._indexed_rows

    def counted(self, part, ds, mirror, where, share):
        out = real(self, part, ds, mirror, where, share)
        found.append(-1 if out is None else len(out))
        return out

    monkeypatch.setattr(MirrorSearch, "_indexed_rows", counted)
    narrow = [{"agent_id": "a3"}, {"canvas_ids": ["c5", "c7"]}, {"canvas_ids": ["c1"], "success_only": True},
              {"agent_role": "Sales", "start": NOW - 10 * DAY}, {"start": NOW - 3 * DAY, "end": NOW - 2 * DAY}]
    rng = np.random.default_rng(8)
    queries = [np.asarray(rows[i * 89]["vector"], np.float32) + 0.6 * rng.standard_normal(D).astype(np.float32)
               for i in range(5)]

    def hits(where):
        return [[(h["episode_id"], round(h["similarity"], 6)) for h in idx.vector_search("A", v, k=10, where=where)]
                for v in queries]

    indexed = {repr(w): hits(w) for w in narrow}
    assert found and min(found) > 0 and len(found) == len(narrow) * len(queries)
    by_id = {r["episode_id"]: r for r in rows}
    for w in narrow:  # every hit passes, and they are the filtered top 10 (by the codes: near ties may swap)
        recalls = []
        for v, got in zip(queries, indexed[repr(w)]):
            assert got and all(passes(by_id[e], w) for e, _ in got)
            want = exact(rows, v, 10, w)
            recalls.append(len(set(want) & {e for e, _ in got}) / len(want))
        assert np.mean(recalls) >= 0.95
    monkeypatch.setattr(MirrorSearch, "_indexed_rows", lambda *a: None)  # the mask instead
    assert {repr(w): hits(w) for w in narrow} == indexed
    monkeypatch.setattr(MirrorSearch, "_indexed_rows", counted)
    # a row forgotten by another process is not among them
    where = {"agent_id": "a3"}
    top = indexed[repr(where)][0][0][0]
    other = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    try:
        other.delete([top])
    finally:
        other.close()
    assert top not in {h["episode_id"] for h in idx.vector_search("A", queries[0], k=10, where=where)}
    # a column without its scalar index, or episode ids: the mask
    found.clear()
    part = idx._part("A")
    monkeypatch.setattr(type(idx), "_indexes", lambda self, p, refresh=False: {"vector_idx": "IVF", "agent_id_idx": "Bitmap"})
    idx.vector_search("A", queries[0], k=10, where={"canvas_ids": ["c5"]})
    idx.vector_search("A", queries[0], k=10, where={"episode_ids": ["e1", "e2"], "agent_id": "a1"})
    assert found == [-1, -1] and part is not None
    idx.vector_search("A", queries[0], k=10, where={"agent_id": "a3"})
    assert found[-1] > 0
    # a clause without its index: the indexed one's rows, the other checked on the mirror
    where = {"agent_id": "a3", "canvas_ids": [f"c{j}" for j in range(1, 40, 2)]}
    got = [h["episode_id"] for h in idx.vector_search("A", queries[0], k=10, where=where)]
    assert found[-1] > 0 and got and all(passes(by_id[e], where) for e in got)


def test_a_narrow_filters_rows_come_the_cheaper_way(loaded, monkeypatch):
    """The mask of every row or a scalar index's rows, whichever the cost model prices lower: at
    3,000 rows the mask; priced as at 10M rows (a mask check ~1 ns a row there, 10M rows) the index
    of the filter's narrowest clause alone, the other clauses checked on the mirror's columns; a
    clause passing too many rows keeps the mask even so."""
    from worldgraph.memory.index import mirror_search
    from worldgraph.memory.index.mirror import Mirror

    idx, rows = listed(loaded, monkeypatch)
    masks: list[dict] = []
    real_mask = Mirror.mask
    monkeypatch.setattr(Mirror, "mask", lambda self, where: masks.append(where) or real_mask(self, where))
    asked: list[dict] = []
    real_filter = mirror_search.metadata_filter
    monkeypatch.setattr(mirror_search, "metadata_filter", lambda w: asked.append(w) or real_filter(w))
    q = np.asarray(rows[5]["vector"], np.float32)
    by_id = {r["episode_id"]: r for r in rows}
    narrow = {"agent_role": "Sales", "start": NOW - 10 * DAY}  # 1/3 of the rows, and ~12 %

    def search(where):
        got = [h["episode_id"] for h in idx.vector_search("A", q, k=10, where=where)]
        assert got and all(passes(by_id[e], where) for e in got)
        assert len(set(got) & set(exact(rows, q, 10, where))) >= 9
        return got

    search(narrow)
    assert masks == [narrow] and asked == []  # 3,000 rows: the mask is the cheaper
    masked = search(narrow)
    masks.clear()
    monkeypatch.setattr(mirror_search, "MASK_NS_PER_ROW", 10_000_000 / 3_000)  # each row priced as 10M's
    assert search(narrow) == masked
    assert masks == [] and asked == [{"start": NOW - 10 * DAY}]  # the narrowest clause alone
    asked.clear()
    monkeypatch.setattr(mirror_search, "INDEX_NS_PER_ROW", 10_000_000)  # a clause's rows priced above the mask
    search(narrow)
    assert masks == [narrow] and asked == []


def test_a_narrow_filters_rows_are_ranked_from_the_lists_nearest_the_query(loaded, monkeypatch):
    """A narrow filter's rows, searched exactly by their codes (one scattered read each), are
    first cut to those of the lists nearest the query, taken until ``MIN_PASSING`` times the rows
    ranked are in them, as the lists path takes a wide filter's: fewer reads, the same top 10."""
    from worldgraph.memory.index import ivf
    from worldgraph.memory.index.mirror import Mirror

    idx, rows = listed(loaded, monkeypatch)
    monkeypatch.setattr(ivf, "MIN_PASSING", 2)  # 2 x 40 rows of the ~273 passing (3,000 rows here)
    ranked: list[int] = []
    real = Mirror.nearest_codes
    monkeypatch.setattr(Mirror, "nearest_codes",
                        lambda self, q, k, r, probe=False: ranked.append(len(r)) or real(self, q, k, r, probe))
    where = {"agent_id": "a3"}
    passing = sum(passes(r, where) for r in rows)
    rng = np.random.default_rng(12)
    recalls = []
    for i in range(8):
        v = np.asarray(rows[i * 131]["vector"], np.float32) + 0.6 * rng.standard_normal(D).astype(np.float32)
        got = [h["episode_id"] for h in idx.vector_search("A", v, k=10, where=where)]
        recalls.append(len(set(got) & set(exact(rows, v, 10, where))) / 10)
    assert np.mean(recalls) >= 0.95
    assert len(ranked) == 8 and max(ranked) < passing and min(ranked) >= 2 * 40


def test_a_filters_share_reads_its_sample_once_and_draws_it_again_as_the_mirror_grows(loaded, monkeypatch):
    """``Mirror.share`` reads its sample rows' values of a column once (16k scattered rows: ~2 ms a
    column at 10M rows, in every filtered search), and draws the sample again for new rows."""
    from worldgraph.memory.index.columns import Columns

    idx, rows = loaded
    q = np.asarray(rows[0]["vector"], np.float32)
    idx.vector_search("A", q, k=5)
    assert idx.wait_for_maintenance(120)
    mirror = idx._mirrors.get("eph-41", idx._part("A").latest_dataset())
    taken: list[str] = []
    real = Columns.take
    monkeypatch.setattr(Columns, "take", lambda self, field, r: taken.append(field) or real(self, field, r))
    assert mirror.share({"agent_role": "Ops"}) == pytest.approx(1 / 3, abs=0.01)
    assert mirror.share({"agent_role": "Sales"}) == pytest.approx(1 / 3, abs=0.01)
    assert mirror.share({"agent_role": "Ops", "agent_id": "a1"}) > 0
    assert taken == ["role", "agent"]
    idx.upsert([{**r, "agent_role": "Legal"} for r in make_rows(3_000, 500, 2)])
    mirror = idx._mirrors.get("eph-41", idx._part("A").latest_dataset())
    assert mirror.cols.n == 3_500 and mirror.share({"agent_role": "Legal"}) == pytest.approx(1 / 7, abs=0.01)


def test_lists_are_trained_again_as_the_table_grows(monkeypatch):
    """Lists trained on few rows are replaced by more lists once the mirror has grown
    ``RETRAIN_GROWTH`` times; until the new ones cover the table, the old ones answer."""
    from worldgraph.memory.index import ivf

    rng = np.random.default_rng(4)
    codes = rng.integers(-127, 128, (4_000, D)).astype(np.int8)
    small = ivf.build(codes[:200], 200)
    small.add(0, codes[:200])
    assert small.nlist == ivf.lists_for(200) and not small.stale(200 * ivf.RETRAIN_GROWTH - 1)
    assert small.stale(200 * ivf.RETRAIN_GROWTH) == (ivf.lists_for(1_600) > small.nlist)
    big = ivf.build(codes, 4_000)
    for first in range(0, 4_000, 1_000):
        big.add(first, codes[first:first + 1_000])
    assert big.covered == 4_000 and big.nlist == ivf.lists_for(4_000)
    assert sorted(big.probe(codes[0].astype(np.float32), big.nlist).tolist()) == list(range(4_000))
    assert 0 in big.probe(codes[0].astype(np.float32), 1).tolist()  # a row is in its own nearest list


def test_a_build_from_the_table_holds_a_bounded_number_of_rows(loaded, tmp_path, monkeypatch):
    """A mirror built from the table (its saved files gone) writes its rows to its files every
    ``mirror_build_rows`` rows and maps them from there (docs/architecture.md, "Memory of a
    process"): it holds at most that many rows in memory (plus one read batch), where it held
    the whole table's; the mirror it saves is the one a build in memory makes, field by field,
    and a new process opens it without reading a row."""
    from worldgraph.memory.index import mirror as mirror_module
    from worldgraph.memory.index import mirror_files
    from worldgraph.memory.index.columns import FIELDS, Columns

    idx, rows = loaded
    q = np.asarray(rows[42]["vector"], np.float32)
    want = [h["episode_id"] for h in idx.vector_search("A", q, k=10, where={"agent_role": "Ops"})]
    idx.close()
    mirror_files.remove(idx.path)
    monkeypatch.setattr(mirror_module, "VECTOR_BATCH", 100)
    monkeypatch.setattr(mirror_module, "QUANTIZE_ROWS", 30)  # a batch quantized in parts
    monkeypatch.setattr(mirror_files, "SYNC_ROWS", 100)  # built in the background, as a big table's is
    held: list[int] = []
    real = Columns.append

    def watched(self, tbl, codes, fine, addrs):
        out = real(self, tbl, codes, fine, addrs)
        held.append(self.n_tail)
        return out

    monkeypatch.setattr(Columns, "append", watched)
    cfg = config().model_copy(update={"mirror_build_rows": 400})
    built = EpisodeIndex(tmp_path / "db", D, "test-embedder", cfg)
    built._small.max_rows = 0
    try:
        assert built.warm_mirror("A", timeout=60)
        assert sum(1 for n in held if n == 100) >= 3_000 // 500  # the tail began again after each write
        assert max(held) < 400 + 100, max(held)  # not the table's 3,000 rows
        got = built._mirrors.held("eph-41")
        assert got.cols.n == 3_000 and got.cols.n_tail == 0 and got.saved_rows == 3_000
        ds = built._part("A").latest_dataset()
        monkeypatch.setattr(Columns, "append", real)
        monkeypatch.setattr(mirror_module, "QUANTIZE_ROWS", 10**9)
        memory = mirror_module.Mirror(D)
        memory.refresh(ds)  # the same rows, held in memory (no files), each batch quantized at once
        every = np.arange(3_000)
        assert memory.cols.episode_ids(every) == got.cols.episode_ids(every)
        for field in FIELDS:
            assert np.array_equal(memory.cols.take(field, every), got.cols.take(field, every)), field
        assert np.array_equal(memory.cols.addr[:3_000], got.cols.addr[:3_000])
        assert [h["episode_id"] for h in built.vector_search("A", q, k=10, where={"agent_role": "Ops"})] == want
    finally:
        built.close()
    again = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    try:
        mirror = again._mirrors.get("eph-41", again._part("A").latest_dataset())
        assert mirror is not None and mirror.counts["read_rows"] == 0 and mirror.live == 3_000
    finally:
        again.close()


# -- what a process holds of a saved mirror: the ids on their file's pages, not copied into memory;
# the residuals of a search's final rows and the codes the lists are filled from read from their
# files, so their pages do not stay resident (bench/README.md, "What a recalling process holds")

SMAPS = Path("/proc/self/smaps")


def resident_kb(path: Path) -> int:
    """kB of ``path``'s pages mapped in this process and resident (every mapping of it)."""
    total, current = 0, False
    for line in SMAPS.read_text().splitlines():
        parts = line.split()
        if parts and "-" in parts[0] and len(parts) >= 5 and not parts[0].endswith(":"):
            current = len(parts) >= 6 and parts[5] == str(path)
        elif current and parts and parts[0] == "Rss:":
            total += int(parts[1])
    return total


needs_proc = pytest.mark.skipif(not SMAPS.exists(), reason="reads /proc/self/smaps (Linux)")


def test_the_episode_ids_are_not_copied_into_memory(loaded, tmp_path):
    """Opening a saved mirror maps its id files: Arrow allocates nothing for them (before, the
    ids were copied out of the map: 40 bytes a row of anonymous memory, 400 MB at 10M rows)."""
    from worldgraph.memory.index import mirror_files

    _, _, folder = _saved_mirror(loaded)
    before = pa.total_allocated_bytes()
    mirror = mirror_files.load(folder, D)
    assert mirror is not None and mirror.cols.n == 3_000
    assert pa.total_allocated_bytes() - before < 1_000
    assert mirror.cols.episode_ids(np.array([0, 1_234, 2_999])) == ["e0", "e1234", "e2999"]


def test_read_gives_what_take_gives_from_the_maps_own_file(loaded, tmp_path):
    """``Columns.read`` of rows of the saved base and of the tail, in any order, with runs and
    repeats, equals ``take``; it reads the file the base was mapped from, not whatever is at its
    path later (a rebuild in another process writes new files there)."""
    q, _, folder = _saved_mirror(loaded)
    other = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    other._small.max_rows = 0
    other.upsert(make_rows(3_000, 100, 7))
    other.vector_search("A", q, k=5)
    cols = other._mirrors.held("eph-41").cols
    assert cols.n_base == 3_000 and cols.n_tail == 100
    rows = np.concatenate([np.random.default_rng(3).integers(0, 3_100, 500), np.arange(2_990, 3_010),
                           np.array([5, 5, 3_099, 0])])
    for field in ("fine", "codes"):
        assert np.array_equal(cols.read(field, rows), cols.take(field, rows))
    want = cols.take("fine", rows)
    path = folder / "fine.bin"
    path.unlink()
    path.write_bytes(b"\x00" * (3_000 * (D // 2)))
    assert np.array_equal(cols.read("fine", rows), want)
    other.close()


@needs_proc
def test_searches_leave_the_residuals_file_unmapped(loaded, tmp_path):
    """A search reads its final rows' residuals from the file: none of ``fine.bin``'s pages stay
    mapped, while the codes its scan compares are (before: 64 KB mapped around each final row,
    every page of the file after 200 recalls at 1M rows)."""
    q, want, folder = _saved_mirror(loaded)
    before = resident_kb(folder / "codes.bin")
    other = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    other._small.max_rows = 0
    for where in (None, {"agent_role": "Ops"}, {"success_only": True}):
        assert other.vector_search("A", q, k=10, where=where)
    assert [h["episode_id"] for h in other.vector_search("A", q, k=10, where={"agent_role": "Ops"})] == want
    assert resident_kb(folder / "codes.bin") > before  # the scan's codes: through the new map
    assert resident_kb(folder / "fine.bin") == 0
    other.close()


@needs_proc
def test_lists_are_trained_and_filled_without_mapping_the_codes(loaded, tmp_path, monkeypatch):
    """Lists trained and filled from a saved mirror read its codes from the file: a process that
    only makes the mirror ready (a recording process, a warm-up) holds none of the codes' pages
    (before: every page of codes.bin, 3.8 GB at 10M rows)."""
    from worldgraph.memory.index import ivf

    monkeypatch.setattr(ivf, "MIN_ROWS", 100)
    monkeypatch.setattr(ivf, "CHUNK", 700)
    q, _, folder = _saved_mirror(loaded)
    for name in ("ivf.npz", "ivf.json"):
        (folder / name).unlink(missing_ok=True)
    before = resident_kb(folder / "codes.bin")  # (the closed index's own map, which its searches read)
    other = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    assert other.warm_mirror("A") and other.wait_for_maintenance(120)
    lists = other._mirrors.held("eph-41").lists
    assert lists is not None and lists.covered == 3_000
    assert resident_kb(folder / "codes.bin") == before
    assert lists.rows_in(np.arange(lists.nlist)).dtype == np.int32  # postings: 4 bytes a row, not 8
    assert other.vector_search("A", q, k=1)[0]["episode_id"] == "e42"
    other.close()


# the codes in list order (mirror_files.order_codes): each list's codes contiguous in codes' file,
# a probe reads them by pread (bench/README.md, "Codes in list order")

def _ordered(tmp_path, monkeypatch, loaded):
    """The loaded index's saved mirror opened by a new index object whose lists (from 100 rows)
    are filled and its codes put in list order: (index, query, Ops answer, folder, codes before)."""
    from worldgraph.memory.index import ivf

    q, want, folder = _saved_mirror(loaded)  # (saved without lists: fewer rows than MIN_ROWS)
    monkeypatch.setattr(ivf, "MIN_ROWS", 100)
    monkeypatch.setattr(ivf, "CHUNK", 700)
    before = np.fromfile(folder / "codes.bin", np.int8).reshape(-1, D)[:3_000].copy()
    other = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    other._small.max_rows = 0
    assert other.warm_mirror("A") and other.wait_for_maintenance(120)
    return other, q, want, folder, before


def test_codes_are_put_in_list_order_replacing_the_arrival_order(loaded, tmp_path, monkeypatch):
    """Once the lists cover a saved mirror its codes are rewritten list after list into a new
    file that replaces codes.bin (not beside it), with each row's place; every row's code is the
    one it had, each list's rows are one run of the file, and searches answer as before."""
    import json

    other, q, want, folder, before = _ordered(tmp_path, monkeypatch, loaded)
    mirror = other._mirrors.held("eph-41")
    cols, lists = mirror.cols, mirror.lists
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["codes"].startswith("codes-") and manifest["order"]["rows"] == 3_000 == cols.ordered
    assert manifest["order"]["lists"] == lists.key
    assert not (folder / "codes.bin").exists() and len(list(folder.glob("codes*"))) == 1
    assert (folder / manifest["codes"]).stat().st_size == 3_000 * D
    rows = np.arange(3_000)
    assert np.array_equal(cols.take("codes", rows), before) and np.array_equal(cols.read("codes", rows), before)
    on_disk = np.fromfile(folder / manifest["codes"], np.int8).reshape(-1, D)
    assert np.array_equal(on_disk[cols.slots(rows)], before)
    for picked in (3_000, 700, 40):  # a scan's codes (through the map or by pread) are the rows' codes
        some = np.random.default_rng(picked).choice(3_000, picked, replace=False)
        assert np.array_equal(cols.codes(some), before[some])
    for x in range(lists.nlist):  # a list's rows: one run of places
        places = np.sort(cols.slots(lists.rows_in(np.array([x]))))
        assert len(places) == 0 or places[-1] - places[0] == len(places) - 1
    assert [h["episode_id"] for h in other.vector_search("A", q, k=10, where={"agent_role": "Ops"})] == want
    rng = np.random.default_rng(4)
    rows_ = make_rows(0, 3_000, 1)
    for where in (None, {"success_only": True}):
        recalls = []
        for i in range(6):
            v = np.asarray(rows_[i * 101]["vector"], np.float32) + 0.6 * rng.standard_normal(D).astype(np.float32)
            got = {h["episode_id"] for h in other.vector_search("A", v, k=10, where=where)}
            recalls.append(len(set(exact(rows_, v, 10, where)) & got) / 10)
        assert np.mean(recalls) >= 0.95
    other.close()
    third = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())  # reopened: in order, nothing read
    third._small.max_rows = 0
    assert [h["episode_id"] for h in third.vector_search("A", q, k=10, where={"agent_role": "Ops"})] == want
    held = third._mirrors.held("eph-41")
    assert held.counts["read_rows"] == 0 and held.cols.ordered == 3_000
    assert np.array_equal(held.cols.take("codes", rows), before)
    third.close()


WHERES = [None, {"agent_role": "Ops"}, {"success_only": True}, {"canvas_ids": ["c3"]}, {"agent_id": "a3"},
          {"start": NOW - 20 * DAY, "end": NOW - 10 * DAY}, {"agent_role": "Sales", "start": NOW - 30 * DAY}]


def _searches(index, n=14):
    """Answers of ``n`` searches of each of ``WHERES`` (vectors of the loaded rows)."""
    rows = make_rows(0, 3_000, 1)
    return [[h["episode_id"] for h in index.vector_search("A", np.asarray(rows[i * 97]["vector"], np.float32), k=10,
                                                           where=where)]
            for i in range(n) for where in WHERES]


def _mirror_files_kb(folder):
    return {p.name: resident_kb(p) for p in sorted(folder.iterdir()) if p.suffix in (".bin", ".arrow")}


@needs_proc
def test_no_page_of_a_mirror_file_stays_mapped_past_the_budget(loaded, tmp_path, monkeypatch):
    """With ``MAPPED_BYTES`` 0, no page of any mirror file (codes, filter columns, norms, id
    hashes) stays mapped in the process after a search of any kind, and of the id files only
    what opening them read: what a search reads through the maps is dropped at once, a narrow
    filter's scattered codes and the results' ids are read by pread. The answers are those of a
    process that keeps them mapped. (Before, the filter columns, the narrow scans' codes and the
    id files stayed mapped for good.)"""
    from worldgraph.memory.index import columns

    other, _, _, folder, _ = _ordered(tmp_path, monkeypatch, loaded)
    opened = {name: kb for name, kb in _mirror_files_kb(folder).items() if name.startswith("ids-")}
    kept = _searches(other)
    assert _mirror_files_kb(folder)["role.bin"] > 0  # the default budget (1 GB) keeps what was read
    ids = {name: kb for name, kb in _mirror_files_kb(folder).items() if name.startswith("ids-")}
    assert ids == opened  # (the pages opening the Arrow file read: its schema and footer)
    other.close()
    monkeypatch.setattr(columns, "MAPPED_BYTES", 0, raising=False)
    third = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())  # reopened, every page read dropped
    third._small.max_rows = 0
    rows = make_rows(0, 3_000, 1)
    first = None
    for i, where in enumerate(WHERES):
        third.vector_search("A", np.asarray(rows[i * 31]["vector"], np.float32), k=10, where=where)
        now = _mirror_files_kb(folder)
        ids = {name: now.pop(name) for name in list(now) if name.startswith("ids-")}
        first = first or ids
        assert now == dict.fromkeys(now, 0) and ids == first, where
    assert _searches(third) == kept
    third.close()


def test_the_pages_counted_stay_under_the_budget_and_every_process_shares_it(loaded, tmp_path, monkeypatch):
    """The bytes the process's mirrors count as mapped (``Columns.held``, every mirror together)
    stay at most ``MAPPED_BYTES`` after every search, the biggest holders dropped first; a
    search's answers do not change with the budget, and the ids read by pread are the ids."""
    from worldgraph.memory.index import columns

    other, _, _, _, _ = _ordered(tmp_path, monkeypatch, loaded)
    kept = _searches(other, 4)
    cols = other._mirrors.held("eph-41").cols
    full = sum(int(cols.base[f].nbytes) for f in columns.FIELDS if f not in ("fine",))
    assert columns._MAPPED.total() <= full
    monkeypatch.setattr(columns, "MAPPED_BYTES", 100_000)  # (codes 144 KB: more than half of it)
    rows = make_rows(0, 3_000, 1)
    totals = []
    for i in range(40):
        other.vector_search("A", np.asarray(rows[i * 61]["vector"], np.float32), k=10, where=WHERES[i % len(WHERES)])
        totals.append(columns._MAPPED.total())
        assert totals[-1] <= 100_000
    assert max(totals) > 50_000 and min(totals) < max(totals)  # read, then dropped
    assert _searches(other, 4) == kept
    some = np.random.default_rng(5).choice(3_000, 200, replace=False)
    assert cols.episode_ids(some) == [f"e{i}" for i in some] and cols.id_files
    other.close()
    assert sum(cols.held.values()) == 0  # closed: its pages given back


def test_ordered_codes_stay_right_under_forgets_appends_and_another_process(loaded, tmp_path, monkeypatch):
    """After the codes are put in order: a forget elsewhere is never returned, rows appended
    after them are found (searched from the tail, saved past the ordered rows), and a process
    that held the old codes' file neither saves over the new state nor reads the wrong codes."""
    from worldgraph.memory.index import ivf, mirror_files

    q, want, folder = _saved_mirror(loaded)
    stale = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())  # opens codes.bin, arrival order
    stale._small.max_rows = 0
    assert [h["episode_id"] for h in stale.vector_search("A", q, k=10, where={"agent_role": "Ops"})] == want
    assert stale.wait_for_maintenance(120) and stale._mirrors.held("eph-41").cols.codes_name == "codes.bin"
    monkeypatch.setattr(ivf, "MIN_ROWS", 100)  # (from now on the stale process fills lists too)
    monkeypatch.setattr(ivf, "CHUNK", 700)
    other = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    other._small.max_rows = 0
    assert other.warm_mirror("A") and other.wait_for_maintenance(120)
    assert other._mirrors.held("eph-41").cols.ordered == 3_000
    new = make_rows(3_000, 50, 3)
    new[0]["vector"] = q * 1.0001
    other.upsert(new)
    other.delete(["e42"])
    for idx in (other, stale):  # the stale process: its map still reads codes.bin's inode
        hits = [h["episode_id"] for h in idx.vector_search("A", q, k=3)]
        assert hits[0] == "e3000" and "e42" not in hits
    stale._mirrors.save_all()  # the saved state is not the one it continues: not saved over
    assert mirror_files.current(folder, other._mirrors.held("eph-41"))
    other.close()
    stale.close()
    third = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    third._small.max_rows = 0
    hits = [h["episode_id"] for h in third.vector_search("A", q, k=3)]
    assert hits[0] == "e3000" and "e42" not in hits
    held = third._mirrors.held("eph-41")
    # (ordered by this process's lists or, once it reopened and trained its own, by the stale one's)
    assert held.cols.ordered >= 3_000 and held.cols.n == 3_050 and held.counts["read_rows"] == 0
    third.close()


def test_an_object_stores_narrow_filter_is_masked_in_memory(s3_env, monkeypatch):
    """On an object store a narrow filter's rows come from the mirror's mask (in memory), not from
    the scalar indexes, whose pages are requests away; the hits are the filtered top 10 either way."""
    from worldgraph.memory.index import ivf
    from worldgraph.memory.index.mirror_search import MirrorSearch

    monkeypatch.setattr(ivf, "MIN_ROWS", 100)
    idx = EpisodeIndex(str(s3_env["uri"]), D, "test-embedder", config())
    try:
        rows = make_rows(0, 1_500, 1)
        for start in range(0, len(rows), 500):
            idx.upsert(rows[start:start + 500])
        idx.ensure_indexes()
        idx._small.max_rows = 0
        q = np.asarray(rows[3]["vector"], np.float32)
        idx.vector_search("A", q, k=5)
        assert idx.wait_for_maintenance(120)
        found: list[object] = []
        real = MirrorSearch._indexed_rows
        monkeypatch.setattr(MirrorSearch, "_indexed_rows",
                            lambda self, *a: found.append(real(self, *a)) or found[-1])
        where = {"canvas_ids": ["c5", "c7"]}
        got = [h["episode_id"] for h in idx.vector_search("A", q, k=10, where=where)]
        assert len(set(got) & set(exact(rows, q, 10, where))) >= 9
        assert found and all(f is None for f in found)
    finally:
        idx.close()
