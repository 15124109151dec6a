"""Blank heap memory while LadybugDB writes a file: the engine writes memory it never filled.

Measured with LadybugDB 0.22 (a process started with ``MALLOC_PERTURB_`` finds those bytes as the
perturb byte, every run): each checkpoint writes the file's header page (4 KiB, of which the first
49 bytes are set) and the tails of a few other pages from buffers it takes from ``malloc`` and
never fills, ~12.6 KB a checkpoint. glibc hands a block out as its last owner left it, so those bytes are whatever this
process freed there before: a forgotten episode's words, another tenant's rows. The erasure test
found words of both its tenants, forgotten minutes before, in a tenant's projection file built
from clean rows afterwards (written when the folder was closed).

While a projection's file is made, checkpointed or closed (``blank_allocations``: the moments
the engine writes those pages), glibc is told to fill every block it hands out with zeros and
every block it takes back with 0xFF (``mallopt(M_PERTURB)``), so what the engine leaves unfilled
is zeros whatever the process held. Not while rows are copied or written into the log: the log's
records held no freed byte (with freed marked blocks strewn between the statements), and filling
every block then costs much (glibc fills even fresh mmapped blocks the engine barely uses: with
the whole write window covered, a 10k-episode build took 4.72 s instead of 4.14 and a refresh
after 10 recorded episodes 1.8 s instead of 0.74, load 10). As shipped the cost is inside the
noise (``bench/cypher_heap.py``, 12 alternated rounds, load 7: build p50 2.58 s blanked, 2.80 s
not; the refresh, which writes only the log, 233 and 296 ms). The setting is the process's: other
threads' blocks are filled too meanwhile. It is counted, so overlapping writes (two tenants'
checkpoints in two threads) keep it on until the last ends; a ``MALLOC_PERTURB_`` the process
started with is put back after.

Limits, checked by the test (which fills freed blocks of 16 bytes to 120 KB with a marker, and
finds it in the file when the filling is switched off): blocks of up to 1,032 bytes that a
thread's cache (tcache) hands back are not filled by glibc; the engine leaves no such block
unfilled in a file. Without glibc (musl, macOS) there is no ``M_PERTURB``: a warning is logged
once and files are written as the engine writes them (``available`` False).
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("worldgraph")

M_PERTURB = -6  # glibc's malloc.h
# perturb byte: freed blocks are filled with it, blocks handed out with its complement (0x00)
_FILL = 0xFF

_lock = threading.Lock()
_depth = 0
_mallopt: Callable[[int, int], int] | None = None
_resolved = False


def _base() -> int:
    """The perturb byte the process started with."""
    from worldgraph.config import malloc_perturb

    return malloc_perturb()


def _resolve() -> Callable[[int, int], int] | None:
    global _mallopt, _resolved
    if not _resolved:
        _resolved = True
        try:
            fn = ctypes.CDLL(None).mallopt  # the C library this process runs on
            fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            # glibc answers 1; musl's mallopt is a stub answering 0
            _mallopt = fn if fn(M_PERTURB, _base()) == 1 else None
        except (OSError, AttributeError, TypeError):  # no C library by that name (Windows), no mallopt
            _mallopt = None
        if _mallopt is None:
            log.warning("this C library has no mallopt(M_PERTURB): Cypher projection files may hold bytes of "
                        "memory freed before they were written (docs/forget.md)")
    return _mallopt


def available() -> bool:
    """Whether the C library can be told to blank the blocks it hands out (glibc)."""
    return _resolve() is not None


@contextmanager
def blank_allocations() -> Iterator[None]:
    """Every block malloc hands out meanwhile is zeros (see the module docstring); re-entrant,
    and counted across threads."""
    global _depth
    fn = _resolve()
    if fn is None:
        yield
        return
    with _lock:
        if _depth == 0:
            fn(M_PERTURB, _FILL)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                fn(M_PERTURB, _base())
