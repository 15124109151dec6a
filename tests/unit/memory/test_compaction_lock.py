"""Compaction runs beside the writers, without the table's write lock but for a last attempt
(IndexTables._compact, docs/architecture.md "The episode index's write lock"): writers go on
during the rewrite and the commit, and what they did meanwhile (deletes, updates, appends, the
same ids from several processes) is never undone or duplicated. Against a real LanceDB in
tmp_path, and on S3 (moto)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lance.optimize
import numpy as np
import pytest

from worldgraph.config import WorldGraphConfig
from worldgraph.memory.index.episode_index import EpisodeIndex

REPO = Path(__file__).resolve().parents[3]
D = 16
# no background maintenance: each test runs the compaction itself
QUIET = WorldGraphConfig(ann_index_min_rows=10**6, compact_every_writes=10**6, optimize_every_rows=10**6,
                         compact_target_rows=100)


def rows(start: int, stop: int, tenant: str = "A", text: str = "row") -> list[dict[str, Any]]:
    rng = np.random.default_rng(start)
    return [{"episode_id": f"e{i}", "tenant_id": tenant, "vector": rng.normal(size=D), "text": f"{text} {i}"}
            for i in range(start, stop)]


def stored_ids(idx: EpisodeIndex, tenant: str = "A") -> list[str]:
    ds = idx._part(tenant).latest_dataset()  # type: ignore[union-attr]
    return list(ds.to_table(columns=["episode_id"]).column("episode_id").to_pylist())


def fragment_sizes(idx: EpisodeIndex, tenant: str = "A") -> list[int]:
    return [f.metadata.physical_rows for f in idx._part(tenant).latest_dataset().get_fragments()]  # type: ignore[union-attr]


class DuringRewrite:
    """Stands in for ``lance.optimize.Compaction``: calls ``hook()`` inside the first rewrite
    (``task.execute``) and records every rewrite's new data files."""

    def __init__(self, hook: Any) -> None:
        self.real = lance.optimize.Compaction
        self.hook = hook
        self.calls = 0
        self.files: list[str] = []

    def plan(self, dataset: Any, options: Any) -> Any:
        real = self.real.plan(dataset, options)
        return SimpleNamespace(read_version=real.read_version,
                               tasks=[SimpleNamespace(execute=self._execute(t)) for t in real.tasks])

    def _execute(self, task: Any) -> Any:
        def execute(dataset: Any) -> Any:
            if self.calls == 0:
                self.hook()
            self.calls += 1
            result = task.execute(dataset)
            self.files += [f.path for frag in result.new_fragments for f in frag.files]
            return result
        return execute

    def commit(self, dataset: Any, rewrites: Any, options: Any = None) -> Any:
        return self.real.commit(dataset, rewrites, options)


def small_fragments(path: Path, n: int = 6) -> EpisodeIndex:
    idx = EpisodeIndex(path, D, "synthetic", QUIET)
    for b in range(n):  # one fragment of 30 rows per append
        with idx.adding("A") as add:
            add(rows(30 * b, 30 * (b + 1)))
    # the first append built the scalar and BM25 indexes (a compaction remaps them); no fold since
    return idx


def test_writers_go_on_during_the_rewrite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer (its own lock files, as another process) appends while the background's
    compaction rewrites: it does not wait for the rewrite to end."""
    idx = small_fragments(tmp_path / "db")
    other = EpisodeIndex(tmp_path / "db", D, "synthetic", QUIET)
    done = threading.Event()

    def append_beside() -> None:
        def write() -> None:
            with other.adding("A") as add:
                add(rows(1000, 1010))
            done.set()
        t = threading.Thread(target=write, daemon=True)
        t.start()
        t.join(30)  # the old way this waits for the lock the rewrite holds, forever

    hooked = DuringRewrite(append_beside)
    monkeypatch.setattr(lance.optimize, "Compaction", hooked)
    idx._optimize_part(idx._part("A"))  # type: ignore[arg-type]  # what the maintenance child runs
    assert hooked.calls >= 1 and done.is_set()
    assert sorted(stored_ids(idx)) == sorted([f"e{i}" for i in range(180)] + [f"e{i}" for i in range(1000, 1010)])
    assert len(fragment_sizes(idx)) < 6  # compacted, the append's fragment beside it
    assert idx.get("A", ["e1005"])[0]["episode_id"] == "e1005"
    other.close()
    idx.close()


def test_a_delete_or_update_during_the_rewrite_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forget and an update committed while the compaction rewrote their fragments: the rewrite
    made before them is dropped (its files deleted) and done again; nothing comes back."""
    idx = small_fragments(tmp_path / "db")
    other = EpisodeIndex(tmp_path / "db", D, "synthetic", QUIET)

    def forget_and_update() -> None:
        other.delete(["e5", "e100"])
        other.upsert([dict(r, text="changed") for r in rows(7, 8)])
        with other.adding("A") as add:
            add(rows(2000, 2003))

    hooked = DuringRewrite(forget_and_update)
    monkeypatch.setattr(lance.optimize, "Compaction", hooked)
    part = idx._part("A")
    assert part is not None
    out = idx._compact(part, 100)
    assert out["dropped"] >= 1 and out["committed"] >= 1 and not out["locked"], out
    ids = stored_ids(idx)
    assert len(ids) == len(set(ids)) == 180 - 2 + 3
    assert "e5" not in ids and "e100" not in ids and "e2001" in ids
    assert idx.get("A", ["e5", "e100"]) == [] and idx.get("A", ["e7"])[0]["text"] == "changed"
    assert idx.count("A") == 181
    # the dropped rewrite's files are gone; what was committed is there
    data = Path(part.latest_dataset().uri) / "data"
    live = {f.path for frag in part.latest_dataset().get_fragments() for f in frag.metadata.files}
    assert hooked.files and all((data / f).exists() == (f in live) for f in hooked.files)
    assert max(fragment_sizes(idx)) >= 90  # the 30-row fragments were merged in the end
    other.close()
    idx.close()


