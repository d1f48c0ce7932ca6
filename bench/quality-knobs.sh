#!/usr/bin/env bash
# Issue 37's speed side: the lossy knobs (--route-cache, --moe-min-mass, --moe-k, --miss-model,
# --pp-model) on the synthetic Qwen3-30B-A3B-shaped Q4_K file (~16 GiB) under a memory cgroup (page
# cache included), each against the knobs-off run of the same round. Random weights: speed and bytes
# only (the KL of each setting is measured on the trained model: README, "Fewer experts for speed").
# A benchmark, not a test: figures only.
#
#   bench/quality-knobs.sh                        # generates the files on first use
#   LIMIT=6G ROUNDS=2 PP=32 TG=64 bench/quality-knobs.sh
#   SETTINGS='off|--moe-k 4' bench/quality-knobs.sh
#
# Env: STRATA, OUT (folder for the files), MODEL, STANDIN (the low-bit copy: strata quantize
# --experts-only --type q2_K MODEL STANDIN, made on first use), LIMIT (cgroup limit, default 6G),
# PP / TG (prompt / generated tokens of the decode runs), PP_LONG (the prompt of the --pp-model runs),
# ROUNDS (each round runs every setting once, knobs off first), SETTINGS ('|'-separated).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
STRATA=${STRATA:-$here/build/bin/strata}
OUT=${OUT:-/var/tmp/strata-bench}
MODEL=${MODEL:-$OUT/qwen3-30b-a3b-synth-q4_K.gguf}
STANDIN=${STANDIN:-$OUT/qwen3-30b-a3b-synth-q2_K-experts.gguf}
LIMIT=${LIMIT:-6G}
PP=${PP:-32}; TG=${TG:-64}; PP_LONG=${PP_LONG:-512}
ROUNDS=${ROUNDS:-2}
CG=${CG:-$here/../shared/peer/cgroup-run.sh}
DEFAULT_SETTINGS="off|--route-cache 6,16|--route-cache 4,16|--route-cache 2,16|--moe-min-mass 0.9|--moe-min-mass 0.8|--moe-min-mass 0.6"
DEFAULT_SETTINGS+="|--moe-k 6|--moe-k 4|--miss-model STANDIN|--route-cache 4,16 --miss-model STANDIN"
SETTINGS=${SETTINGS:-$DEFAULT_SETTINGS}
LOG=$OUT/quality-knobs.log
mkdir -p "$OUT"
: > "$LOG"

[ -x "$STRATA" ] || { echo "build Strata first (make build)"; exit 1; }
[ -f "$MODEL" ] || "$STRATA" synth --preset qwen3-30b-a3b --out "$MODEL"
[ -f "$STANDIN" ] || "$STRATA" quantize --experts-only --type q2_K "$MODEL" "$STANDIN"

drop_cache() { sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
budget=$(( $(numfmt --from=iec "$LIMIT") * 15 / 16 ))  # room for the page cache of the dense weights' reads

results=()
bench() {  # round, name, pp, tg, extra args...
  local round=$1 name=$2 pp=$3 tg=$4; shift 4
  local args=(bench -m "$MODEL" -t 2 -c $((pp + tg + 16)) -p "$pp" -n "$tg" --tg-input random --no-warm-start
              --ram-budget "$budget" --json)
  local a; for a in "$@"; do args+=("${a//STANDIN/$STANDIN}"); done
  drop_cache
  echo "== round $round: $name: strata ${args[*]}" | tee -a "$LOG" >&2
  local out
  if out=$("$CG" "$LIMIT" -- "$STRATA" "${args[@]}" 2>>"$LOG"); then
    results+=("$round|$name|$pp|$tg|$(grep '^{' <<<"$out" | tail -1)")
  else
    results+=("$round|$name|$pp|$tg|FAILED")
  fi
}

for round in $(seq 1 "$ROUNDS"); do
  IFS='|' read -ra list <<<"$SETTINGS"
  for s in "${list[@]}"; do
    # shellcheck disable=SC2086
    if [ "$s" = off ]; then bench "$round" off "$PP" "$TG"; else bench "$round" "$s" "$PP" "$TG" $s; fi
  done
  bench "$round" "off (long prompt)" "$PP_LONG" "$TG"
  bench "$round" "--pp-model STANDIN" "$PP_LONG" "$TG" --pp-model STANDIN --pp-min-tokens "$PP_LONG"
done

echo
echo "== $LIMIT cgroup, budget $(numfmt --to=iec "$budget"), model $(numfmt --to=iec "$(stat -c %s "$MODEL")"), 2 threads; log: $LOG"
python3 - "${results[@]}" <<'PY'
import json, statistics, sys
rows = {}
for r in sys.argv[1:]:
    rnd, name, pp, tg, payload = r.split("|", 4)
    if not payload.startswith("{"):
        print(f"round {rnd} {name}: FAILED"); continue
    j = json.loads(payload)
    p, t = j.get(f"pp{pp}", {}), j.get(f"tg{tg}", {})
    rows.setdefault(name, []).append({"rnd": rnd, "pp": p.get("tokens_per_s", 0), "tg": t.get("tokens_per_s", 0),
        "bpt": t.get("bytes_per_token", 0), "hit": t.get("hit_rate", 0), "pp_bpt": p.get("bytes_per_token", 0),
        "disk": j.get("disk_bw", 0)})
def base_for(name):
    return "off (long prompt)" if "pp-model" in name or "long" in name else "off"
print(f"{'setting':40} {'pp tok/s':>9} {'tg tok/s':>9} {'x off':>6} {'tg MiB/tok':>10} {'hit':>5} {'pp MiB/tok':>10} {'pp x off':>8}")
for name, rs in rows.items():
    base = {b["rnd"]: b for b in rows.get(base_for(name), [])}
    ratios = [r["tg"] / base[r["rnd"]]["tg"] for r in rs if r["rnd"] in base and base[r["rnd"]]["tg"] > 0]
    pratios = [r["pp"] / base[r["rnd"]]["pp"] for r in rs if r["rnd"] in base and base[r["rnd"]]["pp"] > 0]
    med = lambda k: statistics.median(r[k] for r in rs)
    print(f"{name:40} {med('pp'):9.2f} {med('tg'):9.2f} {statistics.median(ratios) if ratios else 0:6.2f} "
          f"{med('bpt')/2**20:10.1f} {med('hit')*100:4.0f}% {med('pp_bpt')/2**20:10.1f} {statistics.median(pratios) if pratios else 0:8.2f}")
disks = [r["disk"] for rs in rows.values() for r in rs if r["disk"]]
if disks: print(f"disk probe: {statistics.median(disks)/1e9:.2f} GB/s (median of the runs)")
PY
