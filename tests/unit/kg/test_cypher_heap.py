"""LadybugDB writes heap memory it never filled into its files (``embedded.cypher.heap``).

The heap is first strewn with freed blocks holding a marker word (16 bytes to 120 KB, the sizes a
thread's cache keeps among them; live blocks between them keep them from merging), as a process
that held a forgotten episode or another tenant's rows leaves it. A projection is then built,
refreshed and closed by the store's own code. With the blanking switched off the marker is in
the files (so this test sees the leak it guards against); with it on, it is in none of them.
"""

from __future__ import annotations

import ctypes
import random
import threading
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

from worldgraph import WorldModel
from worldgraph.kg.embedded.cypher import heap
from worldgraph.kg.embedded.cypher import opener as opener_module
from worldgraph.kg.embedded.cypher import projection as projection_module
from worldgraph.memory.embeddings import HashingEmbedder

pytestmark = pytest.mark.skipif(not heap.available(), reason="needs glibc's mallopt(M_PERTURB)")

MARK = b"QzFreedWordQz"


class FreedWords:
    """Blocks of the C heap filled with MARK: every other one freed (what later mallocs get back),
    the rest kept until ``release`` (so the freed ones stay where they are)."""

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None)
        self.libc.malloc.restype, self.libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        self.libc.free.argtypes = [ctypes.c_void_p]
        self.kept: list[int] = []
        self._lock = threading.Lock()

    def _strew(self, n: int) -> None:
        rng = random.Random()
        blocks = []
        for i in range(n):
            size = (rng.randint(16, 1032), rng.randint(1033, 8192), rng.randint(8193, 120_000))[i % 3]
            p = self.libc.malloc(size)
            ctypes.memmove(p, (MARK * (size // len(MARK) + 1))[:size], size)
            blocks.append(p)
        with self._lock:
            for i, p in enumerate(blocks):
                if i % 2:
                    self.libc.free(p)
                else:
                    self.kept.append(p)

    def __call__(self, n: int = 2000) -> None:
        """Strew ``n`` blocks in this thread and as many in each of 3 others (their own arenas)."""
        threads = [threading.Thread(target=self._strew, args=(n,)) for _ in range(3)]
        for t in threads:
            t.start()
        self._strew(n)
        for t in threads:
            t.join()

    def release(self) -> None:
        for p in self.kept:
            self.libc.free(p)
        self.kept.clear()


@pytest.fixture
def freed_words() -> Iterator[FreedWords]:
    words = FreedWords()
    yield words
    words.release()


def _exp(task: str) -> dict[str, Any]:
    return {"agent_id": "a", "agent_role": "r", "task_type": "x", "task_description": task, "outcome": "success",
            "learnings": "kept words " * 20}


def _projection_files(data: Path) -> bytes:
    files = [p for p in data.rglob("*") if p.is_file() and "-cypher" in str(p.relative_to(data))]
    assert any(p.name.endswith(".lbug") for p in files), files
    return b"".join(p.read_bytes() for p in files)


def _written(data: Path, strew: FreedWords) -> bytes:
    """Every byte of the saved projection files after a build, after a refresh (its log, as a
    crash would leave it) and after a close, with freed marked blocks strewn before each."""
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        wm.record_experiences("t1", [_exp(f"task {i}") for i in range(250)])  # COPY, past INSERT_MAX
        strew()
        assert wm.cypher("t1", "MATCH (e:Episode) RETURN count(e) AS n") == [{"n": 250}]  # built, checkpointed
        wm.record_experiences("t1", [_exp("one more")])
        strew()
        assert wm.cypher("t1", "MATCH (e:Episode) RETURN count(e) AS n") == [{"n": 251}]  # refreshed: its log
        logged = _projection_files(data)
        strew()
    return logged + _projection_files(data)  # closed: the log checkpointed into the file


def test_no_freed_word_reaches_a_projection_file(tmp_path: Path, freed_words: FreedWords,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opener_module, "SAVE_MIN_ROWS", 0)  # small: saved to a file all the same
    with monkeypatch.context() as off:  # the guard switched off: the engine writes what it was given
        off.setattr(projection_module, "blank_allocations", nullcontext)
        # (which freed block malloc hands the engine varies: one run in ~15 got none of the marked ones)
        leaked = any(MARK in _written(tmp_path / f"off-{n}", freed_words) for n in range(3))
    assert leaked, "the freed blocks did not reach the engine in 3 tries: this test would see no leak"
    freed_words.release()
    assert MARK not in _written(tmp_path / "on", freed_words)


def test_blank_allocations_hands_out_zeros_and_nests() -> None:
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size = 64 * 1024
    with heap.blank_allocations():
        with heap.blank_allocations():
            pass  # the inner one ending leaves it on
        p = libc.malloc(size)
        ctypes.memset(p, 0x41, size)
        libc.free(p)
        q = libc.malloc(size)  # the same block, most likely: handed out blank whichever it is
        try:
            assert ctypes.string_at(q, size) == bytes(size)
        finally:
            libc.free(q)
