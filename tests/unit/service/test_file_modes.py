"""A data folder is private to its owner: created 0700 with its files 0600 (worldgraph.db and its
-wal/-shm, the LanceDB files, the API key hashes in the db); an existing looser folder is
tightened on a writable open, with a warning naming the old mode; a read-only open only warns."""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path

import pytest

from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.keys import ApiKeys

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")

RUN = {"agent_id": "a", "task_type": "t", "task_description": "open the vault", "outcome": "success"}


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in [root, *root.rglob("*")]
            if not p.is_symlink()}


def _fill(data: Path) -> None:
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        wm.record_experience("t1", RUN)
        ApiKeys(wm.store).create("t1")


def test_a_new_data_folder_is_private(tmp_path: Path) -> None:
    old = os.umask(0o022)  # the usual umask, which leaves files readable by everyone
    try:
        data = tmp_path / "data"
        _fill(data)
        # while open, the -wal and -shm files exist too
        with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
            wm.record_experience("t1", RUN)
            modes = _modes(data)
    finally:
        os.umask(old)
    assert modes["."] == 0o700
    assert modes["worldgraph.db"] == 0o600
    assert {modes[n] for n in ("worldgraph.db-wal", "worldgraph.db-shm") if n in modes} <= {0o600}
    assert "worldgraph.db-wal" in modes
    assert any(n.startswith("lancedb") for n in modes)
    assert (data / "lancedb").is_dir() and modes["lancedb"] == 0o700


def test_a_loose_existing_folder_is_tightened_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    _fill(data)
    for p in [data, *data.rglob("*")]:  # as an older worldgraph left it: 0755 folders, 0644 files
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    (data / "script.sh").write_text("#!/bin/sh\n")
    os.chmod(data / "script.sh", 0o755)
    with caplog.at_level(logging.WARNING, logger="worldgraph"):
        WorldModel.open(data, embedder=HashingEmbedder(64)).close()
    assert any("0755" in r.getMessage() and str(data) in r.getMessage() and "0700" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    modes = _modes(data)
    loose = {name: oct(m) for name, m in modes.items() if m & 0o077}
    assert not loose, loose
    assert modes["."] == 0o700 and modes["worldgraph.db"] == 0o600
    assert modes["script.sh"] == 0o700, "the owner's bits are kept, only group and others lose theirs"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="worldgraph"):
        WorldModel.open(data, embedder=HashingEmbedder(64)).close()
    assert not [r for r in caplog.records if "readable by other users" in r.getMessage()], "warned once"


def test_a_read_only_open_changes_no_mode_and_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    _fill(data)
    os.chmod(data, 0o755)
    before = _modes(data)
    with caplog.at_level(logging.WARNING, logger="worldgraph"):
        WorldModel.open(data, embedder=HashingEmbedder(64), read_only=True).close()
    after = _modes(data)  # (SQLite may add its own -wal / -shm for a reader: README "Read-only open")
    assert {name: after[name] for name in before} == before
    assert any("can be read by other users" in r.getMessage() and "chmod -R go-rwx" in r.getMessage()
               for r in caplog.records)


def _loose(root: Path) -> dict[str, str]:
    return {name: oct(m) for name, m in _modes(root).items() if m & 0o077}


def test_a_library_under_a_loose_umask_keeps_every_file_private_and_the_umask_alone(tmp_path: Path) -> None:
    old = os.umask(0o022)  # a host application's usual umask
    try:
        data = tmp_path / "data"
        with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
            ids = wm.record_experiences("t1", [{**RUN, "task_description": f"vault {i}"} for i in range(20)])
            wm.index.ensure_indexes(vector=False)  # the full-text and scalar indexes' files
            for i in range(3):  # writes in a row: made private within a second of the last one
                wm.record_experience("t1", {**RUN, "task_description": f"later {i}"})
            time.sleep(1.5)
            assert _loose(data) == {}, "within a second of a write, without a purge or a close"
            wm.forget_episode("t1", ids[0])
            wm.purge()  # compaction, indexes rebuilt, old versions deleted
            wm.index.optimize()
            wm.index.wait_for_maintenance()
        assert _loose(data) == {}, "LanceDB's files too: made private after each write"
        assert any("_versions" in name for name in _modes(data)), "the index's files were checked"
        host = tmp_path / "host-file.txt"  # the host's own files keep the host's umask
        host.write_text("mine")
        assert stat.S_IMODE(host.stat().st_mode) == 0o644
        assert os.umask(0o022) == 0o022, "the library left the process's umask as it was"
    finally:
        os.umask(old)


