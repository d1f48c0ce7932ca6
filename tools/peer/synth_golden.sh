#!/usr/bin/env bash
# Writes tests/data/synth_peer/NAME.logits.f32: llama.cpp's logits for the last prompt token of
# each synthetic model in tests/data/synth_peer/manifest.txt (strata synth is deterministic in
# its arguments, so the test regenerates the same file and compares Strata's logits).
# Needs the peer (shared/peer/build-llbench.sh) and tools/llama_tensor_dump/build.sh, same PEER_DIR.
# Not part of the build or CI. Usage: tools/peer/synth_golden.sh [STRATA_BINARY]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
strata=${1:-$here/build/bin/strata}
PEER_DIR=${PEER_DIR:-${TMPDIR:-/tmp}/strata-peer}
dump=$PEER_DIR/llama_tensor_dump
data=$here/tests/data/synth_peer
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -x "$dump" ] || { echo "no $dump: run tools/llama_tensor_dump/build.sh" >&2; exit 1; }
grep -v '^#' "$data/manifest.txt" | while IFS='|' read -r name args toks; do
  name=$(echo "$name" | xargs)
  # shellcheck disable=SC2086
  "$strata" synth $args --out "$work/$name.gguf" > /dev/null
  ids=$(echo $toks | tr ' ' ',')
  "$dump" --model "$work/$name.gguf" --tokens "$ids" --out "$work/$name" --filter result_output > "$work/$name.log" 2>&1
  n=$(echo $toks | wc -w)
  vocab=$(( $(stat -c %s "$work/$name/result_output.f32") / 4 / n ))
  tail -c $(( vocab * 4 )) "$work/$name/result_output.f32" > "$data/$name.logits.f32"
  echo "$name: $vocab logits"
done
