#!/usr/bin/env bash
# Builds llama_vk (tools/llama_vk/llama_vk.cpp): llama.cpp v0.5.0's Vulkan build, the prebuilt libs of the npm
# package @node-llama-cpp/linux-x64-vulkan@3.22.1 (the same release as the CPU peer in ../shared/peer), driven
# directly. Second reference for Strata's GPU tier (issue 35): `llama_vk logits` compares its logits on the
# Vulkan device with the golden llama.cpp CPU logits; `llama_vk bench` is bench/gpu-vs-peer.sh's peer.
# Uses only npm packages (prebuilt libs; headers read from the git bundle inside node-llama-cpp@3.22.1) and g++.
# Everything goes to $PEER_DIR/vulkan (default ${TMPDIR:-/tmp}/strata-peer/vulkan); nothing global.
#
#   scripts/peer-vulkan.sh            # fetch + build; prints the binary's path
#   scripts/peer-vulkan.sh golden SET [PROMPTS]   # fetch + build, then compare SET's golden logits (default p0,p1)
#   scripts/peer-vulkan.sh export DIR             # fetch + build, then copy llama_vk + the libs it loads to DIR (+ DIR.tar.gz)
#
# The device: GGML's Vulkan backend skips CPU-type devices (Mesa's lavapipe) unless GGML_VK_VISIBLE_DEVICES
# names them; `golden` sets GGML_VK_VISIBLE_DEVICES=0 when it is unset and the only device is a CPU.
set -euo pipefail
PEER_DIR=${PEER_DIR:-${TMPDIR:-/tmp}/strata-peer}
here=$(cd "$(dirname "$0")/.." && pwd)
d=$PEER_DIR/vulkan
mkdir -p "$d"; cd "$d"
if [ ! -f nlc/package/bins/linux-x64-vulkan/libllama.vulkan.v0.5.0.so ]; then
  mkdir -p nlc && (cd nlc && npm pack --silent @node-llama-cpp/linux-x64-vulkan@3.22.1 >/dev/null &&
    tar xzf node-llama-cpp-linux-x64-vulkan-3.22.1.tgz)
fi
if [ ! -f include/llama.h ]; then
  t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
  (cd "$t" && npm pack --silent node-llama-cpp@3.22.1 >/dev/null && tar xzf node-llama-cpp-3.22.1.tgz package/llama/gitRelease.bundle)
  git clone --quiet --bare "$t/package/llama/gitRelease.bundle" "$t/llama.git"
  mkdir -p include
  git --git-dir "$t/llama.git" show HEAD:include/llama.h > include/llama.h
  for h in $(git --git-dir "$t/llama.git" ls-tree --name-only HEAD ggml/include/); do
    git --git-dir "$t/llama.git" show "HEAD:$h" > "include/$(basename "$h")"
  done
fi
lib=$d/nlc/package/bins/linux-x64-vulkan
src=$here/tools/llama_vk/llama_vk.cpp
if [ ! -x llama_vk ] || [ "$src" -nt llama_vk ]; then
  g++ -O2 -std=c++17 -Iinclude "$src" -o llama_vk -L"$lib" -l:libllama.vulkan.v0.5.0.so -l:libggml.vulkan.v0.5.0.so \
    -l:libggml-base.so -Wl,-rpath,"$lib:\$ORIGIN/lib"
fi
echo "built $d/llama_vk" >&2
if [ "${1:-}" = export ]; then  # a relocatable copy (binary + lib/ with only the libs it loads, ~50 MiB) for a machine without npm
  out=${2:?export DIR}; mkdir -p "$out/lib"; cp llama_vk "$out/"
  cp "$lib"/libllama.vulkan.v0.5.0.so "$lib"/libggml.vulkan.v0.5.0.so "$lib"/libggml-base.so "$lib"/libggml-vulkan.so \
     "$lib"/libggml-cpu-*.so "$out/lib/"
  tar czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"  # ~20 MiB: fits a device run's carry
  echo "exported $out/llama_vk and $out.tar.gz (use LLVK=$out/llama_vk with bench/gpu-vs-peer.sh)" >&2; exit 0
fi
if [ "${1:-}" = golden ]; then
  set_dir=${FIXTURES:-$here/../shared/fixtures}/${2:?set name}
  if [ -z "${GGML_VK_VISIBLE_DEVICES:-}" ] && vulkaninfo --summary 2>/dev/null | grep -q 'PHYSICAL_DEVICE_TYPE_CPU' &&
     ! vulkaninfo --summary 2>/dev/null | grep -q 'PHYSICAL_DEVICE_TYPE_\(DISCRETE\|INTEGRATED\)_GPU'; then
    export GGML_VK_VISIBLE_DEVICES=0
  fi
  exec ./llama_vk logits --model "$set_dir/model.gguf" --golden "$set_dir/golden" --prompts "${3:-p0,p1}" --ngl -1
fi
