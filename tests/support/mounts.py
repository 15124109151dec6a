"""Real file-system faults for tests: a small tmpfs that fills up, a read-only bind mount.

Both need root (CI runs as root). As another user, and where mounting is not permitted (a
container without CAP_SYS_ADMIN), the tests that use them are skipped with that reason.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

_CAN_MOUNT: str | None = None  # "" when mounting works, else why not


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


def _umount(path: Path) -> None:
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)  # busy: detach lazily


def require_mount(tmp_path: Path) -> None:
    """Skip the calling test, saying why, unless this process can mount a tmpfs."""
    global _CAN_MOUNT
    if _CAN_MOUNT is None:
        if os.geteuid() != 0:
            _CAN_MOUNT = "mounting a tmpfs / read-only bind needs root (CI runs as root)"
        else:
            probe = tmp_path / ".mount-probe"
            probe.mkdir()
            try:
                _mount("-t", "tmpfs", "-o", "size=1M", "tmpfs", str(probe))
                _umount(probe)
                _CAN_MOUNT = ""
            except (subprocess.CalledProcessError, FileNotFoundError) as exc:
                _CAN_MOUNT = f"this environment forbids mount ({getattr(exc, 'stderr', exc)!s})"
            probe.rmdir()
    if _CAN_MOUNT:
        pytest.skip(_CAN_MOUNT)


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (e.g. "16M") mounted at ``path`` for the block."""
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    try:
        yield path
    finally:
        _umount(path)


@contextmanager
def read_only_view(src: Path, dst: Path) -> Iterator[Path]:
    """``src`` seen read-only at ``dst`` (a bind mount remounted ro: writes fail with EROFS,
    for root too, as on a mounted snapshot)."""
    dst.mkdir(parents=True, exist_ok=True)
    _mount("--bind", str(src), str(dst))
    try:
        _mount("-o", "remount,bind,ro", str(dst))
        yield dst
    finally:
        _umount(dst)


def fill(path: Path) -> Path:
    """Fill the file system holding ``path`` to the last byte with one file; returns it."""
    filler = path / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for chunk in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    fh.write(b"\0" * chunk)
            except OSError:
                pass
    return filler


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def leave_free(filler: Path, nbytes: int) -> int:
    """Grow or shrink ``filler`` (made by ``fill``) until about ``nbytes`` are free on its file
    system (page granularity); returns the free bytes. Growing appends real blocks and shrinking
    cuts them, so the file never turns sparse."""
    free = free_bytes(filler.parent)
    if free > nbytes:
        with open(filler, "ab", buffering=0) as fh:
            try:
                fh.write(b"\0" * (free - nbytes))
            except OSError:
                pass
    elif free < nbytes:
        os.truncate(filler, max(0, filler.stat().st_size - (nbytes - free)))
    return free_bytes(filler.parent)
