"""The command line answers fast because it imports the heavy libraries only where a command needs
them: ``worldgraph --help`` loads none of them (nor pydantic: the parser reads its defaults from
config/environment.py alone), and ``worldgraph stats`` reads the store alone (no index, no
embedder, no server libraries). Checked on the modules a new process has loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HEAVY = ("lancedb", "lance", "pyarrow", "numpy", "onnxruntime", "tokenizers", "fastapi", "starlette", "uvicorn",
         "mcp", "neo4j", "ladybug", "openai", "httpx", "prometheus_client", "pydantic", "pydantic_settings",
         "jsonschema", "tqdm", "importlib.metadata", "worldgraph.service", "worldgraph.memory", "worldgraph.kg")
STATS_HEAVY = ("lancedb", "lance", "pyarrow", "numpy", "onnxruntime", "tokenizers", "fastapi", "uvicorn", "mcp",
               "neo4j", "ladybug", "openai", "worldgraph.service", "worldgraph.memory.index",
               "worldgraph.memory.embeddings", "worldgraph.memory.recall")

PROBE = """
import json, sys
from worldgraph.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def loaded(args: list[str], cwd: Path) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORLDGRAPH_", "OPENAI_"))}
    out = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=300)
    return set(json.loads(out.stderr.strip().splitlines()[-1]))


def heavy_in(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_help_imports_nothing_heavy(tmp_path: Path) -> None:
    modules = loaded(["--help"], tmp_path)
    assert "worldgraph.cli.main" in modules and "argparse" in modules  # the probe ran the parser
    assert heavy_in(modules, HEAVY) == []


def test_stats_reads_the_store_alone(tmp_path: Path) -> None:
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps({"agent_id": "a", "agent_role": "r", "task_type": "x", "task_description": "one",
                                "outcome": "success"}) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORLDGRAPH_", "OPENAI_"))}
    subprocess.run([sys.executable, "-m", "worldgraph.cli", "--data", "data", "record", str(runs)], cwd=tmp_path,
                   env=env, check=True, capture_output=True, timeout=300)
    modules = loaded(["--data", "data", "stats"], tmp_path)
    assert "worldgraph.kg.embedded.store" in modules  # it did read the store
    assert heavy_in(modules, STATS_HEAVY) == []
