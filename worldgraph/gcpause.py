"""One helper shared by the modules that build or parse a whole environment at once."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while tens of thousands of acyclic dicts are built: the
    collector would otherwise traverse the growing heap again and again (about half the time
    of reading a 10k-node snapshot). Re-enabled on exit if it was enabled. Process-wide, so
    only around short, allocation-heavy work."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
