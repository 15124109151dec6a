"""A process that never asks an LLM does not import the OpenAI client (~1 s of a cold start
under load: bench/README.md "Cold start"): open, record, recall and close without it, and the
client still there when an LLM is configured (the extractor, recall's sub-queries)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import sys, tempfile
from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder
with WorldModel.open(tempfile.mkdtemp(), embedder=HashingEmbedder(64)) as wm:
    wm.record_experiences("t", [{"agent_id": "a", "agent_role": "ops", "task_type": "restart",
                                 "task_description": "restart the queue", "outcome": "success"}])
    assert wm.recall_experiences("t", "ops", "restart the queue", options={"min_similarity": 0.0})
print("openai" in sys.modules)
from worldgraph.world.extractor import DeltaExtractor
from worldgraph.memory.recall import rewrite
print(rewrite._client(None, "k", 1.0).__class__.__name__, "openai" in sys.modules)
"""


def test_no_openai_import_without_an_llm() -> None:
    root = Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "WORLDGRAPH_LLM"))}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=root, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["False", "OpenAI True"]
