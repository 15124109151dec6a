"""The lists' postings (ivf.Ivf): each list's mirror rows, ascending, as the rows assigned to it."""

from __future__ import annotations

import numpy as np

from worldgraph.memory.index.ivf import Ivf


def test_postings_hold_each_lists_rows_in_row_order():
    rng = np.random.default_rng(7)
    lists = 300  # more than 256: the keys need both bytes of the 16-bit sort
    ivf = Ivf(rng.normal(size=(lists, 8)).astype(np.float32), 50_000, rng.integers(0, lists, 50_000))
    for x in (0, 1, 255, 256, 299):
        assert np.array_equal(ivf.rows_in(np.array([x])), np.flatnonzero(ivf.assign == x))
    assert ivf._offsets[-1] == 50_000 and np.array_equal(np.sort(ivf._order), np.arange(50_000))
