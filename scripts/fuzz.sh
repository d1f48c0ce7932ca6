#!/usr/bin/env bash
# Runs the GGUF fuzzer for SECONDS on a scratch copy of the seed corpus (fuzz/corpus stays as
# committed). Prints the exec count; exits non-zero when the fuzzer finds a crash, a leak, an
# out-of-memory or a timeout (the reproducer is kept and its path printed).
# Usage: scripts/fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build=$1
seconds=$2
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$build/fuzz/fuzz_gguf
[ -x "$bin" ] || { echo "error: $bin not found (build with -DSTRATA_FUZZ=ON, e.g. make fuzz)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/strata-fuzz.XXXXXX")
mkdir -p "$work/corpus" "$work/artifacts"
cp "$root"/fuzz/corpus/* "$work/corpus/"
log=$work/fuzz.log

set +e
"$bin" "$work/corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" >"$log" 2>&1
rc=$?
set -e

execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' | tail -1 || true)
echo "fuzz_gguf: ${seconds}s, ${execs:-?} executions, exit code $rc"
if [ "$rc" -ne 0 ] || ls "$work/artifacts/"* >/dev/null 2>&1; then
  tail -n 40 "$log" >&2
  echo "full log: $log" >&2
  echo "error: fuzz_gguf found a failure; reproducer(s): $(ls "$work"/artifacts/* 2>/dev/null | tr '\n' ' ')" >&2
  exit 1
fi
grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true
rm -rf "$work"
echo "fuzz_gguf: clean"
