#!/usr/bin/env bash
# Replicas behind HAProxy (deploy/haproxy/strata.cfg) on loopback: aggregate generation tok/s and
# prefix-cache hit rate for 1, 2, 3 replicas with CONVS concurrent multi-turn conversations, affinity
# (the shipped config: consistent hashing on x-session-id) against round-robin (the same config with
# `balance roundrobin`). Prints one table row per run.
#   MODEL=models/strata-moe-tiny/model.gguf RAM_BUDGET=160M REPLICAS="1 2 3" CONVS=16 TURNS=4 TOKENS=16 bench/replicas.sh
# Columns: prefix hit = prompt tokens whose KV rows a replica kept (cached_tokens) / prompt tokens, over
# the turns after the first; expert hit and expert MiB/token from the replicas' /metrics (bytes read
# over prompt tokens evaluated plus tokens generated). On one machine the replicas share its cores:
# hit rates and bytes per token carry over to separate machines, tok/s is as measured here.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/strata-moe-tiny/model.gguf}
RAM_BUDGET=${RAM_BUDGET:-160M}
REPLICAS=${REPLICAS:-"1 2 3"}
CONVS=${CONVS:-16}
TURNS=${TURNS:-4}
TOKENS=${TOKENS:-16}
PARALLEL=${PARALLEL:-8}
STRATA=${STRATA:-build/bin/strata}
PORT=${PORT:-18480}
command -v haproxy >/dev/null || { echo "replicas.sh: haproxy is not installed (Debian package 'haproxy')" >&2; exit 2; }
[ -x "$STRATA" ] || { echo "replicas.sh: no $STRATA (make build-cli)" >&2; exit 2; }
WORK=$(mktemp -d /tmp/strata-bench-replicas.XXXXXX)
. scripts/fleet.sh
pids=()
stop() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done; pids=(); }
trap 'stop; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

metric_sum() {  # NAME N: the sum of NAME over replicas 1..N
  local s=0 v
  for i in $(seq 1 "$2"); do
    v=$(curl -sf "http://127.0.0.1:$((PORT + i))/metrics" | awk -v m="$1" '$1 ~ "^"m"({|$)" {print $2}')
    s=$(awk -v a="$s" -v b="${v:-0}" 'BEGIN{printf "%.0f", a + b}')
  done
  echo "$s"
}

run() {  # N MODE
  local n=$1 mode=$2 cfg="$WORK/haproxy.cfg"
  sed "s/^    balance hash var(txn.key)$/    balance $([ "$mode" = affinity ] && echo 'hash var(txn.key)' || echo roundrobin)/" deploy/haproxy/strata.cfg >"$cfg"
  start_fleet "$n" "$cfg" "$WORK" --parallel "$PARALLEL" -c 1024 --ram-budget "$RAM_BUDGET" --no-webui --disk-probe 0
  local out
  out=$(python3 - "$PORT" "$CONVS" "$TURNS" "$TOKENS" <<'PY'
import json, sys, threading, time, urllib.request
port, convs, turns, tokens = (int(a) for a in sys.argv[1:5])
lock = threading.Lock()
tot = {"gen": 0, "prompt": 0, "cached": 0}
def conv(i):
    msgs = [{"role": "user", "content": f"Conversation {i}: tell me of the kings of Israel and the prophets who spoke to them, number {i * 7919}."}]
    for t in range(turns):
        body = json.dumps({"messages": msgs, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body, {"Content-Type": "application/json", "x-session-id": f"conv-{i}"})
        r = json.load(urllib.request.urlopen(req, timeout=600))
        u = r["usage"]
        with lock:
            tot["gen"] += u["completion_tokens"]
            if t > 0:
                tot["prompt"] += u["prompt_tokens"]
                tot["cached"] += u["prompt_tokens_details"]["cached_tokens"]
        msgs += [{"role": "assistant", "content": r["choices"][0]["message"]["content"] or ""}, {"role": "user", "content": f"And what came after, in turn {t + 2}?"}]
t0 = time.time()
ts = [threading.Thread(target=conv, args=(i,)) for i in range(convs)]
for t in ts: t.start()
for t in ts: t.join()
dt = time.time() - t0
print(f"{tot['gen'] / dt:.1f} {100.0 * tot['cached'] / max(1, tot['prompt']):.1f} {tot['gen']}")
PY
)
  read -r tps hit gen <<<"$out"
  local hits misses bytes ptok ctok
  hits=$(metric_sum strata_expert_cache_hits_total "$n"); misses=$(metric_sum strata_expert_cache_misses_total "$n")
  bytes=$(metric_sum strata_expert_bytes_read_total "$n"); ptok=$(metric_sum strata_prompt_tokens_total "$n"); ctok=$(metric_sum strata_completion_tokens_total "$n")
  awk -v n="$n" -v m="$mode" -v tps="$tps" -v hit="$hit" -v h="$hits" -v mi="$misses" -v b="$bytes" -v p="$ptok" -v c="$ctok" 'BEGIN {
    printf "| %d | %s | %s | %s%% | %.1f%% | %.2f | %d |\n", n, m, tps, hit, 100 * h / (h + mi > 0 ? h + mi : 1), b / 1048576 / (p + c > 0 ? p + c : 1), p }'
  stop
}

echo "$CONVS conversations x $TURNS turns x $TOKENS tokens, $(basename "$MODEL"), --ram-budget $RAM_BUDGET per replica, --parallel $PARALLEL, $(nproc) cores"
echo "| replicas | routing | gen tok/s | prefix hit (turns 2+) | expert hit | expert MiB/token | prompt tokens evaluated |"
echo "|---|---|---|---|---|---|---|"
for n in $REPLICAS; do
  run "$n" affinity
  [ "$n" -gt 1 ] && run "$n" round-robin
done
