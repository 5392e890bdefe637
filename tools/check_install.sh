#!/usr/bin/env bash
# The installed package, as an engine uses it: `cmake --install` the build into a scratch
# prefix, then configure, build and run examples/consumer against that prefix alone
# (find_package(attnjit CONFIG REQUIRED)). The consumer plans one shape of each op on the
# host and precompiles its kernel for sm_90a: no GPU needed. Run after a build
# (tools/test.sh); .ci/run does.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/env.sh
BUILD_DIR="${BUILD_DIR:-build}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
prefix="$scratch/prefix"

cmake --install "$BUILD_DIR" --prefix "$prefix" >/dev/null
cmake -S examples/consumer -B "$scratch/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
# Only the installed tree may be used: no header or library from this checkout.
if grep -q "$PWD/runtime\|$PWD/$BUILD_DIR" "$scratch/consumer/compile_commands.json"; then
  echo "check_install: the consumer compiles against the source tree, not the install" >&2
  exit 1
fi
cmake --build "$scratch/consumer" >/dev/null
# Fresh cache: every kernel compiles; again: every kernel is a hit; then the installed CLI
# verifies what the library stored.
"$scratch/consumer/attnjit_consumer" "$scratch/cache" | tee "$scratch/first.txt"
if grep -q "cache hit" "$scratch/first.txt"; then
  echo "check_install: a fresh cache had hits" >&2
  exit 1
fi
"$scratch/consumer/attnjit_consumer" "$scratch/cache" | tee "$scratch/again.txt"
if grep -q "compiled" "$scratch/again.txt"; then
  echo "check_install: a second run compiled again instead of hitting the cache" >&2
  exit 1
fi
"$prefix/bin/attnjit" cache verify --cache-dir "$scratch/cache"
echo "check_install: OK (prefix $prefix)"
