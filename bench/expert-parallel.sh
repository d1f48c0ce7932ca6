#!/usr/bin/env bash
# Expert parallelism on loopback: `strata bench` with 1 process, then under `mpirun -n 2` and
# `-n 3 ... --expert-parallel`, every process under the same --ram-budget (one that alone cannot
# hold the model's experts: the single process streams them). Prints per run: generation tok/s,
# each rank's expert bytes read, and the network bytes and round trips per decoded token against
# the formula (runtime/expert_parallel.h, ep_formula). A benchmark, not a test: figures only.
#   bench/expert-parallel.sh                       # a 8-layer qwen3-30b-a3b-shaped file, made once
#   MODEL=/var/tmp/x.gguf BUDGET=6G RANKS="1 2 3" bench/expert-parallel.sh
# Env: STRATA (binary), MODEL (default: synthesized into $TMPDIR), LAYERS (of the synthesized file),
# BUDGET (--ram-budget of every rank; default 45% of the file), PP, TG (tokens), THREADS (per rank; -c 512 -b 64),
# RANKS, EXTRA (more strata bench options), LIMIT (each process under its own memory cgroup of this size,
# page cache included: ../shared/peer/cgroup-run.sh; then BUDGET defaults to 15/16 of it), TG_INPUT.
#   MODEL=/var/tmp/strata-bench/qwen3-30b-a3b-synth-q4_K.gguf LIMIT=6500M RANKS="1 3" THREADS=2 bench/expert-parallel.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
STRATA=${STRATA:-$here/build/bin/strata}
LAYERS=${LAYERS:-8}
MODEL=${MODEL:-${TMPDIR:-/tmp}/strata-ep-qwen3-30b-a3b-${LAYERS}l.gguf}
# Uniform routing (--skew 0), the formula's assumption.
[ -f "$MODEL" ] || "$STRATA" synth --preset qwen3-30b-a3b --layers "$LAYERS" --skew 0 --out "$MODEL" >&2
size=$(stat -c %s "$MODEL")
LIMIT=${LIMIT:-}
CG=${CG:-$here/../shared/peer/cgroup-run.sh}
if [ -n "$LIMIT" ]; then BUDGET=${BUDGET:-$(( $(numfmt --from=iec "$LIMIT") * 15 / 16 ))}; fi
BUDGET=${BUDGET:-$((size * 45 / 100))}
TG_INPUT=${TG_INPUT:-greedy}
PP=${PP:-16}
TG=${TG:-32}
THREADS=${THREADS:-1}
RANKS=${RANKS:-"1 2 3"}
EXTRA=${EXTRA:-}
stats=$(mktemp -d "${TMPDIR:-/tmp}/strata-ep-bench.XXXXXX")
trap 'rm -rf "$stats"' EXIT
drop_cache() { python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$MODEL"; }
echo "model $MODEL ($size bytes), --ram-budget $BUDGET per rank${LIMIT:+ in a $LIMIT cgroup each}, pp $PP, tg $TG, $THREADS thread(s) per rank"
for r in $RANKS; do
  drop_cache
  cmd=("$STRATA" bench -m "$MODEL" --ram-budget "$BUDGET" -p "$PP" -n "$TG" -t "$THREADS" -c 512 -b 64 --disk-probe 0 --no-warm-start
       --tg-input "$TG_INPUT" --stats-dir "$stats" --json $EXTRA)
  [ -z "$LIMIT" ] || cmd=("$CG" "$LIMIT" -- "${cmd[@]}")
  if [ "$r" -gt 1 ]; then
    cmd=(mpirun --allow-run-as-root --oversubscribe -n "$r" "${cmd[@]}" --expert-parallel)
  fi
  json=$("${cmd[@]}" 2>"$stats/err" | tail -n 1)
  grep -h "cgroup peak" "$stats/err" || true
  python3 - "$r" "$json" <<'PY'
import json, sys
r, j = int(sys.argv[1]), json.loads(sys.argv[2])
tg = next(v for k, v in j.items() if k.startswith("tg"))
line = f"ranks {r}: tg {tg['tokens_per_s']:.2f} tok/s, rank 0 read {tg['bytes_per_token'] / 2**20:.1f} MiB/token"
ep = j.get("expert_parallel")
if ep:
    reads = ", ".join(f"{x['bytes_read'] / 2**20:.0f} MiB" for x in ep["per_rank"])
    line += (f"; bytes read per rank (whole run): {reads}; network {ep['decode_bytes_per_token'] / 1024:.1f} KiB and "
             f"{ep['decode_round_trips_per_token']:.1f} round trips per decoded token (formula: {ep['formula_bytes_per_token'] / 1024:.1f} KiB, "
             f"{ep['formula_round_trips_per_token']:.1f})")
print(line)
PY
done
