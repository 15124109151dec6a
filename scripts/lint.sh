#!/usr/bin/env bash
# Type-check the package (mypy --strict, settings in pyproject.toml) and lint the code (ruff).
# Run by .ci/run before the tests; needs the dev extras (bash scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "--- ruff check worldgraph tests bench"
.venv/bin/ruff check worldgraph tests bench
echo "--- mypy (strict, the worldgraph package)"
.venv/bin/python -m mypy
