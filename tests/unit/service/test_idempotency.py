"""Idempotent writes on both stores: the same key and request return the first answer and store
nothing new, across processes and reopenings; the same key with another request is refused
(idempotency_key); a request still running is a conflict; a failed one leaves nothing; expired and
dead records give way; and forgetting what an answer names deletes the kept answer (it may quote
the user's words), down to the bytes after purge on the embedded store."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.unit.service.test_forget import graph_kw, tenant, wm  # noqa: F401 - the both-store fixtures
from worldgraph import InvalidInputError, WorldModel
from worldgraph.errors import ConflictError
from worldgraph.facade.idempotency import request_hash
from worldgraph.memory.embeddings import HashingEmbedder

RUN = {"agent_id": "a", "agent_role": "r", "task_type": "x", "task_description": "reconcile SKU-1",
       "outcome": "success"}


def iso(delta_seconds: float = 0) -> str:
    return (datetime.now(timezone.utc) + timedelta(seconds=delta_seconds)).isoformat(timespec="microseconds")


def test_a_retry_returns_the_first_answer_and_stores_nothing(wm: WorldModel, tenant: str) -> None:
    first = wm.record_experience(tenant, RUN, idempotency_key="k-1")
    assert wm.record_experience(tenant, RUN, idempotency_key="k-1") == first
    assert wm.record_experience(tenant, dict(RUN), idempotency_key="k-1") == first  # an equal request
    assert wm.stats(tenant)["episodes"] == 1
    assert wm.record_experience(tenant, RUN) != first  # no key: not deduplicated
    assert wm.stats(tenant)["episodes"] == 2
    with pytest.raises(InvalidInputError) as err:
        wm.record_experience(tenant, {**RUN, "task_description": "another run"}, idempotency_key="k-1")
    assert err.value.field == "idempotency_key"
    assert wm.record_experience("other-tenant", RUN, idempotency_key="k-1") != first  # keys are per tenant
    # every write takes one, each with its own answer
    fb = wm.submit_feedback(tenant, first, 0.5, notes="good", idempotency_key="k-fb")
    again = wm.submit_feedback(tenant, first, 0.5, notes="good", idempotency_key="k-fb")
    assert again["id"] == fb["id"] and again["count"] == 1
    turns = [{"speaker": "bob", "text": "hi"}, {"speaker": "amy", "text": "hello"}]
    assert (wm.record_conversation(tenant, "s1", turns, idempotency_key="k-c")
            == wm.record_conversation(tenant, "s1", turns, idempotency_key="k-c"))
    rnd = {"round": 1, "action": "look", "response": "FLAG_CURIOSITY: yes\nCURIOSITY_REASON: new"}
    packet = wm.observe_round(tenant, "Attic", rnd, idempotency_key="k-r")
    assert packet is not None and wm.observe_round(tenant, "Attic", rnd, idempotency_key="k-r")["id"] == packet["id"]
    delta = {"entities": [{"name": "box", "type": "item"}], "states": [], "edges": [], "rules": []}
    report = wm.apply_delta(tenant, "Attic", delta, idempotency_key="k-d")
    replayed = wm.apply_delta(tenant, "Attic", delta, idempotency_key="k-d")
    assert replayed.graph_version == report.graph_version and replayed.created == report.created
    assert wm.stats(tenant)["episodes"] == 2 + 2 + 1  # two runs, two turns, one round
    with pytest.raises(InvalidInputError):
        wm.record_experience(tenant, RUN, idempotency_key="a key with spaces")


def test_running_failed_expired_and_dead_requests(wm: WorldModel, tenant: str) -> None:
    digest = request_hash("record_experience", {"experience": RUN, "canvas": None})
    assert wm.store.begin_idempotent(tenant, "k-run", digest, iso(), iso(86400), iso(-600)) is None
    with pytest.raises(ConflictError) as err:  # the first request is still being answered
        wm.record_experience(tenant, RUN, idempotency_key="k-run")
    assert err.value.field == "idempotency_key"
    # a request whose process died long ago (started 20 minutes back) is taken over
    assert wm.store.begin_idempotent(tenant, "k-dead", digest, iso(-1200), iso(86400), iso(-1800)) is None
    eid = wm.record_experience(tenant, RUN, idempotency_key="k-dead")
    assert wm.record_experience(tenant, RUN, idempotency_key="k-dead") == eid
    # an expired answer gives way: the same key runs again
    assert wm.store.begin_idempotent(tenant, "k-old", "other", iso(-90000), iso(-3600), iso(-90600)) is None
    wm.store.finish_idempotent(tenant, "k-old", '"x"', [])
    assert wm.record_experience(tenant, RUN, idempotency_key="k-old") not in ("x", eid)
    # a failed request leaves nothing: its retry (corrected) runs
    with pytest.raises(InvalidInputError):
        wm.record_experience(tenant, {**RUN, "outcome": "maybe"}, idempotency_key="k-bad")
    assert wm.record_experience(tenant, RUN, idempotency_key="k-bad")


def test_the_answer_lasts_across_processes_and_reopening(tmp_path: Path, tenant: str) -> None:
    data = tmp_path / "data"
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        first = wm.record_experience(tenant, RUN, idempotency_key="k-proc")
    code = ("import sys; from worldgraph import WorldModel; from worldgraph.memory.embeddings import HashingEmbedder\n"
            "with WorldModel.open(sys.argv[1], embedder=HashingEmbedder(64)) as wm:\n"
            f"    print(wm.record_experience({tenant!r}, {RUN!r}, idempotency_key='k-proc'))")
    out = subprocess.run([sys.executable, "-c", code, str(data)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == first
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        assert wm.stats(tenant)["episodes"] == 1


def test_forget_removes_the_kept_answers(wm: WorldModel, tenant: str, tmp_path: Path) -> None:
    secret = f"notes-{uuid.uuid4().hex}"
    eid = wm.record_experience(tenant, RUN, idempotency_key="k-e")
    wm.submit_feedback(tenant, eid, 0.5, notes=secret, idempotency_key="k-f")
    delta = {"entities": [{"name": f"box {secret}", "type": "item"}], "states": [],
             "edges": [{"relation": "containment", "src_ref": "box", "dst_ref": f"nowhere {secret}"}], "rules": []}
    assert wm.apply_delta(tenant, "Attic", delta, idempotency_key="k-d").dropped  # its answer quotes the item
    kept = ["k-e", "k-f", "k-d"]
    assert all(_kept(wm, tenant, k) for k in kept)
    wm.forget_episode(tenant, eid)
    assert [k for k in kept if _kept(wm, tenant, k)] == ["k-d"]
    wm.forget_environment(tenant, "Attic")
    assert [k for k in kept if _kept(wm, tenant, k)] == []
    wm.record_experience(tenant, RUN, idempotency_key="k-t")
    wm.forget_tenant(tenant)
    assert not _kept(wm, tenant, "k-t")
    if wm.store.name == "embedded":
        wm.purge()
        data = Path(wm.store.path).parent  # type: ignore[attr-defined]
        assert not [p for p in data.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def _kept(wm: WorldModel, tenant: str, key: str) -> bool:
    """Whether the store still holds the key's record (a begin answers it; a new one is dropped again)."""
    found = wm.store.begin_idempotent(tenant, key, "probe", iso(), iso(86400), iso(-600))
    if found is None:
        wm.store.abandon_idempotent(tenant, key)
        return False
    return True
