#!/usr/bin/env bash
# Concurrent streams against `strata serve`: starts the server on MODEL, waits for /health, then for
# each S in STREAMS runs S concurrent streaming /v1/completions clients (curl), each generating
# TOKENS tokens (ignore_eos), and prints per S: aggregate generated tokens/s, mean per-stream
# tokens/s, the aggregate's ratio to the first S, and the expert-cache figures of that round from
# /metrics (hit rate, bytes read). A benchmark, not a test: figures only.
#
#   MODEL=models/demo-qwen3moe.gguf RAM_BUDGET=96M bench/serve-streams.sh
#   MODEL=big.gguf LIMIT=6G RAM_BUDGET=5600M STREAMS="1 2 4 8" TOKENS=64 bench/serve-streams.sh
#
# Env: MODEL (required), STREAMS ("1 2 4 8"), TOKENS (generated per stream, 64), RAM_BUDGET (--ram-budget,
# unset: none), LIMIT (run the server under ../shared/peer/cgroup-run.sh LIMIT, page cache included),
# PARALLEL (--parallel, default the largest S), CTX (-c per slot, default TOKENS + 128), THREADS (-t),
# WARMUP (tokens of one request before the rounds, 16; 0: none), SERVER_ARGS (more serve options),
# STRATA (binary), SHARED (../shared), LOAD_TIMEOUT (seconds to wait for /health, 600), KEEP_LOG=1.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
STRATA=${STRATA:-$here/build/bin/strata}
SHARED=${SHARED:-$here/../shared}
: "${MODEL:?set MODEL=path/to/model.gguf}"
STREAMS=${STREAMS:-"1 2 4 8"}
TOKENS=${TOKENS:-64}
WARMUP=${WARMUP:-16}
LOAD_TIMEOUT=${LOAD_TIMEOUT:-600}
max_s=1
for s in $STREAMS; do
  [[ "$s" =~ ^[1-9][0-9]*$ ]] || { echo "STREAMS must be positive integers (got '$s')" >&2; exit 2; }
  (( s > max_s )) && max_s=$s
done
[[ "$TOKENS" =~ ^[1-9][0-9]*$ ]] || { echo "TOKENS must be a positive integer (got '$TOKENS')" >&2; exit 2; }
PARALLEL=${PARALLEL:-$max_s}
CTX=${CTX:-$((TOKENS + 128))}
[ -x "$STRATA" ] || { echo "build Strata first (no $STRATA)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "no model $MODEL" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/serve-streams.XXXXXX")
log=$tmp/server.log
wrapper_pid=""
clients=()

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for p in "${clients[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ -n "$wrapper_pid" ]; then
    # SIGTERM to the server itself (serve shuts down cleanly), so that cgroup-run.sh sees it exit
    # and removes its cgroup; SIGKILL after 15 s.
    local spid
    spid=$(cat "$tmp/server.pid" 2>/dev/null || echo "$wrapper_pid")
    kill -TERM "$spid" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$wrapper_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$wrapper_pid" 2>/dev/null; then
      kill -KILL "$spid" 2>/dev/null || true
      sleep 0.5
      kill -TERM "$wrapper_pid" 2>/dev/null || true
    fi
    wait "$wrapper_pid" 2>/dev/null || true
    grep -h 'cgroup peak' "$log" 2>/dev/null || true
  fi
  if [ "$rc" -ne 0 ] && [ -f "$log" ]; then echo "--- server log (last lines):" >&2; tail -n 20 "$log" >&2; fi
  if [ "${KEEP_LOG:-0}" = 1 ]; then echo "server log: $log" >&2; else rm -rf "$tmp"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

args=(serve -m "$MODEL" --host 127.0.0.1 --port 0 --parallel "$PARALLEL" -c "$CTX" --queue "$((max_s * 2))")
[ -n "${RAM_BUDGET:-}" ] && args+=(--ram-budget "$RAM_BUDGET")
[ -n "${THREADS:-}" ] && args+=(-t "$THREADS")
# shellcheck disable=SC2206
[ -n "${SERVER_ARGS:-}" ] && args+=($SERVER_ARGS)
# The wrapper records the server's own pid, under cgroup-run.sh as well.
launch=(bash -c 'echo $$ > "$0"; exec "$@"' "$tmp/server.pid" "$STRATA" "${args[@]}")
if [ -n "${LIMIT:-}" ]; then
  [ -x "$SHARED/peer/cgroup-run.sh" ] || { echo "no $SHARED/peer/cgroup-run.sh" >&2; exit 1; }
  launch=("$SHARED/peer/cgroup-run.sh" "$LIMIT" -- "${launch[@]}")
fi
echo "== $STRATA ${args[*]}${LIMIT:+  (memory limit $LIMIT)}"
"${launch[@]}" > "$log" 2>&1 &
wrapper_pid=$!

