#!/usr/bin/env bash
# The README's main job: inspect (and, as the engine grows, run) the small default model.
set -euo pipefail
STRATA=${1:-build/bin/strata}
MODEL=models/demo-qwen3moe.gguf
mkdir -p models
if [ ! -f "$MODEL" ]; then
  "$STRATA" synth --preset demo --out "$MODEL"
fi
"$STRATA" inspect "$MODEL" --ram-budget 8M
