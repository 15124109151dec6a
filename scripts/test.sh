#!/usr/bin/env bash
# Sets up .venv and runs the whole test suite. Neo4j tests use NEO4J_URI when it is set, else
# start the local Neo4j launcher (Java 17 + Maven) themselves, and hand its address to every
# process they start. The world-page tests need headless Chromium: installed here when missing
# and this user can (root or passwordless sudo, with apt-get), else skipped (they fail under CI=true).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 \
    && ! command -v google-chrome >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"  # a CI runner's passwordless sudo
  fi
  if { [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; } && command -v apt-get >/dev/null 2>&1; then
    echo "--- installing headless Chromium for the world-page tests (apt-get install chromium)"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "note: Chromium not found; the world-page browser tests skip (to run them: sudo apt-get install -y chromium)"
  fi
fi

exec .venv/bin/python -m pytest -q "$@"
