#!/usr/bin/env bash
# The test command: builds (if needed) and runs every test through ctest. Without a GPU
# the [gpu] cases print "SKIPPED (no GPU)"; on a GPU machine use tools/gpu_run.sh, where a
# skip is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/env.sh
BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build "$BUILD_DIR"
ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
