#!/usr/bin/env bash
# The first command on a fresh machine: installs dependencies, builds, and runs the demo
# (on a GPU: launches tma_copy and checks it bit for bit; without one: compiles every
# op's default kernel set and says so).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
source tools/env.sh
BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}"
cmake --build "$BUILD_DIR"
"$BUILD_DIR/attnjit" demo