def test_writers_go_on_during_the_commit_and_a_delete_before_it_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The commit, in which lance remaps every index (the most of a compaction's time at 1M rows),
    holds no lock either: another process appends and forgets meanwhile. The forget lands after
    the check for changed fragments, so lance refuses the commit; the rewrite is done again and
    the forgotten row stays gone."""
    idx = small_fragments(tmp_path / "db")
    other = EpisodeIndex(tmp_path / "db", D, "synthetic", QUIET)
    done = threading.Event()
    part = idx._part("A")
    assert part is not None

    class DuringCommit(DuringRewrite):
        def commit(self, dataset: Any, rewrites: Any, options: Any = None) -> Any:
            if not done.is_set():
                def write() -> None:
                    with other.adding("A") as add:
                        add(rows(1000, 1010))
                    other.delete(["e40"])  # a row of fragment 1, which the rewrite replaces
                    done.set()
                t = threading.Thread(target=write, daemon=True)
                t.start()
                t.join(30)  # with the commit under the lock this waits for it, forever
                assert done.is_set(), "the writer waited for the compaction's commit"
            return self.real.commit(dataset, rewrites, options)

    monkeypatch.setattr(lance.optimize, "Compaction", DuringCommit(lambda: None))
    out = idx._compact(part, 100)
    assert done.is_set() and out["attempts"] == 2 and out["dropped"] >= 1 and out["committed"] >= 1, out
    ids = stored_ids(idx)
    assert len(ids) == len(set(ids)) == 180 - 1 + 10 and "e40" not in ids and "e1005" in ids
    assert idx.get("A", ["e40"]) == [] and max(fragment_sizes(idx)) >= 90
    other.close()
    idx.close()


def test_a_writer_that_read_before_the_compaction_is_retried_by_lance(tmp_path: Path) -> None:
    """What the compaction's commit without the lock relies on, the other way round: a merge-insert
    and a delete planned on the version before a compaction's commit and committed after it are
    redone by lance on the new fragments (no duplicate id, no update or delete lost)."""
    idx = small_fragments(tmp_path / "db")
    part = idx._part("A")
    assert part is not None
    before = part.latest_dataset()
    idx._compact(part, 100)
    assert len(fragment_sizes(idx)) < 6
    stale = lance.dataset(before.uri, version=before.version)  # a writer that read before it
    src = idx._to_arrow([dict(r, text="changed") for r in rows(50, 51)] + rows(3000, 3001))
    stale.merge_insert("episode_id").when_matched_update_all().when_not_matched_insert_all().execute(src)
    lance.dataset(before.uri, version=before.version).delete("episode_id = 'e70'")
    ids = stored_ids(idx)
    assert len(ids) == len(set(ids)) == 180 + 1 - 1 and "e70" not in ids and "e3000" in ids
    assert idx.get("A", ["e50"])[0]["text"] == "changed"
    idx.close()


def test_a_rewrite_that_keeps_losing_is_done_under_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table whose fragments are changed during every rewrite is still compacted: the last
    attempt rewrites under the write lock."""
    idx = small_fragments(tmp_path / "db")
    other = EpisodeIndex(tmp_path / "db", D, "synthetic", QUIET)
    gone: list[str] = []

    class Always(DuringRewrite):
        def _execute(self, task: Any) -> Any:
            def execute(dataset: Any) -> Any:
                # a row of a fragment being rewritten is forgotten during each rewrite beside the
                # writers (fragment k holds e30k..; the last attempt holds the lock: a forget would
                # wait for it, so none then)
                if len(gone) < 2:
                    gone.append(f"e{30 * task.fragments[0].id + len(gone)}")
                    other.delete([gone[-1]])
                return task.execute(dataset)
            return execute

    monkeypatch.setattr(lance.optimize, "Compaction", Always(None))
    part = idx._part("A")
    assert part is not None
    out = idx._compact(part, 100)
    assert out["locked"] and out["attempts"] == 3, out
    ids = stored_ids(idx)
    assert len(gone) == 2 and len(ids) == len(set(ids)) == 178 and not set(gone) & set(ids)
    assert max(fragment_sizes(idx)) >= 90
    other.close()
    idx.close()


def test_sources_changed_sees_deletes_and_replaced_fragments(tmp_path: Path) -> None:
    from worldgraph.memory.index.tables import _sources_changed

    idx = small_fragments(tmp_path / "db", n=4)  # fragments 1-3 are not indexed yet: one group
    part = idx._part("A")
    assert part is not None
    ds = part.latest_dataset()
    plan = lance.optimize.Compaction.plan(ds, {"target_rows_per_fragment": 100})
    first, second = plan.tasks[0].execute(ds), plan.tasks[0].execute(ds)
    assert {f.id for f in first.original_fragments} == {1, 2, 3}

    def now() -> dict[int, Any]:
        return {f.fragment_id: f.metadata for f in part.latest_dataset().get_fragments()}
    assert not _sources_changed(first, now())
    with idx.adding("A") as add:  # an append touches no fragment of the rewrite
        add(rows(500, 510))
    idx.delete(["e3"])  # nor does a delete in fragment 0
    assert not _sources_changed(first, now())
    lance.optimize.Compaction.commit(part.latest_dataset(), [first])
    assert _sources_changed(second, now())  # its fragments were replaced by another compaction
    assert sorted(stored_ids(idx)) == sorted(f"e{i}" for i in [*range(120), *range(500, 510)] if i != 3)
    idx.delete(["e40"])
    rewrite = lance.optimize.Compaction.plan(part.latest_dataset(), {"target_rows_per_fragment": 1000}).tasks[0]
    changed = rewrite.execute(part.latest_dataset())
    assert not _sources_changed(changed, now())
    idx.delete(["e41"])  # another deletion file on a fragment it rewrote
    assert _sources_changed(changed, now())
    idx.close()


_WRITER = """
import sys, time
from pathlib import Path
import numpy as np
from worldgraph.config import WorldGraphConfig
from worldgraph.memory.index.episode_index import EpisodeIndex
path, who, stop = sys.argv[1], sys.argv[2], Path(sys.argv[3])
cfg = WorldGraphConfig(ann_index_min_rows=10**6, compact_every_writes=10**6, optimize_every_rows=10**6,
                       compact_target_rows=100)
idx = EpisodeIndex(path, 16, "synthetic", cfg)
rng = np.random.default_rng(abs(hash(who)) % 1000)
row = lambda eid: {"episode_id": eid, "tenant_id": "A", "vector": rng.normal(size=16), "text": f"{who} {eid}"}
if who == "compactor":
    part = idx._part("A")
    runs = 0
    while not stop.exists() or runs < 3:
        out = idx._compact(part, 1000)
        runs += 1
    print("runs", runs)
else:
    for b in range(25):
        # the same new ids from both writers (an upsert each: the key is the primary key), ids of
        # its own, and a forget of one of its ids of the batch before
        idx.upsert([row(f"shared-{b}-{i}") for i in range(5)] + [row(f"{who}-{b}-{i}") for i in range(20)])
        if b:
            idx.delete([f"{who}-{b - 1}-0"])
idx.close()
"""


def test_two_processes_writing_the_same_ids_during_compactions(tmp_path: Path) -> None:
    """Lance issue #4585 under the new lock rule: two processes upsert the same new ids and forget
    rows while a third compacts again and again; every id ends up once, no forgotten row is back."""
    path = tmp_path / "db"
    idx = EpisodeIndex(path, D, "synthetic", QUIET)
    for b in range(8):
        with idx.adding("A") as add:
            add(rows(30 * b, 30 * (b + 1)))
    stop = tmp_path / "stop"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    start = lambda who: subprocess.Popen([sys.executable, "-c", _WRITER, str(path), who, str(stop)],  # noqa: E731
                                         env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = [start("compactor"), start("w1"), start("w2")]
    try:
        for p in procs[1:]:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-3000:]
        stop.touch()
        out, err = procs[0].communicate(timeout=300)
        assert procs[0].returncode == 0, err[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    ids = stored_ids(idx)
    assert len(ids) == len(set(ids)), [i for i in set(ids) if ids.count(i) > 1][:10]
    expected = {f"e{i}" for i in range(240)} | {f"shared-{b}-{i}" for b in range(25) for i in range(5)} | {
        f"{w}-{b}-{i}" for w in ("w1", "w2") for b in range(25) for i in range(20) if not (i == 0 and b < 24)}
    assert set(ids) == expected
    assert idx.get("A", ["w1-3-0", "w2-10-0"]) == []
    idx.close()


def test_on_s3_a_delete_during_the_rewrite_is_kept(s3_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Off the local disk there is no lock file: the check before the commit is not atomic with
    it, and lance's own conflict check (a Rewrite preempted by a Delete is a retryable conflict)
    drops the rewrite; it is done again from the newest version, and the forget stays."""
    uri = s3_env["uri"]
    idx = EpisodeIndex(uri, D, "synthetic", QUIET)
    idx.upsert(rows(0, 30))
    for b in range(1, 5):
        idx.upsert(rows(30 * b, 30 * (b + 1)))
    other = EpisodeIndex(uri, D, "synthetic", QUIET)
    part = idx._part("A")
    assert part is not None
    target = {}

    def forget() -> None:  # the first fragment the rewrite reads: one of its rows
        target["id"] = f"e{30 * part.latest_dataset().get_fragments()[1].fragment_id}"
        other.delete([target["id"]])

    hooked = DuringRewrite(forget)
    monkeypatch.setattr(lance.optimize, "Compaction", hooked)
    out = idx._compact(part, 100)
    assert out["dropped"] >= 1 and out["committed"] >= 1, out
    ids = stored_ids(idx)
    assert len(ids) == len(set(ids)) == 149 and target["id"] not in ids
    assert max(fragment_sizes(idx)) >= 90
    other.close()
    idx.close()


def test_on_s3_a_delete_just_before_the_commit_is_kept(s3_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the check before the commit cannot see off the local disk: a forget between the
    check and the commit. Lance refuses the commit (a retryable conflict); the rewrite is done
    again and the forget stays."""
    uri = s3_env["uri"]
    idx = EpisodeIndex(uri, D, "synthetic", QUIET)
    for b in range(5):
        idx.upsert(rows(30 * b, 30 * (b + 1)))
    other = EpisodeIndex(uri, D, "synthetic", QUIET)
    part = idx._part("A")
    assert part is not None

    class LateForget(DuringRewrite):
        def commit(self, dataset: Any, rewrites: Any, options: Any = None) -> Any:
            if self.calls == 1:
                self.calls += 1
                other.delete(["e40"])  # a row of fragment 1, which the rewrite replaces
            return self.real.commit(dataset, rewrites, options)

    monkeypatch.setattr(lance.optimize, "Compaction", LateForget(lambda: None))
    out = idx._compact(part, 100)
    assert out["dropped"] >= 1 and out["committed"] >= 1 and out["attempts"] == 2, out
    ids = stored_ids(idx)
    assert len(ids) == len(set(ids)) == 149 and "e40" not in ids
    assert max(fragment_sizes(idx)) >= 90
    other.close()
    idx.close()


def test_a_purge_waits_for_a_compaction_in_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction's rewrite copies rows; a purge (which leaves a forgotten row in no file of the
    table) started meanwhile waits for it to end, then removes the row from what it wrote."""
    idx = small_fragments(tmp_path / "db")
    other = EpisodeIndex(tmp_path / "db", D, "synthetic", QUIET)
    purged = threading.Event()
    waited: list[bool] = []

    def purge_beside() -> None:
        def purge() -> None:
            other.purge(["e40"], ["A"], [])
            purged.set()
        threading.Thread(target=purge, daemon=True).start()
        waited.append(not purged.wait(5))  # the rewrite goes on: the purge has not ended

    monkeypatch.setattr(lance.optimize, "Compaction", DuringRewrite(purge_beside))
    part = idx._part("A")
    assert part is not None
    idx._compact(part, 100)
    assert waited == [True]
    assert purged.wait(60)
    assert "e40" not in stored_ids(idx) and idx.count("A") == 179
    ds = part.latest_dataset()
    assert all(f.metadata.deletion_file is None for f in ds.get_fragments())  # rewritten without it
    assert len(ds.versions()) == 1  # no older version (nor the compaction's) is kept
    other.close()
    idx.close()
