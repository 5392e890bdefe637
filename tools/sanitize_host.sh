#!/usr/bin/env bash
# Host sanitizer builds (issue 23, drill 7), on a machine without a GPU:
#   asan: build-asan, AddressSanitizer + UndefinedBehaviorSanitizer, runs the whole CPU
#         test suite ("~[gpu]").
#   tsan: build-tsan, ThreadSanitizer, runs the tests that exercise threads: the
#         single-flight map under the kernel table ([threads]), the disk cache ([cache],
#         publish races, shared roots) and the tuning database / scheduler ([tune],
#         concurrent saves and the worker pool).
# Usage: tools/sanitize_host.sh [asan|tsan|all]   (default all)
# ASAN_TEST_FILTER appends to the asan run's Catch2 filter, e.g. "~[default-set]" to skip
# compiling every op's default set (NVRTC, not our code, is nearly all of that test's time).
# Any sanitizer report fails the run: UBSan does not recover, ASan/TSan exit non-zero,
# and a report from any process the tests start is printed and fails it (show_reports).
# With g++ (the compiler the project builds with); CXX=clang++ works too.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/env.sh
which="${1:-all}"
CXX="${CXX:-g++}"

# -O1: the sanitizers' reports keep usable stacks and the build is faster on 2 cores.
configure_build() {  # dir, flags
  local dir="$1" flags="$2"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$CXX" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null
  # attnjit_tests depends on the CLI and the tune test worker, which the tests start.
  cmake --build "$dir" --target attnjit_tests
}

# The tests start CLI processes (built with the same sanitizer) with their stderr
# discarded, so every process writes its reports to log_path files instead: printed here,
# and any report fails the run even where the test only saw a failed child.
show_reports() {  # dir, test exit status
  local logs="$1" rc="$2" f
  for f in "$logs"/*; do
    [ -e "$f" ] || continue
    echo "== sanitizer report: $(basename "$f") =="
    cat "$f"
    [ "$rc" -ne 0 ] || rc=1
  done
  rm -rf "$logs"
  return "$rc"
}

run_asan() {
  configure_build build-asan \
    "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
  # detect_leaks: a leak is a report too. NVRTC's own allocations are not ours: the
  # suppressions file names them.
  local logs; logs="$(mktemp -d)"
  local rc=0
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:log_path=$logs/asan" \
  LSAN_OPTIONS="suppressions=$PWD/tools/sanitizer/lsan.supp:print_suppressions=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan" \
    build-asan/tests/attnjit_tests "~[gpu]${ASAN_TEST_FILTER:-}" || rc=$?
  show_reports "$logs" "$rc"
}

run_tsan() {
  configure_build build-tsan "-fsanitize=thread -fno-omit-frame-pointer"
  local logs; logs="$(mktemp -d)"
  local rc=0
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tools/sanitizer/tsan.supp:log_path=$logs/tsan" \
    build-tsan/tests/attnjit_tests "[threads]~[gpu],[cache]~[gpu],[tune]~[gpu]" || rc=$?
  show_reports "$logs" "$rc"
}

case "$which" in
  asan) run_asan ;;
  tsan) run_tsan ;;
  all) run_asan; run_tsan ;;
  *) echo "usage: $0 [asan|tsan|all]" >&2; exit 2 ;;
esac
