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
  (memory), never frees or keeps anything wrongly. Use it only around short bulk work;
- never paused for good: when pauses overlap without a break (a server answering recalls on
  many threads at once), a pause that ends more than ``MAX_CONTINUOUS_S`` after the collector
  last ran collects the young generations itself, and every ``FULL_EVERY``-th such time all of
  them.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused", "pause_depth"]

_lock = threading.Lock()
_depth = 0  # pauses in progress, all threads together
_we_disabled = False  # whether the first of them turned the collector off (so the last turns it back on)
_since = 0.0  # when the collector last ran or the current run of pauses began (monotonic)
_collections = 0  # collections made by pauses that ended inside a run of overlapping pauses
MAX_CONTINUOUS_S = 5.0
FULL_EVERY = 12


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC for the block (see the module docstring for how pauses share)."""
    global _depth, _we_disabled, _since
    with _lock:
        if _depth == 0:
            _since = time.monotonic()
            _we_disabled = gc.isenabled()
            if _we_disabled:
                gc.disable()
        _depth += 1
    try:
        yield
    finally:
        global _collections
        generation = -1
        with _lock:
            _depth -= 1
            if _depth == 0 and _we_disabled:
                _we_disabled = False
                gc.enable()
            elif _depth > 0 and _we_disabled and time.monotonic() - _since > MAX_CONTINUOUS_S:
                _since, _collections = time.monotonic(), _collections + 1
                generation = 2 if _collections % FULL_EVERY == 0 else 1  # 1: milliseconds, not a full traversal
        if generation >= 0:
            gc.collect(generation)


def pause_depth() -> int:
    """How many pauses are in progress (for tests and diagnostics)."""
    return _depth
