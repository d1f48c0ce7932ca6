#!/usr/bin/env bash
# Installs every build/test dependency of Strata from Debian 12 packages (by name).
#   scripts/install-deps.sh          what ./bootstrap demo|test need (the trained demo model is committed)
#   scripts/install-deps.sh --train  also what tools/train/ needs to retrain it (CPU PyTorch, the corpus)
set -euo pipefail
TRAIN=0
[ "${1:-}" = "--train" ] && TRAIN=1
PKGS=(
  build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  qemu-user-static nlohmann-json3-dev libcli11-dev libfmt-dev liburing-dev libpcre2-dev
  libcpp-httplib-dev libopenblas-dev libutf8proc-dev nodejs
  chromium
  libvulkan-dev glslc mesa-vulkan-drivers vulkan-tools
)
# tools/train/train_moe.py: Debian's CPU PyTorch, the regex module (the qwen2 pre-tokenizer's \p{L}),
# and the corpus: the King James Bible (bible-kjv-text, read through the bible program) and fortunes.
TRAIN_PKGS=(python3-torch python3-regex python3-numpy bible-kjv bible-kjv-text fortunes)
[ "$TRAIN" = 1 ] && PKGS+=("${TRAIN_PKGS[@]}")
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}"
fi
# npm (for the official openai client of the server's end-to-end test): Debian packages it
# apart from nodejs; other nodejs builds bring their own.
if ! command -v npm >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq npm
fi
echo "strata: dependencies present"
