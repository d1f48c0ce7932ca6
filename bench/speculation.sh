#!/usr/bin/env bash
# Speculative decoding against plain decoding (issue 19): prints a table of generation tok/s with
# and without speculation, each run a fresh process (same cold expert cache, file in the page
# cache), plus the speculative figures (tokens per pass, acceptance, passes by k the cost model
# chose, unique experts per pass, bytes read per generated token, time split).
#
#   bench/speculation.sh                      # models/strata-moe-tiny + models/strata-draft-tiny
#   MODEL=x.gguf DRAFT=d.gguf BUDGETS="0 64M" TEMPS="0 0.7" N=128 CTX=256 THREADS=1 bench/speculation.sh
#
# Workloads: "edit" (the continuation is in the prompt: a passage, then its first words again) and
# "free" (a short prompt, free writing). Modes: plain; lookup and model drafts with the cost model
# (auto); the same with every draft verified (--draft-fixed); "lookup-blind": lookup with the cost
# model but without predicted routing (--no-draft-predict). "cpu vs": the first mode's CPU seconds
# per generated token over this mode's (medians; every thread, generation only: `gen_cpu_s`),
# steadier than tok/s on a busy machine, but blind to time spent waiting for reads. BUDGETS: --ram-budget values
# (0 = in RAM). LIMIT=6G runs every command under ../shared/peer/cgroup-run.sh $LIMIT. ROUNDS=R runs
# every mode R times, alternating (A B, B A, ...), and prints each mode's median run (and the range of its tok/s).
# Not a test: timings depend on the machine and its load.
set -euo pipefail
cd "$(dirname "$0")/.."
STRATA=${STRATA:-build/bin/strata}
MODEL=${MODEL:-models/strata-moe-tiny/model.gguf}
DRAFT=${DRAFT:-models/strata-draft-tiny/model.gguf}
BUDGETS=${BUDGETS:-"0 64M"}
TEMPS=${TEMPS:-"0 0.7"}
N=${N:-128}
CTX=${CTX:-256}
K=${K:-4}
THREADS=${THREADS:-1}
MODES=${MODES:-"plain lookup model lookup-fixed model-fixed"}
WORKLOADS=${WORKLOADS:-"edit free"}
LIMIT=${LIMIT:-}
EXTRA=${EXTRA:-}
ROUNDS=${ROUNDS:-1}

[ -x "$STRATA" ] || { echo "no $STRATA: build it first (ninja -C build strata)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The small trained model does not copy a quoted passage (it is undertrained), but it loops: a
# prompt that already holds the loop its greedy decoding falls into has its continuation in it.
edit=${EDIT_PROMPT:-"And God said unto Moses, I will be not done, and I will be done, and I will be done, and I will be done, and I will be done. And I will say unto you, I will not be done, and I will be done, and I will be done,"}
printf '%s' "$edit" > "$tmp/edit.txt"
printf '%s' "And it came to pass in those days, that" > "$tmp/free.txt"

run() {  # workload temp budget mode -> JSON line
  local w=$1 t=$2 b=$3 m=$4 args=()
  case $m in
    plain) ;;
    lookup) args=(--draft lookup) ;;
    model) args=(-md "$DRAFT") ;;
    lookup-fixed) args=(--draft lookup --draft-fixed) ;;
    lookup-blind) args=(--draft lookup --no-draft-predict) ;;
    model-fixed) args=(-md "$DRAFT" --draft-fixed) ;;
  esac
  [ "$m" = plain ] || args+=(--draft-max "$K")
  [ "$b" = 0 ] || args+=(--ram-budget "$b")
  local cmd=("$STRATA" run -m "$MODEL" -f "$tmp/$w.txt" -n "$N" --ignore-eos --temp "$t" --seed 1 -t "$THREADS" -c "$CTX" --json "${args[@]}")
  # shellcheck disable=SC2206
  cmd+=($EXTRA)
  if [ -n "$LIMIT" ]; then cmd=(../shared/peer/cgroup-run.sh "$LIMIT" -- "${cmd[@]}"); fi
  echo "+ ${cmd[*]}" >&2
  "${cmd[@]}" 2>"$tmp/err" | tail -n 1
}

