#!/usr/bin/env bash
# Build-time guard: no instruction beyond the x86-64 baseline outside the per-ISA kernel objects,
# and no per-ISA object exports a weak (COMDAT) function that uses its ISA.
#
#   scripts/check-isa.sh [--arm64] ISA_REGEX DIR...
#
# --arm64: the objects are ARM64 ones (aarch64-linux-gnu-objdump), and past the ARMv8-A baseline means
# the dotprod, i8mm and bf16 instructions and SVE (z / p registers); the rest is the same.
#
# Every object file under each DIR is disassembled (objdump -d):
#  - an object whose path does not match ISA_REGEX (an extended regex, e.g. 'kernels/avx2/') must
#    contain no AVX, AVX2, AVX-512, FMA, F16C or BMI instruction, nor a ymm/zmm/mask register;
#  - an object whose path matches may use them, but not in a weak function (an inline function or a
#    template instantiated there): the linker keeps one copy of each weak function for the whole
#    program, and the copy compiled for AVX-512 may be the one an AVX2 or baseline caller gets.
# Prints each offending object and function, and exits 1 on any.
set -euo pipefail
arm64=0
if [ "${1:-}" = --arm64 ]; then arm64=1; shift; fi
[ $# -ge 2 ] || { echo "usage: $0 [--arm64] ISA_REGEX DIR..." >&2; exit 2; }
regex=$1
shift
OBJDUMP=objdump NM=nm
if [ $arm64 = 1 ] && [ "$(uname -m)" != aarch64 ]; then OBJDUMP=aarch64-linux-gnu-objdump NM=aarch64-linux-gnu-nm; fi
command -v $OBJDUMP >/dev/null || { echo "check-isa: $OBJDUMP not found (binutils)" >&2; exit 2; }

# Mnemonics past the baseline: every VEX/EVEX vector instruction starts with 'v' (the few system
# instructions that also do are excluded), plus BMI1/BMI2's general-register instructions.
# (tzcnt is not listed: the compiler emits 'rep bsf' for generic x86-64, which decodes as tzcnt
# and runs as bsf on older CPUs.)
awk_prog='
  function flag(why) {
    if (!(fn in seen)) { printf "%s: %s: %s\n", obj, fn, why; seen[fn] = 1 }
    bad = 1
  }
  /^[0-9a-f]+ <.*>:$/ { fn = $2; sub(/^</, "", fn); sub(/>:$/, "", fn); next }
  /^ *[0-9a-f]+:\t/ {
    n = split($0, f, "\t"); if (n < 2) next
    ins = f[2]; split(ins, w, " "); m = w[1]
    if (m ~ /^(lock|rep|repz|repnz|notrack|bnd|data16|cs|ds|es|ss|fs|gs)$/) m = w[2]
    hit = 0
    if (arm64) {
      if (m ~ /^(sdot|udot|usdot|sudot|smmla|ummla|usmmla|bfdot|bfmmla|bfmlalb|bfmlalt|bfcvt|bfcvtn|bfcvtn2)$/ || ins ~ /[ ,{]z[0-9]+\./ || ins ~ /[ ,{]p[0-9]+\//) hit = 1
    } else {
    if (m ~ /^v/ && m !~ /^(verr|verw|vmcall|vmlaunch|vmresume|vmxoff|vmxon|vmread|vmwrite|vmptrld|vmptrst|vmclear|vmfunc|vmrun|vmload|vmsave|vmmcall)$/) hit = 1
    if (m ~ /^(andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx|kmov[bwdq]|kand[bwdq]?|kor[bwdq]?)$/) hit = 1
    if (ins ~ /%[yz]mm[0-9]/ || ins ~ /%k[0-7]([^0-9]|$)/) hit = 1
    }
    if (!hit) next
    if (!isa_obj) flag("uses " m " (outside the per-ISA kernel objects)")
    else if (fn in weak) flag("weak function uses " m " (the linker may give this copy to other callers)")
  }
  END { exit bad }
'
status=0
for dir in "$@"; do
  [ -d "$dir" ] || { echo "check-isa: $dir: not a directory" >&2; exit 2; }
  while IFS= read -r -d '' obj; do
    isa_obj=0
    [[ "$obj" =~ $regex ]] && isa_obj=1
    weak=""
    if [ $isa_obj = 1 ]; then
      weak=$($NM --defined-only "$obj" | awk '$2 ~ /^[WVu]$/ { print $3 }' | tr '\n' ' ')
    fi
    if ! $OBJDUMP -d --no-show-raw-insn "$obj" |
        awk -v obj="$obj" -v isa_obj="$isa_obj" -v weaklist="$weak" -v arm64="$arm64" \
          'BEGIN { n = split(weaklist, a, " "); for (i = 1; i <= n; ++i) weak[a[i]] = 1 }'"$awk_prog"; then
      status=1
    fi
  done < <(find "$dir" -name '*.o' -print0 | sort -z)
done
[ $status = 0 ] || echo "check-isa: instructions beyond the baseline leak out of the per-ISA kernels (see above)" >&2
exit $status
