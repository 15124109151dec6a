"""A graph index (HNSW, ``usearch``) over a mirror's int8 codes, built in the background.

LanceDB's IVF search was what a search of a big table through its mirror still spent most of its
time in (asked for row addresses only: 10-43 ms at 1M rows on the shared machine, under load 11-14).
The graph finds the same neighbours from the codes the mirror already holds, in about a
millisecond. Its keys are mirror rows, which never change (a compaction moves a LanceDB row, not
its mirror row), so the graph is only ever extended: rows added to the mirror are added to it in
the background, and the rows it does not cover yet (the tail) are searched exactly over their
codes beside it. Deleted rows stay in the graph and are dropped from its hits by the mirror's
live mask. Building it costs ~3.5k rows per CPU-second (connectivity 16), so it never runs on the
recording path: a thread adds rows once a table is searched.

Saved beside the mirror (``graph.usearch`` and ``graph.json``, which names the mirror it belongs
to by the mirror's ``uid`` and how many of its rows the graph holds); a graph of another mirror
(rebuilt after its files were lost) is dropped.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from worldgraph.filemodes import tighten

log = logging.getLogger("worldgraph.memory.index.episode_index")

CONNECTIVITY = 16
EXPANSION_ADD = 64
EXPANSION_SEARCH = 128
CHUNK = 20_000  # rows added at a time (the mirror's lock is held only to copy their codes)
MIN_ROWS = 20_000  # a mirror with fewer rows than this is searched without a graph
TAIL_ROWS = 50_000  # rows outside the graph searched exactly beside it (more: the graph is not used)
SAVE_ROWS = 200_000  # a graph being built is saved after this many rows (and when it is done)


class Graph:
    """The HNSW index of one mirror's codes (keys: mirror rows ``[0, covered)``)."""

    def __init__(self, dimensions: int, index: Any = None, covered: int = 0, viewed: bool = False) -> None:
        from usearch.index import Index

        self.viewed = viewed  # memory-mapped from its file: searched, never extended (load it to extend)
        self.dimensions = dimensions
        self.index = index if index is not None else Index(
            ndim=dimensions, metric="cos", dtype="i8", connectivity=CONNECTIVITY, expansion_add=EXPANSION_ADD,
            expansion_search=EXPANSION_SEARCH)
        self.covered = covered
        self.lock = threading.Lock()  # one writer; searches read a consistent covered count

    def add(self, first: int, codes: np.ndarray) -> None:
        """Add the codes of mirror rows ``first, first + 1, ...`` (``first`` must be ``covered``)."""
        with self.lock:
            if first != self.covered:
                return
            self.index.add(np.arange(first, first + len(codes), dtype=np.uint64), codes, threads=1)
            self.covered = first + len(codes)

    def search(self, query_code: np.ndarray, count: int) -> np.ndarray:
        """Mirror rows of the ``count`` nearest codes (approximate), best first."""
        if not self.covered:
            return np.zeros(0, np.int64)
        count = min(count, self.covered)
        found = self.index.search(query_code, count)
        keys: np.ndarray = np.asarray(found.keys, dtype=np.int64)
        return keys

    def save(self, folder: Path, uid: str) -> None:
        """``graph.usearch`` then ``graph.json`` (each replaced atomically): a killed save leaves the
        previous pair, or a newer graph file that holds at least the rows the old json names."""
        with self.lock:
            tmp = folder / f".graph.{os.getpid()}.tmp"
            self.index.save(str(tmp))
            os.replace(tmp, folder / "graph.usearch")
            meta = folder / f".graph-json.{os.getpid()}.tmp"
            meta.write_text(json.dumps({"mirror": uid, "covered": self.covered}))
            os.replace(meta, folder / "graph.json")
        tighten(folder)


def load_graph(folder: Path, uid: str, dimensions: int, rows: int, view: bool = True) -> Graph | None:
    """The saved graph of the mirror ``uid`` (None: none, another mirror's, or unreadable),
    memory-mapped (``view``: opened in milliseconds, its pages read as searches touch them) or
    loaded (to be extended)."""
    from usearch.index import Index

    try:
        meta = json.loads((folder / "graph.json").read_text())
        if meta.get("mirror") != uid:
            return None
        index = Index.restore(str(folder / "graph.usearch"), view=view)
        if index is None or index.ndim != dimensions:
            return None
        # a saved graph does not keep its search settings: usearch reopens it with its defaults
        # (expansion_search 64), which cost wide filters recall@10 0.83-0.94 against 0.95+ built
        index.expansion_add = EXPANSION_ADD  # type: ignore[misc]  # (setters exist; its stubs order them oddly)
        index.expansion_search = EXPANSION_SEARCH  # type: ignore[misc]
        covered = min(int(meta["covered"]), rows, int(index.size))
        if int(index.size) != covered:  # a graph file newer than its json (a killed save): start over
            return None
        return Graph(dimensions, index, covered, viewed=view)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        if not isinstance(exc, FileNotFoundError):
            log.warning("episode index: the saved graph in %s is not usable (%s); it is built again", folder, exc)
        return None
