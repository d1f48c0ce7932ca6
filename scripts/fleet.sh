# Sourced by scripts/cluster.sh and bench/replicas.sh: N replicas of `strata serve` behind HAProxy on
# loopback. The caller sets STRATA, MODEL and PORT and holds a `pids` array (empty before the call).
#   start_fleet N HAPROXY_CFG LOG_DIR [strata serve options...]
# Replica i listens on PORT+i and is appended to HAPROXY_CFG as a server; HAProxy binds PORT, its
# status page PORT+100. Returns once every replica answers /health 200 and HAProxy has marked every
# one UP; a replica or HAProxy whose process ended first is an error (its log's tail is printed).
start_fleet() {
  local n=$1 cfg=$2 dir=$3 i
  shift 3
  for i in $(seq 1 "$n"); do
    "$STRATA" serve -m "$MODEL" --host 127.0.0.1 --port $((PORT + i)) --replica "r$i" "$@" 2>"$dir/r$i.log" &
    pids+=($!)
    echo "    server r$i 127.0.0.1:$((PORT + i))" >>"$cfg"
  done
  STRATA_LB_BIND=127.0.0.1:$PORT STRATA_LB_STATS=127.0.0.1:$((PORT + 100)) haproxy -db -f "$cfg" >"$dir/haproxy.log" 2>&1 &
  pids+=($!)
  for i in $(seq 1 "$n"); do
    until curl -sf "http://127.0.0.1:$((PORT + i))/health" >/dev/null; do
      kill -0 "${pids[$((i - 1))]}" 2>/dev/null || { echo "$(basename "$0"): replica r$i exited:" >&2; tail -5 "$dir/r$i.log" >&2; exit 1; }
      sleep 0.2
    done
  done
  until curl -s "http://127.0.0.1:$((PORT + 100))/stats;csv" | awk -F, -v n="$n" '$1=="strata" && $2!="BACKEND" && $18=="UP" {u++} END {exit !(u==n)}'; do
    kill -0 "${pids[-1]}" 2>/dev/null || { echo "$(basename "$0"): haproxy exited:" >&2; tail -5 "$dir/haproxy.log" >&2; exit 1; }
    sleep 0.2
  done
}
