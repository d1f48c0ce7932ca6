#!/usr/bin/env bash
# Runs the cross-built ARM64 tests on an emulated ARM64 CPU (qemu-user, Debian's qemu-user-static):
# CTest (`make test`) calls it once per CPU with the engine's test binary, `make test-arm64` with
# the whole suite and the CLI.
#
#   scripts/test-emulated-arm64.sh QEMU_CPU EXPECTED_TABLE ARM64_TESTS [ARM64_STRATA NATIVE_STRATA] [--light|--all]
#
#   cortex-a53 -> ARMv8.0-A, NEON without dotprod: auto-detection must pick "neon"
#   max        -> every extension qemu has (dotprod, i8mm, ...): it must pick "neon-dotprod"
# (the test binary also checks that the CPU it runs on has the features named here: STRATA_EXPECT_FEATURES)
#
# Checks, with the same assertions as natively on x86-64 (the NEON tables give the AVX2 table's
# bits, so the golden sets' bit-for-bit criteria hold as they are):
#  1. `strata --version` reports the expected table and why;
#  2. forcing a table the CPU lacks, or an x86 table, is a clear error, not SIGILL;
#  3. the kernel tests of every table the emulated CPU has (IsaDispatch among them: auto-detection
#     picks EXPECTED_TABLE and names what is missing, a table the CPU lacks or an x86 table cannot
#     be selected), and the golden suite on one set per architecture and per weight-type family
#     (F32, Q8_0, Q4_0, K-quants, i-quants, MXFP4), and the trained model against llama.cpp's
#     golden logits (TrainedModel.MatchesPeerGolden)
#     (--light: the kernel dispatch and golden-dot tests and 3 golden sets, for the CPU whose table
#     the other run's kernel tests already cover; --all: the whole test binary instead);
#  4. the trained model generates the same greedy tokens as the native x86-64 binary.
# Without ARM64_STRATA and NATIVE_STRATA (CI: ARM64_TESTS is strata-engine-tests, which needs no
# CLI), 1, 2 and 4 are left to the test binary's IsaDispatch and TrainedModel tests.
set -euo pipefail
usage="usage: $0 QEMU_CPU EXPECTED_TABLE ARM64_TESTS [ARM64_STRATA NATIVE_STRATA] [--light|--all]"
[ $# -ge 3 ] || { echo "$usage" >&2; exit 2; }
cpu=$1 want=$2 tests=$3 strata="" native=""
shift 3
if [ $# -ge 2 ] && [ "${1#--}" = "$1" ]; then
  strata=$1 native=$2
  shift 2
fi
mode=${1:-}
[ $# -le 1 ] || { echo "$usage" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
model=$root/models/strata-moe-tiny/model.gguf
QEMU=${QEMU:-qemu-aarch64-static}
fail() { echo "FAIL [arm64 $cpu]: $*" >&2; exit 1; }
. "$(dirname "$0")/emulated-tokens.sh"
command -v "$QEMU" >/dev/null || fail "$QEMU not found (Debian package qemu-user-static; scripts/install-deps.sh installs it)"
bins=("$tests")
[ -z "$strata" ] || bins+=("$strata")
for f in "${bins[@]}"; do
  [ -x "$f" ] || fail "$f: no ARM64 binary (make build-arm64 / build-arm64-ci cross-build it; scripts/install-deps.sh --arm64 installs the toolchain)"
done
[ -z "$strata" ] || [ -x "$native" ] || fail "$native: no native strata binary"
# QEMU_CPU rather than -cpu: the strata processes the tests start (through the cross build's
# bin/strata-emulated) inherit it.
export QEMU_CPU=$cpu
case $cpu in
  max) export STRATA_EXPECT_FEATURES="asimd dotprod i8mm" ;;
  *) export STRATA_EXPECT_FEATURES="asimd" ;;
esac
emu() { "$QEMU" "$@"; }

# 1. The table and the reason.
if [ -n "$strata" ]; then
  version=$(emu "$strata" --version) || fail "strata --version exited $?"
  echo "$version"
  grep -q "^kernels: $want (auto: " <<<"$version" || fail "expected 'kernels: $want (auto: ...)' in: $version"
fi

# 2. Tables the CPU lacks, forced: clear errors.
forced() {
  set +e
  out=$(emu "$strata" run -m "$model" -p "In the beginning" -n 1 --isa "$1" 2>&1)
  rc=$?
  set -e
  [ $rc = 1 ] || fail "--isa $1 exited $rc (expected 1, a clear error): $out"
  grep -q "$2" <<<"$out" || fail "--isa $1: the error does not say '$2': $out"
  echo "ok: --isa $1 -> $out"
}
if [ -n "$strata" ]; then
  forced avx2 "architecture"
  [ "$want" = neon ] && forced neon-dotprod "lacks dotprod"
fi

# 3. The test binary: a subset (CI) or all of it.
if [ "$mode" = --all ]; then
  STRATA_EXPECT_ISA=$want emu "$tests" --gtest_brief=1 || fail "the test suite failed"
elif [ "$mode" = --light ]; then
  filter='IsaDispatch.*:SimdGolden.VecDotMatchesLlamaCpp:IqGolden.*:LlamaDots.*:TrainedModel.MatchesPeerGolden'
  for s in mixtral_q8_0 deepseek2_q4_k_m qwen3moe_iq2_xxs; do filter+=":Fixtures/GoldenSuite.MatchesLlamaCpp/$s"; done
  STRATA_EXPECT_ISA=$want emu "$tests" --gtest_filter="$filter" --gtest_brief=1 || fail "the test subset failed"
else
  kernels='IsaDispatch.*:SimdGolden.*:IqGolden.*:SimdKernels.*:KernelAssociation.*:LlamaDots.*:ExpfTable.*'
  kernels+=':DotMulti.*:DotTile.*:AttnMulti.*:Ops.*:Golden/QuantGoldenTest.*:Matmul.*:QuantTraits.*:Sizes/QuantSizeTest.*'
  kernels+=':IqGrids.*:IqMalformed.*:TrainedModel.MatchesPeerGolden'
  # One set per architecture, and per weight family: F32, Q8_0 (most), Q4_0, the K-quants
  # (q4_k_m mixes Q4_K/Q6_K; q6_k; q2_k), i-quants (IQ4_XS, IQ2_XXS, IQ3_XXS), MXFP4.
  sets='qwen3moe_f32 mixtral_q8_0 mixtral_q4_0 deepseek2_q4_k_m qwen3moe_q6_k qwen3moe_q2_k qwen3moe_iq4_xs qwen3moe_iq2_xxs deepseek2_iq3_xxs
        gpt_oss_mxfp4_moe deepseek32_q8_0 deepseek4_q8_0 glm4moe_q8_0 minimax_m2_q8_0 qwen35moe_q8_0 qwen3_dense_q8_0'
  golden=""
  for s in $sets; do golden+=":Fixtures/GoldenSuite.MatchesLlamaCpp/$s"; done
  STRATA_EXPECT_ISA=$want emu "$tests" --gtest_filter="$kernels$golden" --gtest_brief=1 || fail "the test subset failed"
fi

# 4. The trained model: the same greedy tokens as the native x86-64 run.
[ -z "$strata" ] || same_greedy_tokens "$native" "$strata" x86-64
echo "emulated arm64 $cpu: all checks passed"
