#!/usr/bin/env bash
# The expert tiers VRAM <- RAM <- SSD (issue 36) on one GGUF: `strata bench --gpu vulkan` with the same
# --ram-budget and --vram-experts, the tiers exclusive, inclusive, and no VRAM expert cache; prints each run's
# decode speed, SSD bytes read per token, the share of expert uses computed from VRAM and the uploads per
# token, and the exclusive tiers' SSD bytes against the inclusive ones'. A benchmark, not a test: on
# lavapipe (a CPU device) the bytes are real and the speeds say nothing about a GPU.
#
#   MODEL=models/strata-moe-tiny/model.gguf RAM_BUDGET=64M VRAM_EXPERTS=24M bench/vram-tiers.sh
#
# Env: MODEL (required); RAM_BUDGET (default 64M); VRAM_EXPERTS (default 24M); PP, TG (default 16, 96); CTX (PP + TG + 16);
#   THREADS (default 2); GPU (default vulkan); STRATA (default build/bin/strata); EXTRA (more options).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
STRATA=${STRATA:-$here/build/bin/strata}
MODEL=${MODEL:?MODEL=file.gguf}
RAM_BUDGET=${RAM_BUDGET:-64M}; VRAM_EXPERTS=${VRAM_EXPERTS:-24M}; PP=${PP:-16}; TG=${TG:-96}; THREADS=${THREADS:-2}; GPU=${GPU:-vulkan}
CTX=${CTX:-$((PP + TG + 16))}
[ -x "$STRATA" ] || { echo "build Strata first (or STRATA=path)"; exit 1; }
declare -A ssd
printf '%-10s %9s %14s %10s %13s\n' tiers tok/s "SSD B/token" "VRAM uses" "uploads/tok"
for mode in exclusive inclusive none; do
  if [ "$mode" = none ]; then vx=(--vram-experts off); else vx=(--vram-experts "$VRAM_EXPERTS" --tiers "$mode"); fi
  out=$("$STRATA" bench -m "$MODEL" -t "$THREADS" -c "$CTX" -p "$PP" -n "$TG" --gpu "$GPU" --ram-budget "$RAM_BUDGET" --no-warm-start \
        --disk-probe 0 --json "${vx[@]}" ${EXTRA:-} 2>/dev/null | tail -1)
  read -r tps bpt hits ups < <(python3 -c '
import json,sys
j=json.loads(sys.argv[1]); tg=[k for k in j if k.startswith("tg")][0]; p=j[tg]; x=(p.get("gpu") or {}).get("experts") or {}
print("%.2f %.0f %.3f %.3f" % (p["tokens_per_s"], p["bytes_per_token"], x.get("vram_hit_rate", 0), x.get("uploads_per_token", 0)))' "$out")
  ssd[$mode]=$bpt
  printf '%-10s %9s %14s %10s %13s\n' "$mode" "$tps" "$bpt" "$hits" "$ups"
done
python3 -c 'import sys; e,i=float(sys.argv[1]),float(sys.argv[2]); print("exclusive reads %.1f%% fewer SSD bytes per token than inclusive" % (100*(1-e/i) if i>0 else 0))' \
  "${ssd[exclusive]}" "${ssd[inclusive]}"
