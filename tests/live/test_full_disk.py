"""A REAL full disk (a small tmpfs filled to the last byte): a call that returned committed, a
call that raised committed nothing (or says exactly what did), and a full disk still opens for
reading."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.mounts import fill, free_bytes, leave_free, require_mount, tmpfs
from worldgraph import WorldModel
from worldgraph.errors import PartialWriteError, ReadOnlyError, WorldGraphError
from worldgraph.memory.embeddings import HashingEmbedder

T = "disk"


def _exp(tag: str, i: int, pad: int = 1500) -> dict[str, Any]:
    return {"episode_id": f"{tag}-{i}", "agent_id": "agent-1", "agent_role": "ops", "task_type": "deploy",
            "task_description": f"deploy {tag} number {i} " + "payload " * (pad // 8), "outcome": "success",
            "confidence": 0.9}


def _delta(tag: str) -> dict[str, Any]:
    return {"entities": [{"ref": "e1", "name": f"crate {tag}", "type": "item", "evidence": "seen " * 200}],
            "states": [], "edges": [], "rules": []}


def _attempt(fn: Callable[[], Any]) -> tuple[bool, BaseException | None]:
    try:
        fn()
        return True, None
    except WorldGraphError as exc:  # the only kind a full disk may raise
        return False, exc


@pytest.mark.slow
def test_every_write_on_a_filling_disk_is_honest(tmp_path: Path) -> None:
    """Free space is stepped from 0 to 160 KiB, 8 KiB at a time (the failure moves from SQLite's
    commit to LanceDB's write to the index-status write); at each step a batch, a feedback, a delta
    and a round are tried with that much room, and what the store holds is compared with what
    each call said."""
    require_mount(tmp_path)
    with tmpfs(tmp_path / "disk", "24M") as disk:
        data = disk / "data"
        wm = WorldModel.open(data, embedder=HashingEmbedder(384))
        first = wm.record_experiences(T, [_exp("seed", i) for i in range(5)])
        wm.apply_delta(T, "yard", _delta("seed"))
        # Full means full for SQLite too: an emptied WAL owns no block a commit could write over.
        # (Once a checkpoint copied the whole WAL, the next commit restarts it and writes over the
        # blocks it owns, with no byte free: the background checkpoints do that within 0.5 s of a
        # commit, and the writer's own at 16,384 pages. Such commits are durable; the last test
        # of this file shows it.)
        wm.store.purge_files()
        filler = fill(disk)
        returned: list[str] = []
        acknowledged = {"feedback": 0, "delta": 0}
        start_version = int(wm.world_graph(T, "yard")["meta"]["graph_version"])
        outcomes: dict[str, set[bool]] = {"batch": set(), "feedback": set(), "delta": set(), "round": set()}
        states: set[str] = set()
        unappended: list[int] = []  # steps whose batch returned without its index rows
        for step in range(21):
            room = step * 8192
            leave_free(filler, room)
            ids = [f"s{step}-{i}" for i in range(8)]
            ok, err = _attempt(lambda: wm.record_experiences(T, [_exp(f"s{step}", i) for i in range(8)]))
            held = wm.store.get_episodes(T, ids)
            assert len(held) == (8 if ok else 0), f"step {step}: returned={ok} ({err}) but {len(held)} of 8 stored"
            outcomes["batch"].add(ok)
            states.update(e["index_status"] for e in held.values())
            if ok:
                returned.extend(ids)
                # "indexed" in the store means its row is in the index, or its batch is in the append
                # journal (docs/architecture.md, "One store commit a recorded batch"), which the next
                # open reopens
                rows = {r["episode_id"] for r in wm.index.get(T, ids)}
                journal = {r[0] for r in wm.store.db.query(  # type: ignore[attr-defined]
                    "SELECT e.id FROM episodes e JOIN index_appends a ON e.tenant_id = a.tenant_id "
                    "AND e.rowid BETWEEN a.first_rowid AND a.last_rowid")}
                for eid, e in held.items():
                    assert e["index_status"] != "indexed" or eid in rows or eid in journal, (step, eid)
                if rows != set(ids):
                    unappended.append(step)

            leave_free(filler, room)
            before = wm.store.feedback_stats(T, [first[0]]).get(first[0], (0.0, 0))[1]
            ok, err = _attempt(lambda: wm.submit_feedback(T, first[0], 0.5, notes="n " * 300))
            after = wm.store.feedback_stats(T, [first[0]]).get(first[0], (0.0, 0))[1]
            assert after == before + ok, f"step {step}: feedback returned={ok} ({err}) but count {before} -> {after}"
            outcomes["feedback"].add(ok)
            acknowledged["feedback"] += ok

            leave_free(filler, room)
            version = int(wm.world_graph(T, "yard")["meta"]["graph_version"])
            ok, err = _attempt(lambda: wm.apply_delta(T, "yard", _delta(f"s{step}")))
            graph = wm.world_graph(T, "yard")
            names = {n["name"] for n in graph["nodes"]}
            assert (f"crate s{step}" in names) == ok, f"step {step}: delta returned={ok} ({err}) vs {names}"
            assert graph["meta"]["graph_version"] == (version + 1 if ok else version)
            outcomes["delta"].add(ok)
            acknowledged["delta"] += ok

            rnd = {"round": step, "action": f"open crate {step}", "after_observation": "it opens " * 100,
                   "response": "done\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: crates open"}
            leave_free(filler, room)
            n_eps, n_scenes = wm.store.stats(T)["episodes"], len(wm.store.list_scenes(T, "yard"))
            try:
                packet = wm.observe_round(T, "yard", rnd)
                assert packet is not None
                assert wm.store.get_scene(T, packet["id"]) is not None
                assert wm.store.stats(T)["episodes"] == n_eps + 1
                outcomes["round"].add(True)
            except PartialWriteError as exc:  # the episode committed, the packet did not: it says so
                (eid,) = exc.committed["episode_ids"]
                assert eid in wm.store.get_episodes(T, [eid])
                assert len(wm.store.list_scenes(T, "yard")) == n_scenes
                outcomes["round"].add(False)
            except WorldGraphError:
                assert wm.store.stats(T)["episodes"] == n_eps
                assert len(wm.store.list_scenes(T, "yard")) == n_scenes
                outcomes["round"].add(False)
        # the disk was really full at first and really had room later: both outcomes were seen
        assert all(seen == {True, False} for seen in outcomes.values()), outcomes
        # ... and the case of the old false failure happened: a batch stored, but what came after
        # its commit (the index append, its "failed" mark) failed; the call returned and the batch
        # waits for the next open ("failed", or "indexed" with its append journal entry)
        assert unappended and "indexed" in states, (unappended, states)
        wm.close()
        filler.unlink()
        # with room again, the next open indexes what the full disk left pending: all recallable
        with WorldModel.open(data, embedder=HashingEmbedder(384)) as wm:
            assert wm.store.unindexed_episodes() == []
            # every write that returned is there, none that raised
            assert wm.store.feedback_stats(T, [first[0]])[first[0]][1] == acknowledged["feedback"]
            assert int(wm.world_graph(T, "yard")["meta"]["graph_version"]) == start_version + acknowledged["delta"]
            for eid in [*first, *returned]:
                desc = wm.store.get_episodes(T, [eid])[eid]["task_description"]
                found = [r["episode_id"] for r in wm.recall_experiences(
                    T, None, desc[:200], limit=3, options={"min_similarity": -1.0, "hybrid": False})]
                assert eid in found, eid


def test_a_full_disk_opens_read_only_and_recall_works(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    require_mount(tmp_path)
    with tmpfs(tmp_path / "disk", "16M") as disk:
        data = disk / "data"
        with WorldModel.open(data, embedder=HashingEmbedder(384)) as wm:
            ids = wm.record_experiences(T, [_exp("full", i, pad=100) for i in range(10)])
            wm.apply_delta(T, "yard", _delta("full"))
        fill(disk)
        assert free_bytes(disk) == 0
        with caplog.at_level(logging.WARNING, logger="worldgraph"):
            wm = WorldModel.open(data, embedder=HashingEmbedder(384))
        assert wm.read_only and "full" in (wm.read_only_reason or "")
        assert any("read-only" in r.getMessage() and "full" in r.getMessage() for r in caplog.records)
        with wm:
            res = wm.recall_experiences(T, "ops", "deploy full number 3", options={"min_similarity": 0.0})
            assert res[0]["episode_id"] == ids[3]
            assert len(wm.get_agent_episodes(T, "agent-1")) == 10
            assert wm.readiness(T, "agent-1")["episodes"] == 10
            assert [n["name"] for n in wm.world_graph(T, "yard")["nodes"]] == ["crate full"]
            out = wm.export(T, "yard", tmp_path / "export")  # another, writable folder
            assert (out / "nodes.jsonl").read_text().count("\n") == 1
            with pytest.raises(ReadOnlyError, match="record_experience.*full"):
                wm.record_experience(T, _exp("more", 1))


def test_a_cypher_projection_that_cannot_be_saved_is_built_in_a_temporary_folder(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills while the store is open: the tenant's projection cannot be written beside the
    SQLite file nor in the data folder's scratch folder, so the query is answered from one built in
    the system's temporary folder, and no half-written file is named (the next open with room
    builds and saves it)."""
    from worldgraph.kg.embedded.cypher import opener as opener_module
    from worldgraph.kg.embedded.cypher.saved import folder_for

    monkeypatch.setattr(opener_module, "SAVE_MIN_ROWS", 0)  # a small tenant's projection is saved too
    require_mount(tmp_path)
    count = "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n"
    with tmpfs(tmp_path / "disk", "16M") as disk:
        data = disk / "data"
        with WorldModel.open(data, embedder=HashingEmbedder(384)) as wm:
            wm.record_experiences(T, [_exp("cy", i, pad=3000) for i in range(40)])
            filler = fill(disk)
            with caplog.at_level(logging.WARNING, logger="worldgraph"):
                assert wm.cypher(T, count) == [{"n": 40}]
            assert any("in a temporary folder" in r.getMessage() for r in caplog.records)
            assert not list(folder_for(wm.store.path).glob("*.json"))  # nothing named
            filler.unlink()
            wm.record_experience(T, _exp("cy", 99))
            assert wm.cypher(T, count) == [{"n": 41}]
        with WorldModel.open(data, embedder=HashingEmbedder(384)) as wm:
            assert wm.cypher(T, count) == [{"n": 41}]
            assert len(list(folder_for(wm.store.path).glob("*.json"))) == 1  # saved now


def test_commits_a_full_disk_lets_through_are_kept_and_the_stalled_checkpoint_is_said(tmp_path: Path) -> None:
    """Once a background checkpoint copied the whole WAL, commits on a full disk write over blocks
    the WAL already owns and return: a writer killed with SIGKILL right after loses none of them.
    The checkpoint that would copy them needs the database file to grow: it fails, and says so
    once with a warning naming the full disk (kg/embedded/checkpointer.py)."""
    require_mount(tmp_path)
    with tmpfs(tmp_path / "disk", "24M") as disk:
        data = disk / "data"
        script = textwrap.dedent(f"""
            import logging, os, signal, time
            from pathlib import Path
            from tests.live.test_full_disk import T, _delta, _exp
            from tests.support.mounts import fill
            from worldgraph import WorldModel
            from worldgraph.memory.embeddings import HashingEmbedder

            said = []
            handler = logging.Handler()
            handler.emit = lambda record: said.append(record.getMessage())
            logging.getLogger("worldgraph").addHandler(handler)
            wm = WorldModel.open({str(data)!r}, embedder=HashingEmbedder(384))
            first = wm.record_experiences(T, [_exp("seed", i) for i in range(5)])
            wm.apply_delta(T, "yard", _delta("seed"))
            checkpointer = wm.store.db.checkpointer
            deadline = time.monotonic() + 10
            while checkpointer.runs < 2 and time.monotonic() < deadline:  # the WAL copied
                time.sleep(0.05)
            time.sleep(1.0)
            fill(Path({str(disk)!r}))
            ids = wm.record_experiences(T, [_exp("full", i) for i in range(8)])
            for _ in range(3):
                wm.submit_feedback(T, first[0], 0.5, notes="n " * 300)
            while not any("background checkpoint" in m for m in said) and time.monotonic() < deadline + 10:
                time.sleep(0.05)
            print(first[0], *ids, flush=True)
            print([m for m in said if "background checkpoint" in m], flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        """)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             cwd=Path(__file__).parents[2])
        assert out.returncode == -signal.SIGKILL, out.stderr[-3000:]
        ids_line, said_line = out.stdout.splitlines()[-2:]
        first, *ids = ids_line.split()
        assert "database or disk is full" in said_line and "the disk is full" in said_line, said_line
        assert said_line.count("background checkpoint") == 1  # said once, not at every commit
        (disk / "filler").unlink()
        with WorldModel.open(data, embedder=HashingEmbedder(384)) as wm:
            assert not wm.read_only
            assert sorted(wm.store.get_episodes(T, ids)) == sorted(ids)
            assert wm.store.feedback_stats(T, [first])[first][1] == 3
            assert wm.store.unindexed_episodes() == []
