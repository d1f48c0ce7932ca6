#!/bin/sh
# Installs the official openai npm client for the end-to-end server test
# (tests/server/openai_e2e); the GoogleTest ServerOpenAiE2E runs it when node_modules exists.
set -eu
cd "$(dirname "$0")/../tests/server/openai_e2e"
command -v npm >/dev/null 2>&1 || { echo "setup-npm.sh: npm is not installed (apt-get install nodejs npm)" >&2; exit 1; }
timeout 300 npm install --no-audit --no-fund
