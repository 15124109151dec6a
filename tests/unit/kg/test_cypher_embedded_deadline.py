"""The embedded store's ``cypher()`` ends within ``cypher_timeout`` + 2 s whatever the query
(``worldgraph.kg.embedded.cypher.run``: a worker thread, the engine interrupted at the deadline,
the run abandoned when the engine does not stop).

LadybugDB checks its timeout and interrupts only between steps of its pipeline: one expression
that loops over a long list (``list_transform``) runs to its end, whatever the timeout. These
tests use such queries with a 1 s timeout. The expressions that build a huge string or list in
one step (``lpad``, ``repeat``, a list added to itself) ran on in the engine too, holding
gigabytes; they are refused before the engine sees them
(``test_runaway_builders_are_refused_at_once``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from worldgraph import CypherQueryError, WorldModel
from worldgraph.kg.embedded import cypher as embedded_cypher
from worldgraph.memory.embeddings import HashingEmbedder

TIMEOUT = 1.0
BOUND = TIMEOUT + 2.0
NORMAL = "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.task_description AS task ORDER BY task"
# each runs several seconds in one expression, past any timeout, in little memory (measured with
# no timeout, load average ~10: 1M elements of 2,000 characters 48 s, flat ~100 MB). (Deeply nested
# brackets, slow in the parser the first time, parse fast once the parser has seen that depth.)
HOSTILE = {
    "padding in a loop": "RETURN size(list_transform(range(1, 150000), x -> size(lpad(to_string(x), 2000, 'b')))) AS n",
    "padding in a longer loop": "RETURN size(list_transform(range(1, 250000), x -> size(lpad(to_string(x), 2000, 'b'))))"
                                " AS n",
}
# runs ~10 s on a quiet machine (250,000 elements: 3.0 s, which is only 1 s past the abandonment at
# TIMEOUT + the 1 s grace: the run once ended between two of the steps a test takes meanwhile)
ABANDONED = "RETURN size(list_transform(range(1, 1000000), x -> size(lpad(to_string(x), 2000, 'b')))) AS n"
# what built gigabytes in one expression before it was refused (lpad to 400M characters 2.3 GB,
# a list doubled 14 times ~3 GB): each now fails at once, naming what is refused
RUNAWAY = {
    "RETURN size(lpad('a', 300000000, 'xy')) AS n": "lpad",
    "RETURN size(rpad('a', 2000000, 'xy')) AS n": "rpad",
    "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN size(lpad(e.id, size(e.id) * 100000000, 'x')) AS n": "lpad",
    "RETURN size(repeat('ab', 150000000)) AS n": "repeat",
    "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN size(repeat(e.id, 10)) AS n": "repeat",
    "WITH range(1, 1000000) AS l WITH l + l AS l WITH l + l AS l RETURN size(l) AS n": "adding a value to itself",
    "WITH 'ab' AS s WITH s+s AS s WITH s+s AS s RETURN size(s) AS n": "adding a value to itself",
    "WITH [1, 2] AS l WITH list_concat(l, l) AS l RETURN size(l) AS n": "adding a value to itself",
}


@pytest.fixture()
def wm(tmp_path: Path) -> Iterator[WorldModel]:
    model = WorldModel.open(tmp_path, embedder=HashingEmbedder(64), cypher_timeout_seconds=TIMEOUT)
    for tenant in ("attacker", "other"):
        model.record_experiences(tenant, [{"agent_id": "a", "agent_role": "r", "task_type": "t",
                                           "task_description": f"{tenant} task {i}", "outcome": "success"}
                                          for i in range(3)])
    try:
        yield model
    finally:
        wait_for_abandoned_runs()
        model.close()


def wait_for_abandoned_runs(limit: float = 180.0) -> None:
    """Until the engine has ended every abandoned run (they hold memory and a core meanwhile)."""
    end = time.monotonic() + limit
    while embedded_cypher.abandoned_runs() and time.monotonic() < end:
        time.sleep(0.1)
    assert embedded_cypher.abandoned_runs() == 0, "an abandoned run never ended"


def projection(wm: WorldModel, tenant: str) -> embedded_cypher.Projection:
    return wm.store.projections._items[tenant][1]  # type: ignore[attr-defined]


def timed_hostile(wm: WorldModel, query: str) -> float:
    started = time.monotonic()
    with pytest.raises(CypherQueryError, match="cypher_timeout_seconds"):
        wm.cypher("attacker", query)
    return time.monotonic() - started


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_query_ends_on_time_and_the_next_query_works(wm: WorldModel, name: str) -> None:
    assert len(wm.cypher("attacker", NORMAL)) == 3
    before = projection(wm, "attacker")
    elapsed = timed_hostile(wm, HOSTILE[name])
    assert elapsed <= BOUND, f"{name}: {elapsed:.2f} s with a {TIMEOUT} s timeout"
    started = time.monotonic()
    assert [r["task"] for r in wm.cypher("attacker", NORMAL)] == [f"attacker task {i}" for i in range(3)]
    assert time.monotonic() - started <= BOUND
    if before.closed:  # the engine did not stop at the deadline: the run and its projection were abandoned
        assert projection(wm, "attacker") is not before
        wait_for_abandoned_runs()
        assert before.released, "the projection's database was not freed when its run ended"
    else:  # the engine stopped (how fast depends on the machine): the same projection serves on
        assert projection(wm, "attacker") is before and not before.released


def test_another_tenant_is_served_meanwhile(wm: WorldModel) -> None:
    wm.cypher("other", NORMAL)
    done: list[float] = []
    attacker = threading.Thread(target=lambda: done.append(timed_hostile(wm, HOSTILE["padding in a loop"])))
    attacker.start()
    try:
        time.sleep(0.3)
        latencies = []
        while attacker.is_alive():
            started = time.monotonic()
            assert len(wm.cypher("other", NORMAL)) == 3
            latencies.append(time.monotonic() - started)
            time.sleep(0.05)
    finally:
        attacker.join(timeout=60)
    assert done and done[0] <= BOUND
    assert latencies and max(latencies) < TIMEOUT, latencies


def test_abandoned_runs_are_bounded(wm: WorldModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flood of hostile queries cannot pile up runs: past MAX_ABANDONED_PER_TENANT still alive,
    the tenant's next query fails at once; other tenants are served; once the engine ends the run,
    the tenant's queries work again."""
    monkeypatch.setattr(embedded_cypher.execution, "MAX_ABANDONED_PER_TENANT", 1)
    wm.cypher("attacker", NORMAL)
    assert timed_hostile(wm, ABANDONED) <= BOUND
    if not embedded_cypher.abandoned_runs("attacker"):
        pytest.skip("the engine ended the query within the grace period on this machine: nothing was abandoned")
    started = time.monotonic()
    with pytest.raises(CypherQueryError, match="has not ended them yet"):
        wm.cypher("attacker", NORMAL)
    assert time.monotonic() - started < 0.5
    assert len(wm.cypher("other", NORMAL)) == 3
    monkeypatch.setattr(embedded_cypher.execution, "MAX_ABANDONED", 1)
    with pytest.raises(CypherQueryError, match="1 earlier queries ran past"):
        wm.cypher("other", NORMAL)
    wait_for_abandoned_runs()
    assert len(wm.cypher("attacker", NORMAL)) == 3
    assert len(wm.cypher("other", NORMAL)) == 3


