"""Bounded threading on the recall path.

A recall multiplies small matrices: the candidates' cosines and, with the numpy MiniLM runner,
the query's embedding (~40 products over a dozen tokens; the default onnxruntime runner sets
its own threads). OpenBLAS runs each product on one thread per core and its threads spin-wait
for each other; on a loaded machine a thread that lost its core stalls every product until it
is scheduled again. Measured on the 2-core dev machine beside other work (bench/README.md,
recall on LoCoMo, latency): recall p50 251 ms / p99 1,247 ms with OpenBLAS's 2 threads, 72 /
320 ms with one. ``one_blas_thread()`` holds the BLAS pools of the process at one thread while
any recall runs (threadpoolctl; without it, nothing changes). Large batch work (recording
thousands of episodes) keeps the pools as they were.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

_lock = threading.Lock()
_active = 0  # recalls inside one_blas_thread()
_limiter: Any = None  # threadpoolctl's limit while _active > 0
_controller: Any = None  # threadpoolctl.ThreadpoolController, found once (it scans the loaded libraries)


def _get_controller() -> Any:
    global _controller
    if _controller is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - a dependency; tolerate its absence
            _controller = False
        else:
            _controller = ThreadpoolController()
    return _controller


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS at one thread for the duration (process-wide; nested and concurrent uses share one
    limit, restored when the last one leaves)."""
    global _active, _limiter
    with _lock:
        _active += 1
        if _active == 1:
            ctl = _get_controller()
            if ctl:
                try:
                    _limiter = ctl.limit(limits=1, user_api="blas")
                except Exception as exc:  # pragma: no cover - an exotic BLAS; recall still works
                    log.debug("could not limit BLAS threads: %s", exc)
                    _limiter = None
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _limiter is not None:
                _limiter.restore_original_limits()
                _limiter = None
