"""A folder walked for its modes while another process writes in it (worldgraph.filemodes;
docs/architecture.md, "Walking a table's folder"): LanceDB writes each new file as
``.tmpXXXXXX`` and renames it when done, a cleanup deletes old versions' files, so an entry the
listing saw can be gone when its mode is read or changed. That is nothing to make private, not an
error: in the 10M run the maintenance child's open (``EpisodeIndex`` -> ``private_dir``) failed
with ``FileNotFoundError`` on a recording process's ``data/.tmp*`` file, and the run was thrown
away. Any other error still fails. The race is made deterministic by removing (or renaming) files
right after the listing (``os.walk``) ends, before the modes are read again."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import worldgraph.filemodes as filemodes
from worldgraph.filemodes import private_dir, tighten

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def _table(root: Path) -> Path:
    """A private folder holding a LanceDB-like table: committed files already private, a writer's
    temporary file and a new data file still 0644 (the writer's umask, before its sweep)."""
    data = root / "ep-bench.lance" / "data"
    data.mkdir(parents=True)
    for p in (root, root / "ep-bench.lance", data):
        os.chmod(p, 0o700)
    (data / "old.lance").write_bytes(b"committed")
    os.chmod(data / "old.lance", 0o600)
    (data / ".tmpAbC123").write_bytes(b"being written")
    os.chmod(data / ".tmpAbC123", 0o644)
    (data / "new.lance").write_bytes(b"just written")
    os.chmod(data / "new.lance", 0o644)
    return data


def _after_listing(monkeypatch: pytest.MonkeyPatch, then: Any) -> None:
    """``os.walk`` as it is, and ``then()`` once the walk has listed everything."""
    real = os.walk

    def walk(top: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        yield from real(top, *args, **kwargs)
        then()

    monkeypatch.setattr(filemodes.os, "walk", walk)


def test_a_temporary_file_renamed_after_the_listing_does_not_fail_the_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "lancedb"
    data = _table(root)
    os.remove(data / "new.lance")  # the temporary file is then the first (only) loose entry
    # the writer commits: its temporary file gets its final name while the walk goes on
    _after_listing(monkeypatch, lambda: os.rename(data / ".tmpAbC123", data / "final.lance"))
    with caplog.at_level(logging.WARNING, logger="worldgraph"):
        private_dir(root)  # the old code: FileNotFoundError on data/.tmpAbC123
    assert not (data / ".tmpAbC123").exists()
    assert (data / "final.lance").read_bytes() == b"being written"  # a committed write's file is left in place
    assert _mode(data / "old.lance") == 0o600
    assert "could not be tightened" not in caplog.text


def test_an_entry_gone_after_the_listing_does_not_stop_the_others_being_tightened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "lancedb"
    data = _table(root)
    listed: list[str] = []
    real = filemodes._loose_entries

    def loose(path: Path) -> Any:
        out = real(path)
        listed.extend(str(e[0] if isinstance(e, tuple) else e) for e in out)
        return out

    monkeypatch.setattr(filemodes, "_loose_entries", loose)
    _after_listing(monkeypatch, lambda: os.remove(data / ".tmpAbC123"))  # a cleanup, or an aborted write
    with caplog.at_level(logging.WARNING, logger="worldgraph"):
        private_dir(root)
    assert sorted(listed) == sorted([str(data / ".tmpAbC123"), str(data / "new.lance")])
    assert _mode(data / "new.lance") == 0o600, "an entry after the vanished one was left readable"
    assert "could not be tightened" not in caplog.text
    assert "tightened to 0700" in caplog.text  # the warning about the loose file still says so


def test_tighten_skips_what_vanished_and_still_raises_any_other_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "lancedb"
    data = _table(root)
    _after_listing(monkeypatch, lambda: (data / ".tmpAbC123").unlink(missing_ok=True))
    tighten(root)  # the old code: FileNotFoundError
    assert _mode(data / "new.lance") == 0o600

    (data / "other.lance").write_bytes(b"x")
    os.chmod(data / "other.lance", 0o644)

    def chmod(path: Any, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted", str(path))

    monkeypatch.setattr(filemodes.os, "chmod", chmod)
    with pytest.raises(PermissionError):  # not the owner: a real failure, not swallowed
        tighten(root)


def test_the_maintenance_childs_open_survives_a_writers_temporary_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The step that failed: the child opens the index anew for each run (episode_index.serve)."""
    from worldgraph.memory.index.episode_index import EpisodeIndex

    root = tmp_path / "lancedb"
    idx = EpisodeIndex(root, 8, "synthetic")
    idx.upsert([{"episode_id": "e1", "tenant_id": "bench", "vector": [0.1] * 8, "text": "a row"}])
    idx.close()
    data = next(root.glob("*.lance")) / "data"
    for p in [root, *root.rglob("*")]:
        os.chmod(p, 0o700 if p.is_dir() else 0o600)
    tmp = data / ".tmpXyZ789"
    tmp.write_bytes(b"being written")
    os.chmod(tmp, 0o644)
    _after_listing(monkeypatch, lambda: os.remove(tmp))
    idx = EpisodeIndex(root, 8, "synthetic")  # the old code: FileNotFoundError on data/.tmpXyZ789
    try:
        assert idx.count("bench") == 1
    finally:
        idx.close()