# The port (--port 0: the server picks one and logs it), then /health.
port=""
t0=$(date +%s)
while :; do
  kill -0 "$wrapper_pid" 2>/dev/null || { echo "the server exited during startup" >&2; exit 1; }
  [ -z "$port" ] && port=$(sed -n 's|.*listening on http://[^:]*:\([0-9]*\).*|\1|p' "$log" | head -n 1)
  if [ -n "$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ]; then break; fi
  (( $(date +%s) - t0 > LOAD_TIMEOUT )) && { echo "the server did not become ready in $LOAD_TIMEOUT s" >&2; exit 1; }
  sleep 0.2
done
base=http://127.0.0.1:$port
echo "== ready on port $port after $(( $(date +%s) - t0 )) s; $(grep -m1 -i 'expert\|resident\|budget' "$log" || true)"

metric() {  # name, metrics text -> value (0 if absent)
  awk -v n="$1" '$1 == n { v = $2 } END { printf "%.0f", v + 0 }' <<< "$2"
}
now() { date +%s.%N; }

request() {  # index, tokens, out file: one streaming completion; writes curl's time_total to out.time
  local body
  body=$(printf '{"prompt":"Stream %d: tell a long story about the sea, the wind and a lighthouse keeper.","max_tokens":%d,"ignore_eos":true,"temperature":0.8,"seed":%d,"stream":true,"stream_options":{"include_usage":true}}' "$1" "$2" "$1")
  curl -sS -N --max-time 3600 -H 'Content-Type: application/json' -d "$body" -o "$3" -w '%{time_total}\n' "$base/v1/completions" > "$3.time" 2> "$3.err" || true
}

if (( WARMUP > 0 )); then
  request 0 "$WARMUP" "$tmp/warmup"
  grep -q '"completion_tokens"' "$tmp/warmup" || { echo "warm-up request failed: $(head -c 400 "$tmp/warmup" "$tmp/warmup.err")" >&2; exit 1; }
fi

printf '\n%3s %8s %8s %10s %12s %9s %9s %12s %10s\n' S tokens wall_s agg_tok/s stream_tok/s ratio hit_rate read_MiB MiB/token
ref=""
failed=0
for S in $STREAMS; do
  m0=$(curl -s "$base/metrics")
  clients=()
  t_start=$(now)
  for ((i = 1; i <= S; i++)); do
    request "$i" "$TOKENS" "$tmp/s$S.$i" &
    clients+=($!)
  done
  for p in "${clients[@]}"; do wait "$p" || true; done
  clients=()
  t_end=$(now)
  m1=$(curl -s "$base/metrics")
  total=0; rates=""; bad=0
  for ((i = 1; i <= S; i++)); do
    f=$tmp/s$S.$i
    n=$(grep -o '"completion_tokens":[0-9]*' "$f" 2>/dev/null | tail -n 1 | cut -d: -f2 || true)
    if [ -z "$n" ] || ! grep -q '^data: \[DONE\]' "$f"; then
      bad=$((bad + 1))
      echo "  stream $i of S=$S failed: $(head -c 300 "$f" 2>/dev/null) $(cat "$f.err" 2>/dev/null)" >&2
      continue
    fi
    total=$((total + n))
    rates="$rates $(awk -v n="$n" -v t="$(cat "$f.time")" 'BEGIN { printf "%.4f", (t > 0 ? n / t : 0) }')"
  done
  failed=$((failed + bad))
  hits=$(( $(metric strata_expert_cache_hits_total "$m1") - $(metric strata_expert_cache_hits_total "$m0") ))
  miss=$(( $(metric strata_expert_cache_misses_total "$m1") - $(metric strata_expert_cache_misses_total "$m0") ))
  bytes=$(( $(metric strata_expert_bytes_read_total "$m1") - $(metric strata_expert_bytes_read_total "$m0") ))
  streaming=$(metric strata_expert_streaming "$m1")
  agg=$(awk -v n="$total" -v a="$t_start" -v b="$t_end" 'BEGIN { printf "%.2f", n / (b - a) }')
  per=$(awk -v r="$rates" 'BEGIN { k = split(r, x, " "); s = 0; for (i = 1; i <= k; i++) s += x[i]; printf "%.2f", (k ? s / k : 0) }')
  [ -z "$ref" ] && ref=$agg
  ratio=$(awk -v a="$agg" -v r="$ref" 'BEGIN { printf "%.2f", (r > 0 ? a / r : 0) }')
  if [ "$streaming" = 1 ]; then
    hr=$(awk -v h="$hits" -v m="$miss" 'BEGIN { printf "%.1f%%", (h + m > 0 ? 100 * h / (h + m) : 0) }')
  else
    hr="resident"
  fi
  mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
  mpt=$(awk -v b="$bytes" -v n="$total" 'BEGIN { printf "%.2f", (n > 0 ? b / 1048576 / n : 0) }')
  wall=$(awk -v a="$t_start" -v b="$t_end" 'BEGIN { printf "%.2f", b - a }')
  printf '%3d %8d %8s %10s %12s %9s %9s %12s %10s%s\n' "$S" "$total" "$wall" "$agg" "$per" "$ratio" "$hr" "$mib" "$mpt" \
    "$( ((bad > 0)) && echo "  ($bad of $S streams failed)")"
done
echo
echo "agg_tok/s: all streams' generated tokens / the round's wall time; stream_tok/s: mean over streams of tokens /"
echo "that stream's request time (prompt included); ratio: agg_tok/s / the first round's; hit_rate, read_MiB:"
echo "expert cache hits / accesses and expert bytes read from disk during the round (/metrics deltas)."
(( failed == 0 )) || exit 1
