#!/usr/bin/env bash
# Installs every build/test dependency of Strata from Debian 12 packages (by name).
#   scripts/install-deps.sh          what ./bootstrap demo|test need (the trained demo model is committed)
#   scripts/install-deps.sh --train  also what tools/train/ needs to retrain it (CPU PyTorch, the corpus)
#   scripts/install-deps.sh --arm64  also the ARM64 cross build's (make test runs it under qemu; make test-arm64)
set -euo pipefail
TRAIN=0
ARM64=0
[ "${1:-}" = "--train" ] && TRAIN=1
[ "${1:-}" = "--arm64" ] && ARM64=1
PKGS=(
  build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  qemu-user-static nlohmann-json3-dev libcli11-dev libfmt-dev liburing-dev libpcre2-dev
  libcpp-httplib-dev libopenblas-dev libutf8proc-dev nodejs
  libopenmpi-dev openmpi-bin libnuma-dev
  chromium haproxy curl
  libvulkan-dev glslc mesa-vulkan-drivers vulkan-tools
)
# tools/train/train_moe.py: Debian's CPU PyTorch, the regex module (the qwen2 pre-tokenizer's \p{L}),
# and the corpus: the King James Bible (bible-kjv-text, read through the bible program) and fortunes.
TRAIN_PKGS=(python3-torch python3-regex python3-numpy bible-kjv bible-kjv-text fortunes)
[ "$TRAIN" = 1 ] && PKGS+=("${TRAIN_PKGS[@]}")
# The ARM64 cross build that `make test` and `make test-arm64` run under qemu
# (cmake/aarch64-linux-gnu.cmake): Debian's cross compiler, and the libraries Strata links as Debian
# multiarch :arm64 packages (headers are shared with the host's; gtest, fmt, pcre2, uring, utf8proc,
# httplib and its TLS/compression libraries come along; the Vulkan loader's package only because
# CMake's FindVulkan wants the library beside the headers the GPU tier compiles against). Needs the
# arm64 architecture added to dpkg (done below when missing). Installed without their recommended
# packages (libvulkan1 would bring Mesa's drivers and LLVM for arm64, which nothing here runs).
ARM64_PKGS=(g++-aarch64-linux-gnu libgtest-dev:arm64 libfmt-dev:arm64 liburing-dev:arm64 libpcre2-dev:arm64
            libutf8proc-dev:arm64 libcpp-httplib-dev:arm64 libbenchmark-dev:arm64 libvulkan-dev:arm64)
missing_of() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
mapfile -t missing < <(missing_of "${PKGS[@]}")
missing_arm64=()
[ "$ARM64" = 1 ] && mapfile -t missing_arm64 < <(missing_of "${ARM64_PKGS[@]}")
if [ $((${#missing[@]} + ${#missing_arm64[@]})) -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  if [ ${#missing_arm64[@]} -gt 0 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64
  fi
  $SUDO apt-get update -qq
  [ ${#missing[@]} -eq 0 ] || $SUDO apt-get install -y -qq "${missing[@]}"
  [ ${#missing_arm64[@]} -eq 0 ] || $SUDO apt-get install -y -qq --no-install-recommends "${missing_arm64[@]}"
fi
# npm (for the official openai client of the server's end-to-end test): Debian packages it
# apart from nodejs; other nodejs builds bring their own.
if ! command -v npm >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq npm
fi
echo "strata: dependencies present"
