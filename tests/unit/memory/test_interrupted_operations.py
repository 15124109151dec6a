"""Files an operation killed before its commit leaves in a table's folder (IndexTables._building,
docs/architecture.md "Files a killed operation leaves"): an append's data file, a compaction's
rewritten fragments, an index update's segments. No version names them, and LanceDB keeps them
7 days (it cannot tell them from an operation in progress). They copy the rows they were made
from: a purge deletes them at once, and so does the next index update after a killed one. Each
operation is killed for real (SIGKILL, in a child process) after writing its files; against a real
LanceDB in tmp_path. The index lock that makes this safe (no purge deletes the files of an operation
under way) is exercised by purges beside writers and their maintenance children."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pytest

from worldgraph.config import WorldGraphConfig
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.index.schema import table_name

REPO = Path(__file__).resolve().parents[3]
D = 16
MARK = "Zqkilledb4commitX"  # one full-text term
# no background maintenance: each test runs what it needs itself
QUIET = WorldGraphConfig(ann_index_min_rows=10**6, compact_every_writes=10**6, optimize_every_rows=10**6,
                         compact_target_rows=1000)


def rows(start: int, stop: int, text: str = "row") -> list[dict[str, Any]]:
    rng = np.random.default_rng(start)
    return [{"episode_id": f"e{i}", "tenant_id": "A", "vector": rng.normal(size=D), "text": f"{text} {i}"}
            for i in range(start, stop)]


TABLE = table_name("A")


def table_dir(path: Path) -> Path:
    return path / f"{TABLE}.lance"


def unnamed_files(path: Path) -> list[str]:
    """The data files and index folders of the table that no remaining version names."""
    uri = table_dir(path)
    named: set[str] = set()
    for v in lance.dataset(str(uri)).versions():
        ds = lance.dataset(str(uri), version=v["version"])
        named |= {os.path.basename(d.path) for f in ds.get_fragments() for d in f.metadata.files}
        named |= {str(s.uuid) for i in ds.describe_indices() for s in i.segments}
    present = [f"data/{n}" for n in os.listdir(uri / "data")] + [f"_indices/{n}" for n in os.listdir(uri / "_indices")]
    return sorted(p for p in present if p.split("/", 1)[1] not in named)


def holding_the_word(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")
                  if p.is_file() and (MARK.encode() in (b := p.read_bytes()) or MARK.lower().encode() in b))


def with_the_word(path: Path) -> EpisodeIndex:
    """Three fragments, the second's rows with MARK; the first built the scalar and BM25 indexes."""
    idx = EpisodeIndex(path, D, "synthetic", QUIET)
    for b in range(3):
        with idx.adding("A") as add:
            add(rows(30 * b, 30 * (b + 1), text=MARK if b == 1 else "row"))
    return idx


# Run in a child: writes what each operation writes before its commit, then is killed. ``held``:
# inside the index's own _building (as a maintenance run), else bare (as a killed writer).
_KILLED = """
import os, signal, sys
import lance, pyarrow as pa
from lance.optimize import Compaction, CompactionOptions
from worldgraph.config import WorldGraphConfig
from worldgraph.memory.index.episode_index import EpisodeIndex

path, held, mark = sys.argv[1], sys.argv[2] == "held", sys.argv[3]
uri = os.path.join(path, sys.argv[4] + ".lance")

def write_then_die():
    ds = lance.dataset(uri)
    frags = [f.fragment_id for f in ds.get_fragments()]
    # an index update's segments (a BM25 index holds every term of the rows)
    ds.create_index_uncommitted("text", "INVERTED", name="killed_build", fragment_ids=frags)
    # a compaction's rewritten fragments
    plan = Compaction.plan(ds, CompactionOptions(target_rows_per_fragment=1000))
    assert plan.tasks, "nothing to compact"
    [task.execute(ds) for task in plan.tasks]
    # an append's data file
    table = ds.to_table(limit=5)
    table = table.set_column(table.schema.get_field_index("text"), "text", pa.array([mark + " new"] * 5))
    lance.fragment.write_fragments(table, ds)
    os.kill(os.getpid(), signal.SIGKILL)

if held:
    cfg = WorldGraphConfig(ann_index_min_rows=10**6, compact_every_writes=10**6, optimize_every_rows=10**6)
    idx = EpisodeIndex(path, 16, "synthetic", cfg)
    with idx._building(idx._part("A")):
        write_then_die()
else:
    write_then_die()
"""


def killed(path: Path, held: bool) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", _KILLED, str(path), "held" if held else "bare", MARK, TABLE],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]


