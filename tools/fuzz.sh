#!/usr/bin/env bash
# Fuzzing (issue 23, drill 6): builds the libFuzzer targets of tests/fuzz with clang,
# ASan and UBSan (build-fuzz, ATTNJIT_FUZZ=ON) and runs each for SECONDS (default 60; the
# long form is 600) on a copy of its seed corpus, tests/fuzz/corpus/<target>/.
#   tools/fuzz.sh [SECONDS] [TARGET...]
# Fails on the first crash, sanitizer report or broken invariant; the input that caused
# it is kept under $FUZZ_OUT (default build-fuzz/out/<target>/) for a regression seed.
# Prints one line per target: execs, seconds, corpus size. FUZZ_MERGE=1 merges what the
# run found back into the repository's corpus (minimized; do this after a long run).
# FUZZ_PARALLEL=N runs N targets at once.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/env.sh
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_config fuzz_manifest fuzz_tuning_db fuzz_entry_meta fuzz_shape)
BUILD_DIR="${FUZZ_BUILD_DIR:-build-fuzz}"
out_root="${FUZZ_OUT:-$BUILD_DIR/out}"

# Tests and the CLI are not needed: only the library and the targets are instrumented.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="${FUZZ_CXX:-clang++}" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DATTNJIT_FUZZ=ON -DATTNJIT_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD_DIR" --target "${targets[@]}"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# One target: a copy of its seeds as the working corpus, SECONDS of fuzzing, a line of
# figures. -rss_limit_mb: a parser that allocates without bound is a finding too.
run_one() {
  local t="$1" seeds="tests/fuzz/corpus/$1" work="$out_root/$1"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp "$seeds"/* "$work/corpus/" 2>/dev/null || true
  local log="$work/log.txt" start=$SECONDS
  if "$BUILD_DIR/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=8192 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
      "$work/corpus" >"$log" 2>&1; then
    local execs
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
    echo "fuzz $t: ok, ${execs:-?} execs in $((SECONDS - start))s, 0 crashes," \
         "corpus $(ls "$work/corpus" | wc -l) inputs ($(ls "$seeds" | wc -l) seeds)"
    if [ "${FUZZ_MERGE:-0}" = 1 ]; then
      "$BUILD_DIR/tests/fuzz/$t" -merge=1 "$seeds" "$work/corpus" >"$work/merge.txt" 2>&1
    fi
  else
    echo "fuzz $t: FAILED after $((SECONDS - start))s; input in $work/artifacts/, log $log:"
    grep -E "ERROR|FINDING|runtime error|SUMMARY|what\(\)" "$log" | head -20 || tail -30 "$log"
    return 1
  fi
}

# FUZZ_PARALLEL targets at a time (default 1: CI's 2 cores also run other work).
status=0
pids=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge "${FUZZ_PARALLEL:-1}" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
