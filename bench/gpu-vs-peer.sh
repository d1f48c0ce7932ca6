#!/usr/bin/env bash
# Strata --gpu vulkan against llama.cpp v0.5.0's Vulkan build with its routed experts on the CPU (llama.cpp's
# `-ot exps=CPU` / `--cpu-moe`: tensor buffer override "\.ffn_(up|down|gate|gate_up)_(ch|)exps" -> CPU, through
# tools/llama_vk built by scripts/peer-vulkan.sh) on one GGUF: the same file, threads, prompt and generation
# lengths, VRAM and RAM budgets; runs alternate (Strata, peer, peer, Strata, ...); prints each run, the device
# (vulkaninfo --summary) and a table of the medians with the ratio Strata / llama.cpp. A benchmark, not a test.
#
#   MODEL=/work/shared/fixtures/qwen3moe-q8_0/model.gguf PP=64 TG=16 ROUNDS=1 bench/gpu-vs-peer.sh
#   MODEL=big.gguf PP=512 TG=128 VRAM_BUDGET=22G RAM_BUDGET=48G bench/gpu-vs-peer.sh
#
# Env: MODEL (required); PP, TG (default 128, 32); ROUNDS (pairs, default 2); THREADS (default 2);
#   VRAM_BUDGET: Strata --vram-budget; llama.cpp has no VRAM cap, so it gets n_gpu_layers = the layers Strata's
#     plan puts on the GPU under that budget (`strata inspect --vram-budget --json`); NGL overrides (-1: all).
#   RAM_BUDGET: Strata --ram-budget; with CGROUP=1 both engines also run under ../shared/peer/cgroup-run.sh
#     RAM_BUDGET (page cache included; llama.cpp has no other RAM knob).
#   GPU: Strata's --gpu (default vulkan: its best device; vulkan:N for device N, which llama.cpp then gets too
#     through GGML_VK_VISIBLE_DEVICES=N). GGML_VK_VISIBLE_DEVICES, VK_ICD_FILENAMES are taken from the environment;
#     when the only Vulkan device is a CPU (lavapipe), GGML_VK_VISIBLE_DEVICES=0 is set (llama.cpp skips CPU devices).
#   STRATA (binary, default build/bin/strata), PEER_DIR (scripts/peer-vulkan.sh's cache), TG_INPUT (random),
#   FA: llama.cpp's flash attention, auto (default, as llama.cpp) | on | off.
#   LLVK: a prebuilt llama_vk (e.g. from `scripts/peer-vulkan.sh export DIR`, for a machine without npm access).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
STRATA=${STRATA:-$here/build/bin/strata}
MODEL=${MODEL:?MODEL=file.gguf}
PP=${PP:-128}; TG=${TG:-32}; ROUNDS=${ROUNDS:-2}; THREADS=${THREADS:-2}; GPU=${GPU:-vulkan}; TG_INPUT=${TG_INPUT:-random}
CTX=$((PP + TG + 16))
[ -x "$STRATA" ] || { echo "build Strata first (or STRATA=path)"; exit 1; }
if [ -z "${LLVK:-}" ]; then
  "$here/scripts/peer-vulkan.sh" >/dev/null 2>&1 || { echo "scripts/peer-vulkan.sh failed"; exit 1; }
  LLVK=${PEER_DIR:-${TMPDIR:-/tmp}/strata-peer}/vulkan/llama_vk
fi

