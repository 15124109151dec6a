#!/usr/bin/env bash
# Sets up .venv and runs the whole test suite. Neo4j tests use NEO4J_URI when it is set, else
# start the local Neo4j launcher (Java 17 + Maven) themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
