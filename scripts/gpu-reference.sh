#!/usr/bin/env bash
# The GPU tier's two references on one golden set (issue 35; results in docs/gpu-reference.md):
#   llama.cpp's own Vulkan build (scripts/peer-vulkan.sh's llama_vk, all layers on the device) against the golden
#   llama.cpp CPU logits, and Strata `--gpu vulkan` (F32 KV, as the golden harness) against the same logits.
# Prints per prompt and engine: cosine, max |diff|, ref std, argmax (engine/golden); then one "SET engine worst ..." line per engine.
#
#   scripts/gpu-reference.sh SET [PROMPTS]        e.g. scripts/gpu-reference.sh qwen3moe-q8_0 p0,p1
# Env: ENGINES ("llama-cpu llama-vk strata" by default; llama-cpu: the Vulkan build with --ngl 0, a control), STRATA (binary; default build/bin/strata), FIXTURES, PEER_DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
STRATA=${STRATA:-$here/build/bin/strata}
FIXTURES=${FIXTURES:-$here/../shared/fixtures}
set_name=${1:?set name}; prompts=${2:-p0,p1}
dir=$FIXTURES/$set_name
ENGINES=${ENGINES:-llama-cpu llama-vk strata}
for e in $ENGINES; do
  case $e in
  llama-vk)
    "$here/scripts/peer-vulkan.sh" golden "$set_name" "$prompts" 2>/dev/null | grep -v "^worst" | sed "s/^/$set_name llama-vk /" || echo "$set_name llama-vk error: exit $?" ;;
  llama-cpu)  # control: the same build with nothing on the device (no op offload) must reproduce the goldens
    GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0} "$(dirname "$("$here/scripts/peer-vulkan.sh" 2>&1 | sed -n 's/^built //p')")/llama_vk" logits \
      --model "$dir/model.gguf" --golden "$dir/golden" --prompts "$prompts" --ngl 0 --op-offload 0 2>/dev/null |
      grep -v "^worst" | sed "s/^/$set_name llama-cpu /" || echo "$set_name llama-cpu error: exit $?" ;;
  strata)
    tmp=$(mktemp -d)
    for p in ${prompts//,/ }; do
      python3 -c 'import json,sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["prompt_tokens"])))' \
        "$dir/golden/$p.json" > "$tmp/$p.tok"
      t0=$(date +%s.%N)
      "$STRATA" run -m "$dir/model.gguf" --gpu vulkan --tokens-file "$tmp/$p.tok" -n 0 -t 2 -c 256 \
        --cache-type-k f32 --cache-type-v f32 --logits-out "$tmp/$p.f32" > "$tmp/$p.log" 2>&1 ||
        { echo "$set_name strata $p error: $(tail -1 "$tmp/$p.log")"; continue; }
      python3 - "$tmp/$p.f32" "$dir/golden/$p.last_logits.f32" "$p" "$(wc -w < "$tmp/$p.tok")" "$t0" "$set_name" <<'PY'
import array, math, sys, time
a = array.array('f'); a.frombytes(open(sys.argv[1], 'rb').read())
r = array.array('f'); r.frombytes(open(sys.argv[2], 'rb').read())
assert len(a) == len(r), (len(a), len(r))
dot = sum(x * y for x, y in zip(a, r)); na = sum(x * x for x in a); nr = sum(y * y for y in r)
mx = max(abs(x - y) for x, y in zip(a, r)); m = sum(r) / len(r); sd = math.sqrt(sum((y - m) ** 2 for y in r) / len(r))
top = max(range(len(a)), key=lambda i: a[i]); rtop = max(range(len(r)), key=lambda i: r[i])
print(f"{sys.argv[6]} strata {sys.argv[3]} n_tokens={sys.argv[4]} cosine={dot / math.sqrt(na * nr):.6f} max_abs={mx:.4g} ref_std={sd:.4g} top1={top}/{rtop} ({time.time() - float(sys.argv[5]):.2f} s)")
PY
    done
    rm -rf "$tmp" ;;
  esac
done | awk '{print} $2 ~ /llama-cpu|llama-vk|strata/ && $3 ~ /^p[0-9]/ { split($5, c, "="); split($6, m, "=");
  k = $2; if (!(k in w) || c[2] < w[k]) w[k] = c[2]; if (!(k in x) || m[2] + 0 > x[k] + 0) x[k] = m[2]; n[k]++ }
  END { for (k in w) printf "%s %s worst: prompts=%d cosine=%s max_abs=%s\n", "'"$set_name"'", k, n[k], w[k], x[k] }'