def test_inner_files_an_older_worldgraph_left_readable_are_tightened(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    _fill(data)
    lance = [p for p in (data / "lancedb").rglob("*")]
    for p in lance:  # the folder itself is 0700, LanceDB's files as an older worldgraph left them
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    assert stat.S_IMODE(data.stat().st_mode) == 0o700 and _loose(data)
    with caplog.at_level(logging.WARNING, logger="worldgraph"):
        WorldModel.open(data, embedder=HashingEmbedder(64)).close()
    assert _loose(data) == {}
    assert any("readable by other users" in r.getMessage() and str(data) in r.getMessage() for r in caplog.records)


def test_the_worldgraph_command_makes_everything_private_whatever_the_umask(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    data = tmp_path / "data"
    run = tmp_path / "run.json"
    run.write_text(json.dumps(RUN))
    env = {"PATH": os.environ.get("PATH", ""), "WORLDGRAPH_EMBEDDING_PROVIDER": "hashing",
           "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    for args in (["record", str(run)], ["keys", "create", "--tenant", "default"],
                 ["cypher", "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n"]):
        # started under the usual umask 022 (a shell's), as a user would start it
        proc = subprocess.run(["/bin/sh", "-c", 'umask 022 && exec "$@"', "sh", sys.executable, "-m", "worldgraph.cli",
                               "--data", str(data), *args, "--json"],
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
    assert _loose(data) == {}


def test_the_entry_points_set_a_private_umask(tmp_path: Path) -> None:
    from worldgraph.cli.main import main

    old = os.umask(0o022)
    try:
        main(["--data", str(tmp_path / "d"), "stats", "--json"])
        assert os.umask(0o022) == 0o077, "the worldgraph command runs under umask 077"
    finally:
        os.umask(old)
    for module in ("worldgraph/memory/index/episode_index.py", "worldgraph/kg/embedded/cypher/build.py"):
        source = (Path(__file__).resolve().parents[3] / module).read_text()
        assert "private_umask()" in source, f"{module}: a child's entry point sets the umask"


def _tree_with_old_folders(root: Path, settled_ns: int) -> list[Path]:
    """``root`` with three folders whose last change is ``settled_ns`` ago or more (as LanceDB's
    index folders, written once), each holding a private file."""
    folders = []
    for name in ("a", "b", "c"):
        folder = root / name
        folder.mkdir(parents=True, mode=0o700)
        (folder / "f").write_text("x")
        os.chmod(folder / "f", 0o600)
        old = time.time_ns() - 2 * settled_ns
        os.utime(folder, ns=(old, old))
        folders.append(folder)
    return folders


def test_the_sweep_lists_only_folders_that_may_hold_something_new(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from worldgraph import filemodes

    old = os.umask(0o022)
    try:
        root = tmp_path / "lancedb"
        folders = _tree_with_old_folders(root, filemodes.PrivateTree.SETTLED_NS)
        tree = filemodes.PrivateTree(root)
        tree._sweep()
        listed: list[str] = []
        real = os.scandir

        def counting(path):  # type: ignore[no-untyped-def]
            listed.append(str(path))
            return real(path)

        monkeypatch.setattr(filemodes.os, "scandir", counting)
        tree._sweep()
        assert str(folders[0]) not in listed and str(folders[2]) not in listed  # settled, unchanged
        (folders[1] / "new").write_text("secret")  # 0644 under this umask; the folder's time moves
        listed.clear()
        assert tree._sweep() == 1
        assert stat.S_IMODE((folders[1] / "new").stat().st_mode) == 0o600
        assert str(folders[1]) in listed and str(folders[0]) not in listed
    finally:
        os.umask(old)


def test_a_change_within_the_listings_clock_tick_is_not_missed(tmp_path: Path) -> None:
    """A file written in a folder just after its listing, within the same tick of the clock that
    stamps folders, leaves the folder's time as the listing saw it: a listing that came less than
    SETTLED_NS after the folder's last change is not trusted (simulated by putting the time back)."""
    from worldgraph import filemodes

    old = os.umask(0o022)
    try:
        root = tmp_path / "lancedb"
        folder = root / "_versions"
        folder.mkdir(parents=True, mode=0o700)
        tree = filemodes.PrivateTree(root)
        tree._sweep()  # the folder was just made: its listing is not settled
        stamp = folder.stat().st_mtime_ns
        (folder / "1.manifest").write_text("rows")
        os.utime(folder, ns=(stamp, stamp))  # the same tick: the folder's time did not move
        assert tree._sweep() == 1
        assert stat.S_IMODE((folder / "1.manifest").stat().st_mode) == 0o600
    finally:
        os.umask(old)
