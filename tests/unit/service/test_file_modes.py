"""A data folder is private to its owner: created 0700 with its files 0600 (worldgraph.db and its
-wal/-shm, the LanceDB files, the API key hashes in the db); an existing looser folder is
tightened on a writable open, with a warning naming the old mode; a read-only open only warns."""

from __future__ import annotations

import logging
import os
import stat
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
