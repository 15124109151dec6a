"""gc_paused is scoped, reentrant across threads, exception-safe, and leaves a collector someone
else turned off alone."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from worldgraph.gcpause import gc_paused, pause_depth


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_nested_pauses_end_with_the_outermost() -> None:
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled() and pause_depth() == 2
        assert not gc.isenabled()
    assert gc.isenabled() and pause_depth() == 0


def test_an_exception_ends_the_pause() -> None:
    with pytest.raises(KeyError):
        with gc_paused():
            raise KeyError("boom")
    assert gc.isenabled() and pause_depth() == 0


def test_one_thread_ending_its_pause_does_not_end_anothers() -> None:
    a_in, b_in, a_out, b_may_leave = (threading.Event() for _ in range(4))
    seen: dict[str, bool] = {}

    def a() -> None:
        with gc_paused():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b() -> None:
        a_in.wait(5)
        with gc_paused():
            b_in.set()
            a_out.wait(5)
            seen["b still paused after a left"] = not gc.isenabled()
            b_may_leave.wait(5)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    a_out.wait(5)
    b_may_leave.set()
    for t in threads:
        t.join(5)
    assert seen == {"b still paused after a left": True}
    assert gc.isenabled() and pause_depth() == 0


def test_a_collector_turned_off_elsewhere_stays_off() -> None:
    gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_overlapping_pauses_still_collect_cycles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads whose pauses overlap without a break (a busy server) must not stop the collector
    for good: a pause ending after MAX_CONTINUOUS_S collects the young generations."""
    import time
    import weakref

    from worldgraph import gcpause

    monkeypatch.setattr(gcpause, "MAX_CONTINUOUS_S", 0.05)

    class Node:
        pass

    with gc_paused():  # the other thread's pause, held across the whole test
        with gc_paused():
            a, b = Node(), Node()
            a.other, b.other = b, a  # type: ignore[attr-defined]
            ref = weakref.ref(a)
            del a, b
        assert ref() is not None  # a cycle: refcounts alone never free it, and the GC is off
        time.sleep(0.1)
        with gc_paused():
            pass  # ends more than MAX_CONTINUOUS_S into the run of pauses
        assert ref() is None
        assert not gc.isenabled() and pause_depth() == 1
