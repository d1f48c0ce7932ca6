#!/usr/bin/env bash
# Builds llama_vec_dot_check against this checkout's libstrata.a (build/ must be built) and the
# peer's CPU kernels, loaded at run time (install them with ../../../shared/peer/setup.sh, same
# PEER_DIR). Not part of the CMake build or CI: a by-hand check of the kernels against llama.cpp.
#   tools/llama_vec_dot_check/build.sh && PEER_DIR=... $OUT all && $OUT all time
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:-$root/build/llama_vec_dot_check}
g++ -O2 -std=c++20 -I"$root/src" "$here/llama_vec_dot_check.cpp" "$root/build/src/libstrata.a" -lfmt -ldl -lpthread -o "$out"
echo "built $out"
