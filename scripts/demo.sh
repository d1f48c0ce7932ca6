#!/usr/bin/env bash
# The README's main job: run Strata's small trained model (models/strata-moe-tiny: a qwen3moe
# with 64 experts per layer trained by tools/train/ on the King James Bible and fortunes, 106 MiB
# at Q8_0, committed) with a RAM budget smaller than the model, so the routed experts stream from
# disk through the expert cache; the run ends with the cache figures.
set -euo pipefail
STRATA=${1:-build/bin/strata}
MODEL=${MODEL:-models/strata-moe-tiny/model.gguf}
BUDGET=${BUDGET:-64M}
if [ ! -f "$MODEL" ]; then
  echo "demo: $MODEL is missing (it is committed with the repository; tools/train/README.md retrains it)" >&2
  exit 1
fi
size_mib=$(( $(stat -c %s "$MODEL") / 1048576 ))
"$STRATA" inspect "$MODEL" --ram-budget "$BUDGET"
for prompt in "And God said unto Moses," "The meaning of life is"; do
  echo
  echo "== strata run with --ram-budget $BUDGET (model: $size_mib MiB, trained; see models/strata-moe-tiny/README.md): $prompt =="
  "$STRATA" run -m "$MODEL" -p "$prompt" -n 48 --temp 0.6 --seed 1 -c 256 --ram-budget "$BUDGET"
done
