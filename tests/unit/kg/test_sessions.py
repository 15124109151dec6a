"""Sessions on both stores: the episodes of one session are linked in time order (NEXT), whatever
order and batches they arrive in, and a session never links to another session or tenant."""

from __future__ import annotations

import threading
from typing import Any

from tests.unit.kg.test_store_contract import add, episode, store, tenant  # noqa: F401 - fixtures
from worldgraph.kg.store import GraphStore


def turn(tenant: str, minutes: int, task: str, session: str | None = "chat-1", **extra: Any) -> Any:
    return episode(tenant, minutes=minutes, task=task, session_id=session, **extra)


def chain(store: GraphStore, tenant: str, ids: list[str]) -> list[str]:
    """The session's episodes in NEXT order, from its first (checks prev and next agree)."""
    links = store.session_neighbors(tenant, ids)
    heads = [i for i in ids if i in links and links[i][0] is None]
    assert len(heads) == 1, f"one first episode expected, got {heads}"
    out = [heads[0]]
    while (nxt := links[out[-1]][1]) is not None:
        assert links[nxt][0] == out[-1], "prev and next disagree"
        out.append(nxt)
        assert len(out) <= len(ids), "the links form a cycle"
    return out


def test_a_batch_is_linked_in_the_order_given(store: GraphStore, tenant: str) -> None:  # noqa: F811
    # a transcript dated by day: every turn has the same timestamp, the order given is the order
    ids = add(store, tenant, *(turn(tenant, 0, f"turn {i}") for i in range(4)))
    assert chain(store, tenant, ids) == ids
    links = store.session_neighbors(tenant, ids)
    assert links[ids[0]] == (None, ids[1]) and links[ids[3]] == (ids[2], None)


def test_later_batches_append_and_late_turns_go_where_they_belong(store: GraphStore, tenant: str) -> None:  # noqa: F811
    first = add(store, tenant, turn(tenant, 0, "a"), turn(tenant, 10, "c"))
    later = add(store, tenant, turn(tenant, 20, "d"), turn(tenant, 30, "e"))
    assert chain(store, tenant, first + later) == first + later
    late = add(store, tenant, turn(tenant, 5, "b"))  # recorded last, happened second
    assert chain(store, tenant, first + later + late) == [first[0], late[0], first[1], *later]
    before = store.session_episode_before(tenant, "chat-1", _ts(store, tenant, first[1]))
    assert before is not None and before["id"] == first[1]
    assert store.session_episode_before(tenant, "chat-1", 0.0) is None
    assert store.session_episode_before(tenant, "no-such-session", 1e12) is None


def _ts(store: GraphStore, tenant: str, episode_id: str) -> float:
    return float(store.get_episodes(tenant, [episode_id])[episode_id]["ts"])


def test_sessions_and_tenants_stay_apart(store: GraphStore, tenant: str) -> None:  # noqa: F811
    other = tenant + "-other"
    a = add(store, tenant, turn(tenant, 0, "a1", "chat-a"), turn(tenant, 1, "b1", "chat-b"),
            turn(tenant, 2, "a2", "chat-a"), turn(tenant, 3, "loose", None))
    b = add(store, other, turn(other, 0, "x1", "chat-a"), turn(other, 1, "x2", "chat-a"))
    links = store.session_neighbors(tenant, a + b)
    assert links == {a[0]: (None, a[2]), a[2]: (a[0], None), a[1]: (None, None)}  # no session: absent
    assert store.session_neighbors(other, b) == {b[0]: (None, b[1]), b[1]: (b[0], None)}
    assert store.get_episodes(tenant, [a[0]])[a[0]]["session_id"] == "chat-a"
    assert store.get_episodes(tenant, [a[3]])[a[3]]["session_id"] is None


def test_concurrent_writers_of_one_session_make_one_chain(store: GraphStore, tenant: str) -> None:  # noqa: F811
    ids: list[str] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(5):
                got = add(store, tenant, turn(tenant, 0, f"w{w} turn {i}"), turn(tenant, 0, f"w{w} turn {i}b"))
                with lock:
                    ids.extend(got)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    order = chain(store, tenant, ids)
    assert sorted(order) == sorted(ids)
    # each batch stays together and in order (same timestamps: recording order decides)
    for i in range(0, len(order), 2):
        a, b = (store.get_episodes(tenant, order[i:i + 2])[x]["task_description"] for x in order[i:i + 2])
        assert b == a + "b"
