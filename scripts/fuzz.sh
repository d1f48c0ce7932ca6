#!/usr/bin/env bash
# Runs the fuzzers on scratch copies of their seed corpora (fuzz/corpus* stay as committed):
# fuzz_gguf (the GGUF reader) for SECONDS on fuzz/corpus, fuzz_trace (routing traces and their
# replay in cachesim) for SECONDS/3 on fuzz/corpus-trace, fuzz_grammar (GBNF text, JSON schemas
# and matcher steps) for SECONDS/4 on fuzz/corpus-grammar, fuzz_toolcall (the tool-call output
# parsers) for SECONDS/4 on fuzz/corpus-toolcall, fuzz_request (the OpenAI request parsers) for
# SECONDS/6 on fuzz/corpus-request (inputs up to 1 MiB), fuzz_model (Model::load over the golden sets
# with metadata and tensor shapes overwritten) for SECONDS/6 on fuzz/corpus-model, fuzz_calibration (the
# --quality-budget calibration file and calibrate's knob specs) for SECONDS/6 on fuzz/corpus-calibration. Prints each exec count; exits non-zero
# when a fuzzer finds a crash, a leak, an out-of-memory or a timeout (the reproducer is kept and
# its path printed).
# Usage: scripts/fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build=$1
seconds=$2
root=$(cd "$(dirname "$0")/.." && pwd)

run_fuzzer() {  # NAME CORPUS_DIR SECONDS MAX_LEN
  local name=$1 corpus=$2 secs=$3 max_len=$4
  local bin=$build/fuzz/$name
  [ -x "$bin" ] || { echo "error: $bin not found (build with -DSTRATA_FUZZ=ON, e.g. make fuzz)" >&2; exit 2; }
  local work
  work=$(mktemp -d "${TMPDIR:-/tmp}/strata-fuzz.XXXXXX")
  mkdir -p "$work/corpus" "$work/artifacts"
  cp "$corpus"/* "$work/corpus/"
  local log=$work/fuzz.log
  set +e
  "$bin" "$work/corpus" -max_total_time="$secs" -rss_limit_mb=2048 -max_len="$max_len" -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" >"$log" 2>&1
  local rc=$?
  set -e
  local execs
  execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' | tail -1 || true)
  echo "$name: ${secs}s, ${execs:-?} executions, exit code $rc"
  if [ "$rc" -ne 0 ] || ls "$work/artifacts/"* >/dev/null 2>&1; then
    tail -n 40 "$log" >&2
    echo "full log: $log" >&2
    echo "error: $name found a failure; reproducer(s): $(ls "$work"/artifacts/* 2>/dev/null | tr '\n' ' ')" >&2
    exit 1
  fi
  grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true
  rm -rf "$work"
  echo "$name: clean"
}

run_fuzzer fuzz_gguf "$root/fuzz/corpus" "$seconds" 65536
run_fuzzer fuzz_trace "$root/fuzz/corpus-trace" "$(( seconds / 3 > 1 ? seconds / 3 : 1 ))" 16384
run_fuzzer fuzz_grammar "$root/fuzz/corpus-grammar" "$(( seconds / 4 > 1 ? seconds / 4 : 1 ))" 4096
run_fuzzer fuzz_toolcall "$root/fuzz/corpus-toolcall" "$(( seconds / 4 > 1 ? seconds / 4 : 1 ))" 4096
run_fuzzer fuzz_request "$root/fuzz/corpus-request" "$(( seconds / 6 > 1 ? seconds / 6 : 1 ))" 1048576
run_fuzzer fuzz_model "$root/fuzz/corpus-model" "$(( seconds / 6 > 1 ? seconds / 6 : 1 ))" 4096
run_fuzzer fuzz_calibration "$root/fuzz/corpus-calibration" "$(( seconds / 6 > 1 ? seconds / 6 : 1 ))" 16384
