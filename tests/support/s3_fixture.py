"""A local S3-compatible server for the tests of the index on an object store: moto in server mode
(``moto[server]``, a dev dependency), in its own process on a free port of 127.0.0.1.

``MotoS3`` starts and stops one (``stop()`` / ``start()`` again on the same port: an outage and a
recovery); the ``s3_server`` fixture is one per test session, ``s3_env`` gives a test a fresh
bucket and sets the standard ``AWS_*`` variables for it (and for the processes it starts).
These tests never skip: moto comes with ``pip install -e '.[dev]'`` (scripts/setup.sh, .ci/run).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoS3:
    """``python -m moto.server -p PORT`` (what the ``moto_server`` script runs)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> MotoS3:
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {self.proc.returncode} (port {self.port} taken?)")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto server did not listen on {self.url} within {timeout:.0f} s")

    def stop(self) -> None:
        """Kill the server (its buckets are in its memory: they go with it)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def create_bucket(self, name: str | None = None) -> str:
        bucket = name or f"wg-{uuid.uuid4().hex[:12]}"
        req = urllib.request.Request(f"{self.url}/{bucket}", method="PUT")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200, resp.status
        return bucket

    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.url, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoS3]:
    server = MotoS3().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3_server: MotoS3, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A fresh bucket on the session's server, the AWS_* variables set for it; returns
    ``{"uri": "s3://bucket/index", "env": {...}, "server": MotoS3}``."""
    bucket = s3_server.create_bucket()
    env = s3_server.env()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return {"uri": f"s3://{bucket}/index", "env": env, "server": s3_server, "bucket": bucket}