printf '%-8s %-4s %-6s %-13s %8s %6s %6s %6s %7s %-22s %-16s %10s %s\n' workload temp budget mode "tok/s" "vs" "cpu vs" "t/pass" "acc%" "acceptance by pos" "passes k=0..$K" "read/tok" "experts/pass  draft/io/compute s"
for b in $BUDGETS; do
  for t in $TEMPS; do
    for w in $WORKLOADS; do
      rm -f "$tmp"/runs-*
      # Rounds alternate the modes, so slow spells of a noisy machine hit every mode alike; every
      # other round runs them in reverse order, so a machine that drifts slower (or faster) over
      # the rounds does not favour the modes that run first (A B, B A, ...).
      rev=$(printf '%s\n' $MODES | tac | tr '\n' ' ')
      for r in $(seq "$ROUNDS"); do
        order=$MODES
        [ $((r % 2)) = 1 ] || order=$rev
        for m in $order; do
          j=$(run "$w" "$t" "$b" "$m") || { echo "run failed: $(tail -n 3 "$tmp/err")" >&2; continue; }
          printf '%s\n' "$j" >> "$tmp/runs-$m"
        done
      done
      base=""
      for m in $MODES; do
        [ -s "$tmp/runs-$m" ] || continue
        line=$(python3 - "$tmp/runs-$m" "$base" <<'EOF2'
import json, statistics, sys
runs = []
for l in open(sys.argv[1]):
    j = json.loads(l)
    runs.append((j["timings"]["gen_tps"], j["timings"]["gen_cpu_s"] / max(1, len(j["tokens"])), j))
runs.sort(key=lambda r: r[0])
tps, _, j = runs[len(runs) // 2]  # the median run (the upper one of an even count)
cpu = statistics.median(r[1] for r in runs)
base, base_cpu = (float(x) for x in sys.argv[2].split(",")) if sys.argv[2] else (tps, cpu)
cpu = base_cpu / cpu
spread = f"[{runs[0][0]:.0f}-{runs[-1][0]:.0f}]" if len(runs) > 1 else ""
s = j.get("speculative")
if not s:
    print(f"{tps:8.1f} {tps / base:5.2f}x {cpu:5.2f}x {'1.00':>6} {'-':>7} {'-':22} {'-':16} {'-':>10} - {spread}|{tps},{base_cpu}"); sys.exit()
p = max(1, s["passes"]); n = s["accepted"] + s["passes"]
acc = " ".join(f"{100 * a / q:.0f}" if q else "-" for a, q in zip(s["accepted_at"], s["proposed_at"]))
kh = "/".join(str(x) for x in s["k_hist"])
rb = s["bytes_read"] / max(1, n) / 1024
comp = max(0.0, s["verify_s"] - s["io_wait_s"])
pr = s.get("prediction")
pr = f" pred P/R {pr['precision']:.2f}/{pr['recall']:.2f} rows {pr['rows_predicted']}/{pr['rows']} cal {pr['calibration']:.2f}" if pr else ""
print(f"{tps:8.1f} {tps / base:5.2f}x {cpu:5.2f}x {n / p:6.2f} {100 * s['accepted'] / max(1, s['proposed']):6.1f}% {acc:22} {kh:16} {rb:7.0f}KiB "
      f"{s['expert_union'] / p:5.1f}/{s['expert_slots'] / p:5.1f}  {s['draft_s']:.2f}/{s['io_wait_s']:.2f}/{comp:.2f}{pr} {spread}|{tps},{base_cpu}")
EOF2
)
        [ -n "$base" ] || base=${line##*|}
        printf '%-8s %-4s %-6s %-13s %s\n' "$w" "$t" "$b" "$m" "${line%|*}"
      done
    done
  done
done
