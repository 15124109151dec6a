"""``worldgraph serve`` stops within 5 s of SIGTERM even when its Neo4j goes away at the same
moment: requests blocked on the store fail, the stores are closed or left to the exit, and the
process does not sit at uvicorn's "Waiting for background tasks". Neo4j is reached through a TCP
gate (tests/support/tcp_gate.py) that the test closes: live connections are cut, new ones refused."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from tests.support.live_server import LiveServer
from tests.support.tcp_gate import TcpGate

pytestmark = pytest.mark.neo4j

RUN = {"agent_id": "a", "task_type": "t", "task_description": "open the vault", "outcome": "success"}


def test_serve_stops_within_5_s_when_neo4j_goes_away_with_the_sigterm(
        tmp_path: Path, neo4j_server: dict[str, Any]) -> None:
    target = urlparse(neo4j_server["uri"])
    gate = TcpGate((target.hostname or "127.0.0.1", target.port or 7687)).open()
    env = {"NEO4J_URI": f"bolt://127.0.0.1:{gate.port}", "NEO4J_USER": neo4j_server["user"],
           "NEO4J_PASSWORD": neo4j_server["password"]}
    stop = threading.Event()
    answers: list[int | str] = []
    try:
        with LiveServer(tmp_path, tenant=f"sd-{time.monotonic_ns()}", env=env, graph="neo4j") as srv:
            assert srv.proc is not None

            def client() -> None:  # requests in flight when the store goes away
                with httpx.Client(timeout=60) as http:
                    while not stop.is_set():
                        try:
                            r = http.post(f"{srv.url}/v1/experiences", headers=srv.headers(),
                                          json={"experiences": [RUN] * 5})
                            answers.append(r.status_code)
                        except httpx.HTTPError as exc:
                            answers.append(type(exc).__name__)
                            return

            clients = [threading.Thread(target=client, daemon=True) for _ in range(6)]
            for c in clients:
                c.start()
            deadline = time.monotonic() + 60
            while answers.count(200) < 6 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert answers.count(200) >= 6, answers  # the server works before the outage
            gate.close()  # Neo4j goes away ...
            started = time.monotonic()
            code = srv.stop(timeout=60)  # ... with the SIGTERM
            took = time.monotonic() - started
            log = srv.log.read_text(errors="replace")
            assert took < 5.0, f"serve took {took:.1f} s to stop after SIGTERM\n{log[-3000:]}"
            assert code == 0, log[-3000:]
            print(f"\nserve stopped {took:.2f} s after SIGTERM with Neo4j gone")
    finally:
        stop.set()
        gate.close()
