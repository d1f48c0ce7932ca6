#!/usr/bin/env bash
# Builds llama_quantize against the peer's prebuilt libllama (see ../../../shared/peer/README.md and
# build-llbench.sh there, which fetches the npm packages and headers into $PEER_DIR/llbench).
# Not part of the CMake build or CI: it writes quantized variants of the trained model for `strata perplexity --kl-divergence`.
set -euo pipefail
PEER_DIR=${PEER_DIR:-${TMPDIR:-/tmp}/strata-peer}
here=$(cd "$(dirname "$0")" && pwd)
inc=$PEER_DIR/llbench/include
lib=$PEER_DIR/llbench/nlc/package/bins/linux-x64
if [ ! -f "$inc/llama.h" ] || [ ! -d "$lib" ]; then
  echo "no peer headers/libraries under $PEER_DIR/llbench: run shared/peer/build-llbench.sh first (same PEER_DIR)" >&2
  exit 1
fi
out=${OUT:-$PEER_DIR/llama_quantize}
g++ -O2 -std=c++17 -I"$inc" "$here/llama_quantize.cpp" -o "$out" -L"$lib" -l:libllama.v0.5.0.so -l:libggml.v0.5.0.so \
  -l:libggml-base.so -Wl,-rpath,"$lib"
echo "built $out"
