"""``worldgraph serve`` as a real process: the size limit on the wire (declared and chunked),
keys created and revoked by the CLI while it runs, and a graceful shutdown that lets a background
world update finish."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.live_server import LiveServer, worldgraph
from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder

pytestmark = pytest.mark.slow

EXPERIENCE = {"agent_id": "fin-1", "agent_role": "Finance", "task_type": "reconciliation",
              "task_description": "Reconcile SKU-123 inventory", "outcome": "success"}
DELTA = {"entities": [{"ref": "k", "name": "brass key", "type": "item"},
                      {"ref": "t", "name": "kitchen table", "type": "furniture"}],
         "states": [], "edges": [{"relation": "containment", "src_ref": "t", "dst_ref": "k"}], "rules": []}
FLAGGED = {"round": 1, "action": "take brass key", "before_observation": "A brass key lies on the kitchen table.",
           "after_observation": "Taken.", "response": "ok\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: a key"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    with LiveServer(tmp_path) as srv:
        yield srv


def _raw(port: int, head: bytes, body_chunks: tuple[bytes, ...] = ()) -> tuple[int, dict[str, str], bytes]:
    """Send a request on a plain socket; the status, headers and body of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(head)
        try:
            for chunk in body_chunks:
                s.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before the body was all sent: that is the point
        data = b""
        while True:
            try:
                part = s.recv(65536)
            except ConnectionResetError:
                break
            if not part:
                break
            data += part
    head_text, _, body = data.partition(b"\r\n\r\n")
    lines = head_text.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def test_size_limit_on_the_wire(server: LiveServer) -> None:
    auth = f"Authorization: Bearer {server.key}\r\n".encode()
    # Declared too large: refused at once, before the body is sent at all.
    status, headers, body = _raw(server.port, b"POST /v1/recall HTTP/1.1\r\nHost: x\r\n" + auth +
                                 b"Content-Type: application/json\r\nContent-Length: 5000000\r\n\r\n")
    assert status == 413 and headers["connection"] == "close"
    assert json.loads(body)["error"]["type"] == "payload_too_large"
    # Chunked (no length): counted as it arrives, refused once past the limit (1 MiB by default).
    chunk = b"a" * 65536
    chunks = (f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n",) * 40 + (b"0\r\n\r\n",)
    status, _, body = _raw(server.port, b"POST /v1/recall HTTP/1.1\r\nHost: x\r\n" + auth +
                           b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", chunks)
    assert status == 413 and json.loads(body)["error"]["field"] == "body"
    # A chunked body within the limit is parsed as usual.
    ok = httpx.post(f"{server.url}/v1/recall", headers={**server.headers(), "content-type": "application/json"},
                    content=iter([b'{"query": "', b"inventory " * 300, b'"}']), timeout=30)
    assert ok.status_code == 200 and ok.json() == {"results": []}


def test_keys_made_and_revoked_by_the_cli_while_serving(server: LiveServer) -> None:
    second = server.create_key("acme")
    other = server.create_key("globex")
    r = httpx.post(f"{server.url}/v1/experiences", headers=server.headers(second), json=EXPERIENCE, timeout=30)
    assert r.status_code == 200
    mine = httpx.get(f"{server.url}/v1/agents/fin-1/episodes", headers=server.headers(), timeout=30).json()
    assert [e["id"] for e in mine["episodes"]] == r.json()["episode_ids"]  # both keys: tenant acme
    theirs = httpx.get(f"{server.url}/v1/agents/fin-1/episodes", headers=server.headers(other), timeout=30).json()
    assert theirs["error"]["type"] == "not_found"  # acme's agent is unknown to globex

    listed = worldgraph(server.data, "keys", "list", env=server.env)
    assert sorted(k["tenant_id"] for k in listed) == ["acme", "acme", "globex"]
    key_id = second.split("_")[1]
    assert worldgraph(server.data, "keys", "revoke", key_id, env=server.env)["revoked_at"]
    r = httpx.get(f"{server.url}/v1/agents/fin-1/episodes", headers=server.headers(second), timeout=30)
    assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
    assert httpx.get(f"{server.url}/v1/agents/fin-1/episodes", headers=server.headers(), timeout=30).status_code == 200


def test_shutdown_hands_a_running_background_update_back(tmp_path: Path) -> None:
    """SIGTERM does not wait for an LLM: a background update still extracting after the close
    budget has its packet handed back as pending (nothing half-merged), and a retry merges it."""
    with FakeOpenAI() as llm:
        llm.queue(Reply(delay=6.0, content=json.dumps(DELTA)))  # still extracting when SIGTERM comes
        srv = LiveServer(tmp_path, env=llm.env())
        with srv:
            r = httpx.post(f"{srv.url}/v1/envs/Kitchen/rounds", headers=srv.headers(), json=FLAGGED, timeout=30)
            packet = r.json()["packet"]
            assert packet["status"] == "pending"
            deadline = time.monotonic() + 30
            while not llm.chat_requests and time.monotonic() < deadline:
                time.sleep(0.05)
            assert llm.chat_requests, "the background worker never called the LLM"
            started = time.monotonic()
            assert srv.stop() == 0
            assert time.monotonic() - started < 5, "SIGTERM waited for the LLM"
        llm.queue(Reply(content=json.dumps(DELTA)))
        with WorldModel.open(srv.data, embedder=HashingEmbedder(384)) as wm:
            scene = wm.store.get_scene("acme", packet["id"])
            assert scene is not None and scene["status"] == "pending", scene
            assert wm.world_graph("acme", "Kitchen")["nodes"] == []
            os.environ.update(llm.env())
            try:
                assert [r.ok for r in wm.retry_updates("acme", stale_after=None)] == [True]
            finally:
                for key in llm.env():
                    os.environ.pop(key, None)
            assert sorted(n["name"] for n in wm.world_graph("acme", "Kitchen")["nodes"]) == ["brass key",
                                                                                            "kitchen table"]


def _children(pid: int) -> list[int]:
    return [int(p.parent.name) for p in Path("/proc").glob("[0-9]*/stat")
            if p.exists() and p.read_text().rsplit(")", 1)[1].split()[1] == str(pid)]


def test_workers_share_the_port_and_the_data_folder(tmp_path: Path) -> None:
    """``serve --workers 2``: two processes answer on one port over one data folder; what one
    acknowledges the other recalls, and a SIGTERM to the parent stops both gracefully."""
    with LiveServer(tmp_path, serve_args=("--workers", "2")) as srv:
        assert srv.proc is not None
        deadline = time.monotonic() + 60
        while len(_children(srv.proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        workers = _children(srv.proc.pid)
        assert len(workers) == 2
        with httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30) as client:
            ids = []
            for n in range(12):  # new connections: the kernel spreads them over both workers
                r = httpx.post(f"{srv.url}/v1/experiences", headers=srv.headers(), timeout=30,
                               json={"experiences": [{**EXPERIENCE, "task_description": f"Reconcile SKU-{n} inventory"}]})
                assert r.status_code == 200, r.text
                ids += r.json()["episode_ids"]
            for n in range(12):
                found = httpx.post(f"{srv.url}/v1/recall", headers=srv.headers(), timeout=30,
                                   json={"query": f"Reconcile SKU-{n} inventory", "limit": 12}).json()["results"]
                assert {res["episode_id"] for res in found} >= set(ids[n:n + 1])
            assert client.get("/health").status_code == 200
        assert srv.stop() == 0
        assert not any(Path(f"/proc/{w}").exists() for w in workers)  # reaped by the parent
    with WorldModel.open(srv.data, embedder=HashingEmbedder(), read_only=True) as wm:
        assert set(wm.store.get_episodes("acme", ids)) == set(ids)


def test_workers_must_be_a_small_positive_number(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "worldgraph.cli", "--data", str(tmp_path / "d"), "serve",
                          "--workers", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "--workers" in out.stderr and "Traceback" not in out.stderr
