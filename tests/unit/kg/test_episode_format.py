"""Episode records on disk (kg/embedded/episode_format.py): format 2 leaves out what is filled in
again exactly, a record it cannot restore is kept whole (format 1), and both read back as written."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from worldgraph import WorldModel
from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.embedded import episodes as episodes_module
from worldgraph.kg.embedded.episode_format import DEFAULTS, FORMAT_KEY, SHORT, full_data, pack, unpack


def _record(**over: object) -> dict[str, object]:
    rec: dict[str, object] = {
        "id": "e-1", "episode_id": "e-1", "tenant_id": "t", "agent_id": "a", "task_type": "report",
        "task_description": "the quarterly numbers", "input_summary": "", "outcome": "success", "success": True,
        "confidence_score": 0.5, "reasoning_chain": {"conclusion": "", "steps": []}, "maturity_level": "student",
        "metacognitive_insights": {"uncertainty": "low", "what_failed": [], "what_worked": []},
        "ts": 1791983305.293908, "timestamp": "2026-10-14T13:08:25.293908+00:00",
        **{k: (v.copy() if isinstance(v, (list, dict)) else v) for k, v in DEFAULTS.items()},
    }
    rec.update(over)
    return rec


def test_defaults_and_derived_keys_are_left_out_and_restored() -> None:
    rec = _record()
    data = pack(rec)
    stored = loads(data)
    assert stored[FORMAT_KEY] == 2
    assert not (DEFAULTS.keys() | {"episode_id", "timestamp"}) & stored.keys()
    assert len(data) < len(dumps(rec)) - 300
    assert unpack(data) == rec and dumps(unpack(data)) == dumps(rec)
    assert list(unpack(data)) == list(loads(dumps(rec)))  # the keys in format 1's order too
    assert not SHORT.keys() & stored.keys() and stored["ag"] == "a" and stored["id"] == "e-1"
    assert full_data(data) == dumps(rec)


def test_values_that_only_look_like_defaults_are_kept() -> None:
    # 0 is not False, {} is not [], "" is not None: each comes back with its own type
    rec = _record(human_intervention_required=0, learnings={}, canvas_id="", session_id="s-1", metadata={"k": 1})
    back = unpack(pack(rec))
    assert back == rec
    assert type(back["human_intervention_required"]) is int and back["learnings"] == {} and back["canvas_id"] == ""


def test_records_it_cannot_restore_are_kept_whole() -> None:
    cases = [
        _record(episode_id="other"),                 # episode_id is not the id
        _record(timestamp="2026-10-14T15:08:25.293908+02:00"),  # not the spelling of ts
        _record(ts=1791983305),                      # an integer ts (an import's)
        {k: v for k, v in _record().items() if k != "canvas_name"},  # a default key absent
        {k: v for k, v in _record().items() if k != "episode_id"},
        _record(ag="a key named like a short name"),
    ]
    for rec in cases:
        data = pack(rec)
        assert data == dumps(rec) and FORMAT_KEY not in loads(data)
        assert unpack(data) == rec and full_data(data) == data


def test_nested_values_of_the_model_shape_are_lists_others_as_written() -> None:
    chain = {"conclusion": "done", "steps": [{"step": "plan", "thought": "read"}, {"step": "act", "thought": "sum"}]}
    rec = _record(reasoning_chain=chain, metacognitive_insights={"uncertainty": "low", "what_failed": [],
                                                                  "what_worked": ["x"]})
    stored = loads(pack(rec))
    assert stored["rc"] == ["done", [["plan", "read"], ["act", "sum"]]] and stored["mi"] == ["low", [], ["x"]]
    assert unpack(pack(rec)) == rec and dumps(unpack(pack(rec))) == dumps(rec)
    odd = [{"conclusion": "", "steps": [], "extra": 1}, {"conclusion": "", "steps": [{"step": "a"}]},
           {"conclusion": "", "steps": "not a list"}, ["a", "list"], None]
    for value in odd:
        rec = _record(reasoning_chain=value, metacognitive_insights={"uncertainty": "", "what_failed": []})
        stored = loads(pack(rec))
        assert stored[FORMAT_KEY] == 2 and stored["reasoning_chain"] == value and "rc" not in stored
        assert stored["metacognitive_insights"] == {"uncertainty": "", "what_failed": []}
        assert unpack(pack(rec)) == rec and list(unpack(pack(rec))) == list(loads(dumps(rec)))


def test_the_format_key_is_no_record_key() -> None:
    with pytest.raises(ValueError, match="_f"):
        pack(_record(**{FORMAT_KEY: 1}))


def test_unpacked_lists_are_not_shared() -> None:
    a, b = unpack(pack(_record())), unpack(pack(_record(id="e-2", episode_id="e-2")))
    a["learnings"].append("x")
    assert b["learnings"] == [] and DEFAULTS["learnings"] == []


def _reads(folder: Path) -> tuple[dict[str, object], dict[str, str]]:
    """Every public read of tenant t's episodes, and the rows' data as stored."""
    with WorldModel.open(folder) as wm:
        for exp in EXPERIENCES:
            wm.record_experience("t", exp)
        ids = sorted(e["episode_id"] for e in EXPERIENCES)
        reads = {"get": [dict(wm.get_episode("t", i)) for i in ids],
                 "list": [dict(e) for e in wm.list_episodes("t").items],
                 "session": [dict(e) for e in wm.list_episodes("t", session_id="s-9").items],
                 "keys": [list(wm.get_episode("t", i)) for i in ids],
                 "cypher": sorted((r["e"] for r in wm.cypher("t", "MATCH (e:Episode) RETURN e")), key=lambda e: e["id"])}
    con = sqlite3.connect(folder / "worldgraph.db")
    rows = dict(con.execute("SELECT id, data FROM episodes").fetchall())
    con.close()
    return reads, rows


EXPERIENCES = [
    {"episode_id": "ep-full", "agent_id": "a-1", "task_type": "report", "task_description": "regional sales numbers",
     "outcome": "failure", "error_message": "the ledger was locked", "learnings": ["check the lock"],
     "metadata": {"region": "north"}, "session_id": "s-9", "timestamp": "2026-10-14T15:08:25.293908+02:00"},
    {"episode_id": "ep-bare", "agent_id": "a-2", "task_type": "report", "task_description": "a bare run",
     "outcome": "success", "timestamp": "2026-10-15T01:02:03+00:00"},
]


def test_public_reads_are_those_of_whole_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same experiences, stored as format 2 and (pack switched off) as format 1: every public
    read returns the same records."""
    slim, slim_rows = _reads(tmp_path / "slim")
    monkeypatch.setattr(episodes_module, "pack", dumps)
    whole, whole_rows = _reads(tmp_path / "whole")
    assert all(FORMAT_KEY in loads(d) for d in slim_rows.values())
    assert not any(FORMAT_KEY in loads(d) for d in whole_rows.values())
    assert sum(map(len, slim_rows.values())) < sum(map(len, whole_rows.values())) - 300
    assert "canvas_name" not in loads(slim_rows["ep-bare"]) and loads(slim_rows["ep-full"])["er"] == "the ledger was locked"
    assert slim == whole
    assert slim["get"][1]["error_message"] == "the ledger was locked" and slim["get"][0]["learnings"] == []
