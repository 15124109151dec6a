"""A real ``worldgraph serve`` in a subprocess, on a free loopback port, for tests that need the
network path (uvicorn, sockets, signals): ``with LiveServer(tmp_path) as srv: srv.url, srv.key``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

WORLDGRAPH = [sys.executable, "-m", "worldgraph.cli"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worldgraph(data: Path, *args: str, env: dict[str, str] | None = None, graph: str = "embedded") -> Any:
    """Run one ``worldgraph ... --json`` command; its parsed output."""
    out = subprocess.run([*WORLDGRAPH, "--data", str(data), "--graph", graph, *args, "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


class LiveServer:
    def __init__(self, tmp: Path, tenant: str = "acme", env: dict[str, str] | None = None,
                 graph: str = "embedded", serve_args: tuple[str, ...] = ()) -> None:
        self.data = tmp / "data"
        self.serve_args = serve_args
        self.env = {**os.environ, "WORLDGRAPH_EMBEDDING_PROVIDER": "hashing", **(env or {})}
        self.graph = graph
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "serve.log"
        self.tenant = tenant
        self.key = ""
        self.proc: subprocess.Popen[bytes] | None = None

    def create_key(self, tenant: str) -> str:
        return str(worldgraph(self.data, "keys", "create", "--tenant", tenant, env=self.env, graph=self.graph)["key"])

    def __enter__(self) -> LiveServer:
        self.key = self.create_key(self.tenant)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([*WORLDGRAPH, "--data", str(self.data), "--graph", self.graph, "serve",
                                          "--port", str(self.port), *self.serve_args], env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worldgraph serve exited: {self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"worldgraph serve did not answer in 90 s: {self.log.read_text()}")

    def headers(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.key}"}

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then wait: the exit code of a graceful shutdown."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
