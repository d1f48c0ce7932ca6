#!/usr/bin/env bash
# Warm start vs cold start: the speed of the first 16 generated tokens of a streamed model
# (`strata run`'s "first 16 tokens" figure), from a dropped page cache each time, and the whole
# process's wall time (load included: the warm fill overlaps the load).
#   1. cold: --no-warm-start (the cache starts empty)
#   2. a run that records usage statistics (into a scratch --stats-dir)
#   3. warm: the cache is filled in the background from those statistics at start
# A benchmark, not a test: figures only.
#   MODEL=/var/tmp/strata-bench/qwen3-30b-a3b-synth-q4_K.gguf BUDGET=6G bench/warm-start.sh
# Env: STRATA (binary), MODEL, BUDGET (--ram-budget), PROMPT, TG (tokens), RUNS (warm-up runs
# that record statistics, default 1), EXTRA (more strata run options).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
STRATA=${STRATA:-$here/build/bin/strata}
MODEL=${MODEL:?set MODEL to a GGUF file}
BUDGET=${BUDGET:-6G}
TG=${TG:-32}
RUNS=${RUNS:-1}
PROMPT=${PROMPT:-"Write a short story about a lighthouse keeper who finds a message in a bottle."}
stats=$(mktemp -d "${TMPDIR:-/tmp}/strata-warm-bench.XXXXXX")
trap 'rm -rf "$stats"' EXIT
drop_cache() { python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$MODEL"; }
run() {  # label, extra options...
  local label=$1; shift
  drop_cache
  local line
  line=$(/usr/bin/time -f "process wall %e s" "$STRATA" run -m "$MODEL" --ram-budget "$BUDGET" -p "$PROMPT" -n "$TG" --temp 0 --stats-dir "$stats" $EXTRA "$@" 2>&1 |
         grep -E '^\[prompt|^warm start|^process wall' | tr '\n' ' ')
  echo "$label: $line"
}
EXTRA=${EXTRA:-}
run cold --no-warm-start
for i in $(seq "$RUNS"); do run "recording $i"; done
run warm