def test_a_purge_deletes_what_a_killed_operation_left(tmp_path: Path) -> None:
    path = tmp_path / "db"
    idx = with_the_word(path)
    assert unnamed_files(path) == []
    killed(path, held=False)
    left = unnamed_files(path)
    assert any(f.startswith("data/") for f in left) and any(f.startswith("_indices/") for f in left), left
    assert set(holding_the_word(path)) & {f"{TABLE}.lance/{f}" for f in left}  # they copy the rows
    idx.delete([f"e{i}" for i in range(30, 60)])  # every row with the word
    idx.purge([], ["A"], [])
    assert holding_the_word(path) == []
    assert unnamed_files(path) == []
    assert idx.count("A") == 60 and len(idx.text_search("A", "row", k=100)) == 60
    idx.close()


def test_the_next_index_update_deletes_what_a_killed_one_left(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "db"
    idx = with_the_word(path)
    killed(path, held=True)
    mark = path / f".index.{TABLE}.building"
    assert mark.exists()  # the killed holder's: it did not end cleanly
    assert unnamed_files(path)
    with caplog.at_level(logging.WARNING, logger="worldgraph.memory.index.episode_index"):
        idx.optimize("A")
    assert unnamed_files(path) == []
    assert not mark.exists()
    assert "did not end cleanly" in caplog.text
    assert idx.count("A") == 90 and len(idx.text_search("A", MARK, k=100)) == 30
    idx.close()


def test_an_update_that_ends_cleanly_leaves_no_mark(tmp_path: Path) -> None:
    path = tmp_path / "db"
    idx = with_the_word(path)
    idx.optimize("A")
    idx.ensure_indexes(vector=False)
    assert not (path / f".index.{TABLE}.building").exists()
    assert unnamed_files(path) == []
    idx.close()


_BUILDING = """
import os, sys
import lance
from worldgraph.config import WorldGraphConfig
from worldgraph.memory.index.episode_index import EpisodeIndex

path = sys.argv[1]
cfg = WorldGraphConfig(ann_index_min_rows=10**6, compact_every_writes=10**6, optimize_every_rows=10**6)
idx = EpisodeIndex(path, 16, "synthetic", cfg)
with idx._building(idx._part("A")):
    ds = lance.dataset(os.path.join(path, sys.argv[2] + ".lance"))
    ds.create_index_uncommitted("text", "INVERTED", name="in_progress",
                                fragment_ids=[f.fragment_id for f in ds.get_fragments()])
    print("written", flush=True)
    sys.stdin.readline()  # the update goes on until the test says
idx.close()
"""


def test_a_purge_waits_for_an_index_update_in_another_process(tmp_path: Path) -> None:
    """The purge deletes every file no version names: never those of an update still under way."""
    path = tmp_path / "db"
    idx = with_the_word(path)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.Popen([sys.executable, "-c", _BUILDING, str(path), TABLE], env=env, cwd=REPO, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "written", child.stderr.read() if child.stderr else ""
        in_progress = unnamed_files(path)
        assert in_progress
        idx.delete(["e31"])
        purged = threading.Event()
        threading.Thread(target=lambda: (idx.purge([], ["A"], []), purged.set()), daemon=True).start()
        assert not purged.wait(3)  # it waits for the update
        assert unnamed_files(path) == in_progress  # which keeps its files
        child.stdin.write("end\n")
        child.stdin.flush()
        assert child.wait(60) == 0
        assert purged.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert unnamed_files(path) == []
    assert idx.count("A") == 89
    idx.close()


_WORLD_KILLED = """
import os, signal, sys
import lance
ds = lance.dataset(sys.argv[1])
lance.fragment.write_fragments(ds.to_table(), ds)  # an append's data file, never committed
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_world_index_purge_deletes_what_a_killed_writer_left(tmp_path: Path) -> None:
    from worldgraph.memory.index.world_index import WorldIndex, world_table_name

    path = tmp_path / "db"
    world = WorldIndex(path, D)
    world.write("A", [{"id": f"r{i}", "env_name": "Cellar", "kind": "fact", "text": f"{MARK} {i}" if i < 3 else "kept",
                       "vector": np.ones(D)} for i in range(6)])
    uri = path / f"{world_table_name('A')}.lance"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", _WORLD_KILLED, str(uri)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    world.write("A", [], delete_ids=["r0", "r1", "r2"])
    world.purge(["A"])
    assert holding_the_word(path) == []
    assert world.count("A") == 3


_HOLDING = """
import sys
from worldgraph.config import WorldGraphConfig
from worldgraph.memory.index.episode_index import EpisodeIndex

cfg = WorldGraphConfig(ann_index_min_rows=10**6, compact_every_writes=10**6, optimize_every_rows=10**6)
idx = EpisodeIndex(sys.argv[1], 16, "synthetic", cfg)
with idx._building(idx._part("A")):
    print("holding", flush=True)
    sys.stdin.readline()
idx.close()
"""


def test_a_write_missing_an_index_does_not_wait_for_another_process_maintenance(tmp_path: Path) -> None:
    """A table an earlier version wrote may lack an index; the write that notices does not wait
    for another process's maintenance run (minutes at 10M rows): a later write builds it."""
    path = tmp_path / "db"
    idx = with_the_word(path)
    part = idx._part("A")
    assert part is not None
    part.table.drop_index("agent_id_idx")
    idx._indexes(part, refresh=True)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.Popen([sys.executable, "-c", _HOLDING, str(path)], env=env, cwd=REPO, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "holding", child.stderr.read() if child.stderr else ""
        written = threading.Event()
        threading.Thread(target=lambda: (idx.upsert(rows(90, 95)), written.set()), daemon=True).start()
        assert written.wait(20)  # not behind the other process
        assert "agent_id_idx" not in idx._indexes(part, refresh=True)
        child.stdin.write("end\n")
        child.stdin.flush()
        assert child.wait(60) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    idx.upsert(rows(95, 96))  # a later write builds it
    assert "agent_id_idx" in idx._indexes(part, refresh=True)
    assert idx.count("A") == 96
    idx.close()


_BUSY = """
import sys, time
import numpy as np
from worldgraph.config import WorldGraphConfig
from worldgraph.memory.index.episode_index import EpisodeIndex

path, who, until = sys.argv[1], sys.argv[2], float(sys.argv[3])
# background maintenance (in its own child) at every few writes: folds, merges, compactions, ANN
cfg = WorldGraphConfig(ann_index_min_rows=400, compact_every_writes=3, optimize_every_rows=60, compact_target_rows=200,
                       index_version_retention_seconds=0, index_cleanup_every_seconds=0)
idx = EpisodeIndex(path, 16, "synthetic", cfg)
rng = np.random.default_rng(sum(map(ord, who)))
n = 0
while time.time() < until:
    if who == "purger":
        idx.delete([f"w{w}-{rng.integers(0, n + 20)}-{rng.integers(0, 20)}" for w in (1, 2) for _ in range(5)])
        idx.purge([], ["A"], [])
        time.sleep(0.2)
    else:
        idx.upsert([{"episode_id": f"{who}-{n}-{i}", "tenant_id": "A", "vector": rng.normal(size=16),
                     "text": f"word{rng.integers(0, 50)} other{i}"} for i in range(20)])
        time.sleep(0.02)
    n += 1
idx.close(timeout=120)
print(n, flush=True)
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_purges_beside_writers_and_their_maintenance_all_succeed_and_the_table_stays_whole(tmp_path: Path) -> None:
    """Two processes write (each with its maintenance child folding, merging, compacting and
    building the ANN index) while a third deletes and purges again and again: every purge waits
    for the operations under way, deletes only what nothing names, and succeeds (without the index
    lock a purge's rewrite lost to a fold's commit: "Rewrite preempted by CreateIndex")."""
    path = tmp_path / "db"
    EpisodeIndex(path, D, "synthetic", QUIET).upsert(rows(0, 20))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    until = str(time.time() + 25)
    procs = [subprocess.Popen([sys.executable, "-c", _BUSY, str(path), who, until], env=env, cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for who in ("w1", "w2", "purger")]
    try:
        done = [p.communicate(timeout=400) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_out, err) in zip(procs, done):
        assert p.returncode == 0, err[-3000:]
    assert int(done[2][0]) >= 5, done[2]  # purges done
    uri = table_dir(path)
    ds = lance.dataset(str(uri))
    ds.validate()
    assert not [d.path for f in ds.get_fragments() for d in f.metadata.files if not (uri / "data" / d.path).exists()]
    indexes = ds.describe_indices()
    assert {i.name for i in indexes} >= {"text_idx", "vector_idx", "episode_id_idx"}
    assert not [s.uuid for i in indexes for s in i.segments if not (uri / "_indices" / str(s.uuid)).exists()]
    idx = EpisodeIndex(path, D, "synthetic", QUIET)
    assert idx.count("A") == ds.count_rows() > 1000
    assert len(idx.text_search("A", "word7", k=10)) == 10
    assert len(idx.vector_search("A", np.ones(D), k=10)) == 10
    idx.close()