def test_a_write_during_a_runaway_query_stalls_no_one(wm: WorldModel) -> None:
    """A world delta while the tenant's query runs: the next query builds a fresh projection rather
    than wait (under the cache's lock, which every tenant's query takes) for the running one."""
    wm.cypher("attacker", NORMAL)
    wm.cypher("other", NORMAL)
    attacker = threading.Thread(target=lambda: timed_hostile(wm, HOSTILE["padding in a loop"]))
    attacker.start()
    try:
        time.sleep(0.3)
        delta = {"entities": [{"ref": "x", "name": "new thing", "type": "item"}], "states": [], "edges": [],
                 "rules": []}
        assert wm.apply_delta("attacker", "Env", delta).ok
        started = time.monotonic()
        rows = wm.cypher("attacker", "MATCH (n:Entity {tenant_id: $tenant_id}) RETURN n.name AS name")
        assert rows == [{"name": "new thing"}]
        assert time.monotonic() - started < TIMEOUT
        started = time.monotonic()
        assert len(wm.cypher("other", NORMAL)) == 3
        assert time.monotonic() - started < TIMEOUT
    finally:
        attacker.join(timeout=60)


@pytest.mark.parametrize("query", list(RUNAWAY))
def test_runaway_builders_are_refused_at_once(wm: WorldModel, query: str) -> None:
    """A string or list built whole in one expression is refused before the engine runs it: no run
    is abandoned holding its memory, and small ones still run."""
    started = time.monotonic()
    with pytest.raises(CypherQueryError, match=f"does not support {RUNAWAY[query]}"):
        wm.cypher("attacker", query)
    assert time.monotonic() - started < TIMEOUT
    assert embedded_cypher.abandoned_runs() == 0
    assert wm.cypher("attacker", "RETURN lpad('a', 3, 'x') AS p, repeat('ab', 2) AS r, size([1] + [2]) AS n") == [
        {"p": "xxa", "r": "abab", "n": 2}]
