"""No cyclic garbage collection while a bulk step builds tens of thousands of acyclic dicts.

The collector would otherwise traverse the growing heap again and again. Measured in a process
that loaded LanceDB (``python bench/bench_gcpause.py 10000``: 10k nodes, 20k edges, paused and
unpaused runs alternating, medians of 9; three runs at load 10-20): read_snapshot 884 / 483 /
612 ms paused vs 1159 / 815 / 788 not, summarize_graph 165 / 236 / 167 vs 214 / 275 / 175,
write_snapshot even; recall avoids a 230 ms full collection landing inside a query.

The pause is process-wide (that is how CPython's collector works), so it is shared safely:

- scoped and reentrant: nested and overlapping pauses (other threads) are counted; the collector
  is re-enabled when the LAST one ends, not when the first one does;
- exception-safe: a pause ends in ``finally``, whatever the block raised;
- it never turns on a collector someone else turned off: if it was off when the first pause
  began, it stays off after the last one ends;
- other threads stay correct: a paused collector only delays reclaiming reference cycles
  (memory), never frees or keeps anything wrongly. Use it only around short bulk work.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused", "pause_depth"]

_lock = threading.Lock()
_depth = 0  # pauses in progress, all threads together
_we_disabled = False  # whether the first of them turned the collector off (so the last turns it back on)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC for the block (see the module docstring for how pauses share)."""
    global _depth, _we_disabled
    with _lock:
        if _depth == 0:
            _we_disabled = gc.isenabled()
            if _we_disabled:
                gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _we_disabled:
                _we_disabled = False
                gc.enable()


def pause_depth() -> int:
    """How many pauses are in progress (for tests and diagnostics)."""
    return _depth
