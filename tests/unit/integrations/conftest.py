"""Fixtures of the framework adapters' tests: a model on a temporary folder and a fresh tenant.
A framework that is not installed skips its tests here, and fails them under CI (CI=true), where
scripts/setup.sh installs every extra."""

from __future__ import annotations

import importlib.util
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder


def require(module: str) -> None:
    """Skip the calling test module when ``module`` is not installed, and fail it under CI."""
    if importlib.util.find_spec(module.split(".")[0]) is None:
        if os.environ.get("CI") == "true":
            raise RuntimeError(f"{module} is not installed: scripts/setup.sh installs worldgraph[frameworks]")
        pytest.skip(f"{module} is not installed (pip install 'worldgraph[frameworks]')", allow_module_level=True)


@pytest.fixture
def wm(tmp_path: Path) -> Iterator[WorldModel]:
    model = WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(256))
    yield model
    model.close()


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
