#!/usr/bin/env bash
# Strata vs llama.cpp (../shared/peer llbench) in RAM on one GGUF, runs alternating (Strata, peer,
# peer, Strata, ...) so that both see the same machine load; prints each run and the ratio of the
# medians per phase. For a noisy shared machine: compare ratios, not absolute figures. A
# benchmark, not a test: figures only.
#
#   MODEL=/var/tmp/q30-iq2xxs.gguf PP=512 TG=0 ROUNDS=2 bench/pp-vs-peer.sh
#   MODEL=... PP=64 TG=16 bench/pp-vs-peer.sh
#
# Env: MODEL (required), PP / TG (prompt / generated tokens; TG=0: prompt only), ROUNDS (pairs
# of runs, default 2), TG_INPUT (random by default, like llama-bench), STRATA (binary), PEER_DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
STRATA=${STRATA:-$here/build/bin/strata}
PEER_DIR=${PEER_DIR:-${TMPDIR:-/tmp}/strata-peer}
MODEL=${MODEL:?MODEL=file.gguf}
PP=${PP:-512}; TG=${TG:-0}; ROUNDS=${ROUNDS:-2}; TG_INPUT=${TG_INPUT:-random}
[ -x "$STRATA" ] || { echo "build Strata first"; exit 1; }
[ -x "$PEER_DIR/llbench/llbench" ] || { echo "build the peer first: ../shared/peer/build-llbench.sh"; exit 1; }

# Each run starts with the file in the page cache (llama.cpp maps it: pages evicted by other
# processes would be read from disk during its run, Strata reads the file into its own memory).
warm() { cat "$MODEL" > /dev/null; }
results=()
run_strata() {
  warm
  local s
  s=$("$STRATA" bench -m "$MODEL" -t 2 -c $((PP + TG + 16)) -p "$PP" -n "$TG" --tg-input "$TG_INPUT" --json 2>/dev/null | grep '^{' | tail -1)
  results+=("strata|$s")
  echo "strata round $1: $s" | cut -c1-300 >&2
}
run_peer() {  # llbench needs at least one generated token; with TG=0 only its pp figure is used.
  warm
  local p
  p=$("$PEER_DIR/llbench/llbench" --model "$MODEL" --threads 2 --pp "$PP" --tg "$((TG > 0 ? TG : 1))" --tg-input "$TG_INPUT" 2>/dev/null | grep '^{' | tail -1)
  results+=("peer|$p")
  echo "peer round $1: $p" | cut -c1-300 >&2
}
# Odd rounds run Strata first, even rounds the peer: a machine that drifts slower (or faster)
# during the rounds favours neither.
for ((i = 1; i <= ROUNDS; ++i)); do
  if ((i % 2)); then run_strata "$i"; run_peer "$i"; else run_peer "$i"; run_strata "$i"; fi
done

python3 - "$PP" "$TG" "${results[@]}" <<'PY'
import json, statistics, sys
pp, tg = sys.argv[1], sys.argv[2]
runs = {"strata": [], "peer": []}
for r in sys.argv[3:]:
    name, _, payload = r.partition("|")
    if not payload.startswith("{"):
        print(f"{name}: no result"); continue
    j = json.loads(payload)
    if name == "peer":
        runs[name].append((j["pp_tps"], j["tg_tps"]))
    else:
        runs[name].append((j.get(f"pp{pp}", {}).get("tokens_per_s"), j.get(f"tg{tg}", {}).get("tokens_per_s")))
for name, rs in runs.items():
    print(f"{name:7} pp{pp}: " + " ".join(f"{p:.2f}" for p, _ in rs) +
          (f"   tg{tg}: " + " ".join(f"{t:.2f}" for _, t in rs) if tg != "0" else ""))
for i, (s, p) in enumerate(zip(runs["strata"], runs["peer"])):
    print(f"round {i + 1}: pp ratio {s[0] / p[0]:.2f}x" + (f", tg ratio {s[1] / p[1]:.2f}x" if tg != "0" else ""))
if runs["strata"] and runs["peer"]:
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    print(f"median ratio strata/llama.cpp: pp{pp} {med(runs['strata'], 0) / med(runs['peer'], 0):.2f}x" +
          (f", tg{tg} {med(runs['strata'], 1) / med(runs['peer'], 1):.2f}x" if tg != "0" else ""))
PY
