#!/usr/bin/env bash
# The grammar mask cost per token on the Qwen3 vocabulary (151,669 tokens) next to one decode step
# of the demo model (models/strata-moe-tiny, in RAM), in one run on the same machine.
# Usage: bench/grammar-vs-decode.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
"$build/bin/bench_grammar" ../shared/fixtures/tokenizer-qwen3/vocab.gguf
echo
echo "== demo model decode step, one thread (strata bench; ms per step = 1000 / tg t/s) =="
"$build/bin/strata" bench -m models/strata-moe-tiny/model.gguf -p 1 -n 257 -t 1 -c 512 --disk-probe 0
