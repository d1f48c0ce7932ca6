#!/usr/bin/env bash
# Strata vs llama.cpp (../shared/peer) on the same synthetic Qwen3-30B-A3B-shaped Q4_K file
# (~16 GiB), or another type mix (RECIPE=iq2_xxs: ~8 GiB of 2-bit experts), in RAM and under a
# memory cgroup (page cache included). Prints both results and their ratios. A benchmark, not a
# test: figures only.
#
#   bench/larger-than-ram.sh                 # everything (generates the model on first use)
#   LIMITS="6G" PP=128 TG=32 bench/larger-than-ram.sh
#   RECIPE=iq2_xxs LIMITS=4G TG_INPUT=random bench/larger-than-ram.sh
#
# Env: STRATA (binary), OUT (folder for the model), MODEL (another GGUF: any architecture),
# RECIPE (strata synth --recipe), LIMITS (cgroup limits, default "6G 20G"),
# PP / TG (prompt / generated tokens), PEER_PP / PEER_TG (for llama.cpp under a limit, where it
# crawls), SKIP_PEER=1, SKIP_RAM=1, TG_INPUT (strata bench --tg-input: greedy by default, the
# same work as the peer's llbench; random gives varied routing, as real text does).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
STRATA=${STRATA:-$here/build/bin/strata}
OUT=${OUT:-/var/tmp/strata-bench}
RECIPE=${RECIPE:-}
MODEL=${MODEL:-$OUT/qwen3-30b-a3b-synth-${RECIPE:-q4_K}.gguf}
LIMITS=${LIMITS:-"6G 20G"}
PP=${PP:-512}; TG=${TG:-128}
PEER_PP=${PEER_PP:-32}; PEER_TG=${PEER_TG:-8}
TG_INPUT=${TG_INPUT:-greedy}
SHARED=${SHARED:-$here/../shared}
PEER_DIR=${PEER_DIR:-${TMPDIR:-/tmp}/strata-peer}
CG="$SHARED/peer/cgroup-run.sh"
LOG=$OUT/larger-than-ram.log
mkdir -p "$OUT"
: > "$LOG"

[ -x "$STRATA" ] || { echo "build Strata first (make build)"; exit 1; }
if [ ! -f "$MODEL" ]; then
  echo "== generating $MODEL"
  "$STRATA" synth --preset qwen3-30b-a3b ${RECIPE:+--recipe "$RECIPE"} --out "$MODEL"
fi
if [ "${SKIP_PEER:-0}" != 1 ] && [ ! -x "$PEER_DIR/llbench/llbench" ]; then
  PEER_DIR=$PEER_DIR "$SHARED/peer/setup.sh" >/dev/null
  PEER_DIR=$PEER_DIR "$SHARED/peer/build-llbench.sh" >/dev/null
fi

drop_cache() { dd if="$MODEL" iflag=nocache count=0 status=none 2>/dev/null || true; sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
# budget for Strata under a limit: the limit minus room for the page cache of dense weights' reads
budget_for() { local b; b=$(numfmt --from=iec "$1"); echo $(( b - b / 16 )); }

results=()
run() {  # name, command...
  local name=$1; shift
  drop_cache
  echo "== $name: $*" | tee -a "$LOG"
  local t0 out rc
  t0=$(date +%s)
  set +e
  out=$("$@" 2>>"$LOG")
  rc=$?
  set -e
  echo "$out" >> "$LOG"
  local json
  json=$(echo "$out" | grep '^{' | tail -1 || true)
  if [ $rc -ne 0 ] || [ -z "$json" ]; then
    results+=("$name|FAILED (exit $rc, $(( $(date +%s) - t0 )) s; killed by the memory limit if 137)")
  else
    results+=("$name|$json")
  fi
}

strata_bench() {  # limit-or-empty
  local args=(bench -m "$MODEL" -t 2 -c $((PP + TG + 16)) -p "$PP" -n "$TG" --tg-input "$TG_INPUT" --json)
  if [ -n "$1" ]; then args+=(--ram-budget "$(budget_for "$1")"); fi
  echo "${args[@]}"
}

if [ "${SKIP_RAM:-0}" != 1 ]; then
  run "strata in RAM" "$STRATA" $(strata_bench "")
  [ "${SKIP_PEER:-0}" = 1 ] || run "llama.cpp in RAM" "$PEER_DIR/llbench/llbench" --model "$MODEL" --threads 2 --pp "$PP" --tg "$TG" \
    --tg-input "$TG_INPUT"
fi
for lim in $LIMITS; do
  run "strata @$lim" "$CG" "$lim" -- "$STRATA" $(strata_bench "$lim")
  if [ "${SKIP_PEER:-0}" != 1 ]; then
    run "llama.cpp @$lim (default, repack)" "$CG" "$lim" -- "$PEER_DIR/llbench/llbench" --model "$MODEL" --threads 2 --pp "$PEER_PP" --tg "$PEER_TG" \
      --tg-input "$TG_INPUT"
    run "llama.cpp @$lim (--repack 0)" "$CG" "$lim" -- "$PEER_DIR/llbench/llbench" --model "$MODEL" --threads 2 --pp "$PEER_PP" --tg "$PEER_TG" \
      --tg-input "$TG_INPUT" --repack 0
  fi
done

echo
echo "== results (model $(numfmt --to=iec "$(stat -c %s "$MODEL")"), 2 threads; log: $LOG)"
python3 - "$PP" "$TG" "${results[@]}" <<'PY'
import json, sys
pp, tg = sys.argv[1], sys.argv[2]
rows = []
for r in sys.argv[3:]:
    name, _, payload = r.partition("|")
    if not payload.startswith("{"):
        rows.append((name, None, None, payload)); continue
    j = json.loads(payload)
    if "pp_tps" in j:
        rows.append((name, j["pp_tps"], j["tg_tps"], "llama.cpp"))
    else:
        ppk, tgk = f"pp{pp}", f"tg{tg}"
        p, t = j.get(ppk, {}), j.get(tgk, {})
        note = f"hit {t.get('hit_rate',0)*100:.0f}%, {t.get('bytes_per_token',0)/2**20:.0f} MiB/token, limit fraction {t.get('limit_fraction',0)*100:.0f}%, peak RSS {j.get('peak_rss',0)/2**30:.2f} GiB, disk {j.get('disk_bw',0)/1e9:.2f} GB/s"
        rows.append((name, p.get("tokens_per_s"), t.get("tokens_per_s"), note))
print(f"{'run':38} {'pp tok/s':>10} {'tg tok/s':>10}  notes")
for n, p, t, note in rows:
    fp = f"{p:10.2f}" if p is not None else f"{'-':>10}"
    ft = f"{t:10.2f}" if t is not None else f"{'-':>10}"
    print(f"{n:38} {fp} {ft}  {note}")
def get(prefix):
    for n, p, t, _ in rows:
        if n.startswith(prefix) and p is not None: return p, t
    return None
for lim in sorted({n.split('@')[1].split()[0] for n, *_ in rows if '@' in n}):
    s = get(f"strata @{lim}")
    for peer in (f"llama.cpp @{lim} (default", f"llama.cpp @{lim} (--repack 0"):
        q = get(peer)
        if s and q: print(f"ratio strata/{peer.split('(')[1]} @{lim}: pp {s[0]/q[0]:.1f}x, tg {s[1]/q[1]:.1f}x")
s, q = get("strata in RAM"), get("llama.cpp in RAM")
if s and q: print(f"ratio strata/llama.cpp in RAM: pp {s[0]/q[0]:.2f}x, tg {s[1]/q[1]:.2f}x")
PY