echo "== device (vulkaninfo --summary)"
summary=$(vulkaninfo --summary 2>&1 || true)
echo "$summary" | sed -n '/^Devices:/,$p' | grep -E 'GPU[0-9]+:|deviceType|deviceName|driverName|driverInfo|apiVersion' || echo "$summary" | tail -5
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
if [[ $GPU == vulkan:* ]]; then export GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-${GPU#vulkan:}}
elif [ -z "${GGML_VK_VISIBLE_DEVICES:-}" ] && echo "$summary" | grep -q PHYSICAL_DEVICE_TYPE_CPU &&
     ! echo "$summary" | grep -q 'PHYSICAL_DEVICE_TYPE_\(DISCRETE\|INTEGRATED\)_GPU'; then
  export GGML_VK_VISIBLE_DEVICES=0
fi
echo "strata: --gpu $GPU; llama.cpp: GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-<default: discrete/integrated GPUs>}"

sargs=(bench -m "$MODEL" -t "$THREADS" -c "$CTX" -p "$PP" -n "$TG" --tg-input "$TG_INPUT" --gpu "$GPU" --json)
[ -n "${VRAM_BUDGET:-}" ] && sargs+=(--vram-budget "$VRAM_BUDGET")
[ -n "${RAM_BUDGET:-}" ] && sargs+=(--ram-budget "$RAM_BUDGET")
if [ -z "${NGL:-}" ]; then
  NGL=-1
  if [ -n "${VRAM_BUDGET:-}" ]; then
    # Strata holds the leading layers (output head on the CPU), llama.cpp the trailing ones and counts its output
    # head as one more (i_gpu_start = n_layer + 1 - n_gpu_layers): all of Strata's layers -> -1 (all), else the
    # same number of transformer layers plus llama.cpp's output head (more VRAM than Strata's by the head).
    NGL=$("$STRATA" inspect "$MODEL" --vram-budget "$VRAM_BUDGET" -c "$CTX" --json 2>/dev/null |
          python3 -c 'import json,sys; v=json.load(sys.stdin)["vram_budget"]; g = v["gpu_layers"]; print(-1 if g >= v["n_layer"] else g + 1 if g else 0)')
  fi
fi
largs=(bench --model "$MODEL" --threads "$THREADS" --pp "$PP" --tg "$TG" --ngl "$NGL" --cpu-moe 1 --fa "${FA:-auto}")
wrap=()
[ "${CGROUP:-0}" = 1 ] && [ -n "${RAM_BUDGET:-}" ] && wrap=("$here/../shared/peer/cgroup-run.sh" "$RAM_BUDGET" --)
echo "strata:    ${wrap[*]} $STRATA ${sargs[*]}"
echo "llama.cpp: ${wrap[*]} $LLVK ${largs[*]}"

warm() { cat "$MODEL" > /dev/null; }
results=()
run_strata() {
  warm; local s
  s=$("${wrap[@]}" "$STRATA" "${sargs[@]}" 2>/tmp/gpu-vs-peer.strata.$$ | grep '^{' | tail -1) || true
  [ -n "$s" ] || { echo "strata round $1 failed: $(tail -2 /tmp/gpu-vs-peer.strata.$$)" >&2; rm -f /tmp/gpu-vs-peer.strata.$$; return; }
  grep 'cgroup peak' /tmp/gpu-vs-peer.strata.$$ | sed 's/^/  strata: /' >&2 || true
  rm -f /tmp/gpu-vs-peer.strata.$$
  results+=("strata|$s")
  python3 -c 'import json,sys; j=json.loads(sys.argv[1]); g=lambda k: j.get(k) or {}
print("strata round %s: pp%s %.2f tok/s, tg%s %.2f tok/s, gpu_layers %s, vram peak %.1f MiB, peak RSS %.1f MiB" % (sys.argv[2], sys.argv[3], g("pp"+sys.argv[3]).get("tokens_per_s", 0), sys.argv[4], g("tg"+sys.argv[4]).get("tokens_per_s", 0), (g("tg"+sys.argv[4]).get("gpu") or g("pp"+sys.argv[3]).get("gpu") or {}).get("gpu_layers"), ((g("tg"+sys.argv[4]).get("gpu") or {}).get("vram_peak") or 0) / 1048576, (j.get("peak_rss") or 0) / 1048576))' "$s" "$1" "$PP" "$TG" >&2
}
run_peer() {
  warm; local s
  local rc=0
  "${wrap[@]}" "$LLVK" "${largs[@]}" >/tmp/gpu-vs-peer.peerout.$$ 2>/tmp/gpu-vs-peer.peer.$$ || rc=$?
  s=$(grep '^{' /tmp/gpu-vs-peer.peerout.$$ | tail -1 || true); rm -f /tmp/gpu-vs-peer.peerout.$$
  [ -n "$s" ] || { echo "llama.cpp round $1 failed (exit $rc$([ $rc -gt 128 ] && echo ", signal $((rc - 128))")): $(grep -i -m2 -E 'error|fail' /tmp/gpu-vs-peer.peer.$$)" >&2; rm -f /tmp/gpu-vs-peer.peer.$$; return; }
  grep -E 'offloaded|model buffer size|KV buffer size|cgroup peak' /tmp/gpu-vs-peer.peer.$$ | sed 's/^/  llama.cpp: /' >&2 || true
  rm -f /tmp/gpu-vs-peer.peer.$$
  results+=("peer|$s")
  echo "llama.cpp round $1: $s" >&2
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then run_strata "$r"; run_peer "$r"; else run_peer "$r"; run_strata "$r"; fi
done
printf '%s\n' "${results[@]}" | python3 -c '
import json, statistics, sys
pp, tg = sys.argv[1], sys.argv[2]
v = {"strata": {"pp": [], "tg": []}, "peer": {"pp": [], "tg": []}}
for line in sys.stdin:
    if "|" not in line: continue
    eng, js = line.split("|", 1); j = json.loads(js)
    if eng == "strata":
        for ph, n in (("pp", pp), ("tg", tg)):
            x = (j.get(ph + n) or {}).get("tokens_per_s")
            if x: v[eng][ph].append(x)
    else:
        for ph in ("pp", "tg"):
            x = j.get(ph + "_tps")
            if x: v[eng][ph].append(x)
print("\n| phase | Strata --gpu vulkan (tok/s) | llama.cpp Vulkan, experts on CPU (tok/s) | Strata / llama.cpp |")
print("|---|---|---|---|")
for ph, n in (("pp", pp), ("tg", tg)):
    s = statistics.median(v["strata"][ph]) if v["strata"][ph] else None
    p = statistics.median(v["peer"][ph]) if v["peer"][ph] else None
    f = lambda x: "%.2f" % x if x else "-"
    print("| %s%s | %s | %s | %s |" % (ph, n, f(s), f(p), "%.2fx" % (s / p) if s and p else "-"))
' "$PP" "$TG"
