#!/usr/bin/env bash
# The README's main job: generate the small default model (a random-weight Qwen3-MoE-shaped
# GGUF, 119 MiB) on first use, then run it with a RAM budget smaller than the model, so the
# routed experts stream from disk through the expert cache; the run ends with the cache figures.
set -euo pipefail
STRATA=${1:-build/bin/strata}
MODEL=models/demo-qwen3moe.gguf
mkdir -p models
if [ ! -f "$MODEL" ]; then
  "$STRATA" synth --preset demo --out "$MODEL"
fi
"$STRATA" inspect "$MODEL" --ram-budget 96M
echo
echo "== strata run with --ram-budget 96M (model: 119 MiB; random weights, so the text is noise) =="
"$STRATA" run -m "$MODEL" -p "The quick brown fox jumps over the lazy dog." -n 48 --temp 0.7 --seed 1 -c 512 --ram-budget 96M
