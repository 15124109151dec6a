"""Every process lets go (facade/generations.py): a running ``worldgraph serve`` that holds a warm
Cypher projection, and another process (the CLI) that forgets and purges. Within 2 s of the purge
no open file handle of the server or of any of its children points at a deleted file of the data
folder (the purged projection), and none holds the forgotten words; the server answers from what
is current."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.support.live_server import LiveServer, worldgraph

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")]

# A projection is saved to a file (what another process could keep open) from this many rows.
SAVED_FROM = 5_000


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it (from /proc/<n>/stat's parent ids)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
    tree, frontier = [pid], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        tree += frontier
    return tree


def open_files(pids: list[int], under: Path) -> list[tuple[int, str, bytes]]:
    """(pid, link target, bytes) of every open file of ``pids`` whose target is under ``under``."""
    out = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # ended meanwhile
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith(str(under)):
                    out.append((pid, target, Path(f"/proc/{pid}/fd/{fd}").read_bytes()))
            except OSError:
                continue
    return out


def holds(blob: bytes, word: str) -> bool:
    return any(form in blob for form in (word.encode(), word.encode("utf-16-le"), word.lower().encode()))


def test_a_server_lets_go_of_what_another_process_purged(tmp_path: Path) -> None:
    secret = f"zq{uuid.uuid4().hex[:10]}x"
    srv = LiveServer(tmp_path)
    srv.data.mkdir()
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(json.dumps({"agent_id": "a", "task_type": "t", "outcome": "success",
                                          "task_description": f"run {i}" + (f" {secret}" if i == 7 else "")})
                              for i in range(SAVED_FROM)))
    worldgraph(srv.data, "--tenant", srv.tenant, "record", str(runs), env=srv.env)
    with srv:
        query = {"query": "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n"}
        r = httpx.post(f"{srv.url}/v1/cypher", json=query, headers=srv.headers(), timeout=120)
        assert r.status_code == 200 and r.json()["rows"] == [{"n": SAVED_FROM}]
        assert srv.proc is not None
        held = open_files(process_tree(srv.proc.pid), srv.data)
        assert any(holds(blob, secret) for _, _, blob in held), "the warm projection holds the words"

        eid = next(e["id"] for e in worldgraph(srv.data, "--tenant", srv.tenant, "episodes", "list", "--limit",
                                               str(SAVED_FROM), env=srv.env)["episodes"]
                   if secret in e["task_description"])
        out = worldgraph(srv.data, "--tenant", srv.tenant, "forget", "episode", eid, env=srv.env)
        purged = time.monotonic()
        assert out["purge"]["forgets_purged"] == 1
        while True:
            held = open_files(process_tree(srv.proc.pid), srv.data)
            stale = [(pid, target) for pid, target, blob in held if target.endswith("(deleted)") or holds(blob, secret)]
            if not stale or time.monotonic() - purged > 2.0:
                break
            time.sleep(0.1)
        assert stale == [], f"{time.monotonic() - purged:.1f} s after the purge the server still holds {stale}"
        r = httpx.post(f"{srv.url}/v1/cypher", json=query, headers=srv.headers(), timeout=120)
        assert r.json()["rows"] == [{"n": SAVED_FROM - 1}]
