# Sourced by scripts/test-emulated.sh and test-emulated-arm64.sh, which define emu (run under qemu),
# fail and $model (the trained model).
# same_greedy_tokens NATIVE_STRATA EMULATED_STRATA LABEL: 8 greedy tokens of the trained model under
# emu equal the native binary's.
greedy_tokens() {
  "$@" run -m "$model" -p "And God said unto Moses," -n 8 --temp 0 -c 128 --json 2>/dev/null |
    node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s.trim().split("\n").pop()).tokens.join(" ")))'
}
same_greedy_tokens() {
  local want got
  want=$(greedy_tokens "$1") || fail "native strata run failed"
  got=$(greedy_tokens emu "$2") || fail "emulated strata run failed"
  [ "$want" = "$got" ] || fail "greedy tokens differ: native $3 $want, emulated $got"
  echo "ok: greedy tokens on the trained model as native $3: $got"
}
