#!/bin/sh
# Installs the npm clients (openai; ai + @ai-sdk/openai-compatible + zod; @anthropic-ai/sdk; ollama; @openai/agents;
# puppeteer-core, which drives the system's chromium and downloads no browser) for the end-to-end server tests
# (tests/server/openai_e2e); the GoogleTests ServerOpenAiE2E.*, ServerWireE2E.* and WebUiBrowser.* run them when node_modules exists.
set -eu
cd "$(dirname "$0")/../tests/server/openai_e2e"
command -v npm >/dev/null 2>&1 || { echo "setup-npm.sh: npm is not installed (apt-get install nodejs npm)" >&2; exit 1; }
PUPPETEER_SKIP_DOWNLOAD=1 timeout 300 npm install --no-audit --no-fund
