"""The built wheel installs with the framework extras in a fresh virtualenv and each adapter
imports from it (what `pip install 'worldgraph[langgraph]'` gives a user), while the core install
imports no framework. One venv with every extra, from pip's cache (the constraints CI tests with)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = "langchain,langgraph,llamaindex,openai-agents"
ADAPTERS = ["langchain", "langgraph", "llama_index", "openai_agents"]


def sh(*args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=1500,
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(sys.version_info < (3, 11), reason="langchain-core 1.8 needs Python 3.11")
def test_wheel_with_extras_imports_each_adapter(tmp_path: Path) -> None:
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(ROOT))
    [wheel] = (tmp_path / "dist").glob("worldgraph-*.whl")
    venv = tmp_path / "venv"
    sh(sys.executable, "-m", "venv", str(venv))
    python = str(venv / "bin" / "python")
    sh(python, "-m", "pip", "install", "-q", f"{wheel}[{EXTRAS}]", "-c", str(ROOT / "scripts" / "frameworks-constraints.txt"))
    code = ("import importlib, sys\n"
            "import worldgraph.integrations\n"
            "assert not any(m.split('.')[0] in ('langchain_core', 'langgraph', 'llama_index', 'agents') for m in sys.modules)\n"
            f"for name in {ADAPTERS!r}:\n"
            "    importlib.import_module('worldgraph.integrations.' + name)\n"
            "from worldgraph.integrations.langgraph import WorldgraphStore\n"
            "from langgraph.store.base import BaseStore\n"
            "assert issubclass(WorldgraphStore, BaseStore)\n"
            "print('ok', worldgraph.integrations.__file__)\n")
    out = sh(python, "-c", code, cwd=tmp_path)  # not the checkout: the installed wheel
    assert out.startswith("ok ") and str(venv) in out
