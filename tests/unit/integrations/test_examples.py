"""Each framework's example runs as a reader runs it (a new process, the default embedder, no
network) and its agent loop records and recalls through worldgraph."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.integrations.conftest import require

require("langmem")
require("llama_index.core")
require("agents")

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def run(name: str) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=240,
                          cwd=EXAMPLES.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_langgraph_agent_with_langmem_tools() -> None:
    out = run("langgraph_agent.py")
    assert 'search_memory returned: [{"namespace":["memories","user-1"]' in out
    assert "window seat on long flights" in out.split("search_memory returned:")[1].splitlines()[0]
    assert "stored in worldgraph: ('memories', 'user-1') 'The user prefers a window seat" in out


@pytest.mark.slow
def test_langchain_chat() -> None:
    out = run("langchain_chat.py")
    assert "recalled on tuesday: My dog is called Biscuit." in out
    assert "monday's history: ['human: My dog is called Biscuit.', 'ai: Noted: your dog is called Biscuit.']" in out


@pytest.mark.slow
def test_llama_index_memory() -> None:
    out = run("llama_index_memory.py")
    assert "user: My sister Ana lives in Lisbon" in out.split("memory block:")[1]
    assert "retrieved: 'My sister Ana lives in Lisbon and teaches maths.'" in out


@pytest.mark.slow
def test_openai_agents_memory() -> None:
    out = run("openai_agents_memory.py")
    assert out.startswith("agent: (from memory) [{") and "My locker code is 4417." in out.splitlines()[0]
    assert "monday's session: ['user', 'function_call', 'function_call_output', 'assistant']" in out
