#!/usr/bin/env bash
# Starts N replicas of `strata serve` and HAProxy in front of them on loopback, for trying a fleet out.
#   scripts/cluster.sh N MODEL.gguf [-- extra strata serve options...]
# Environment:
#   PORT=8080        the balancer's port; replica i listens on PORT+i, HAProxy's status page on PORT+100 (/stats, /metrics)
#   STRATA=build/bin/strata
#   RUN_DIR=         where the HAProxy config and the logs go (default: a new temporary folder)
# Requests of one conversation go to one replica (deploy/haproxy/strata.cfg). Ctrl-C or SIGTERM stops
# everything: each replica drains (its streams finish) and exits.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  echo "usage: scripts/cluster.sh N MODEL.gguf [-- strata serve options...]" >&2
  exit 2
fi
N=$1 MODEL=$2
shift 2
[ "${1:-}" = "--" ] && shift
case "$N" in '' | *[!0-9]*) echo "cluster.sh: N must be a number of replicas (got '$N')" >&2; exit 2 ;; esac
[ "$N" -ge 1 ] && [ "$N" -le 64 ] || { echo "cluster.sh: N must be 1..64 (got $N)" >&2; exit 2; }
[ -f "$MODEL" ] || { echo "cluster.sh: no model file $MODEL" >&2; exit 2; }
PORT=${PORT:-8080}
STRATA=${STRATA:-build/bin/strata}
[ -x "$STRATA" ] || { echo "cluster.sh: no strata binary at $STRATA (make build-cli, or set STRATA)" >&2; exit 2; }
command -v haproxy >/dev/null || { echo "cluster.sh: haproxy is not installed (Debian package 'haproxy': scripts/install-deps.sh installs it)" >&2; exit 2; }
RUN_DIR=${RUN_DIR:-$(mktemp -d /tmp/strata-cluster.XXXXXX)}
mkdir -p "$RUN_DIR"

pids=()
stop_all() {
  trap - EXIT INT TERM
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop_all EXIT INT TERM

cfg="$RUN_DIR/haproxy.cfg"
cp deploy/haproxy/strata.cfg "$cfg"
. scripts/fleet.sh
start_fleet "$N" "$cfg" "$RUN_DIR" "$@"
echo "strata cluster: $N replicas of $MODEL behind http://127.0.0.1:$PORT (HAProxy status: http://127.0.0.1:$((PORT + 100))/stats; logs in $RUN_DIR)"
wait "${pids[-1]}" || true  # until HAProxy ends (or Ctrl-C)
