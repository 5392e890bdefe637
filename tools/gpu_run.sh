#!/usr/bin/env bash
# The GPU machine's one command: build, run every [gpu] test (a skip is a failure
# here), run the benchmarks, and write logs + results.json to an output directory.
#
#   tools/gpu_run.sh [OUT_DIR]        (default: $OUT, else ./out)
#
# Environment: ATTNJIT_COMMIT (recorded when the tree has no .git), BUILD_DIR
# (default build-gpu), ATTNJIT_BENCH=0 to skip the benchmarks, ATTNJIT_TESTS=0 to skip the
# tests (a bench-only call when one call would exceed the lease's per-call limit; the
# summary then reports no test counts and FAILS), ATTNJIT_SANITIZE=1 to run
# tools/gpu_sanitize.sh (compute-sanitizer; known reports in tools/sanitizer_known.txt),
# TEST_FILTER (Catch2 filter for the GPU tests, default "[gpu]"), TUNE=1 to add the tuning
# sweep (tools/gpu_tune.sh).
#
# One call of everything outruns a lease's 600 s per call, so it runs in parts, each into
# its own OUT, merged afterwards by `tools/summarize_results.py MERGED PART_OUT...`:
# ATTNJIT_BENCH_ONLY="op ..." runs only those bench groups (dispatch, cache_load,
# mla_decode, mla_decode_sparse, mla_prefill_sparse, mla_decode_fp8, mla_decode_branch_fp8,
# mha_fwd, merge_states, tma_copy); ATTNJIT_BUILD=0 skips the build and runs the binaries
# already in BUILD_DIR (built elsewhere for this tree).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-$PWD/out}}"
mkdir -p "$OUT_DIR"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
export ATTNJIT_COMMIT="${ATTNJIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}"
export ATTNJIT_REQUIRE_GPU=1 ATTNJIT_REQUIRE_SASS=1
export ATTNJIT_CACHE_DIR="${ATTNJIT_CACHE_DIR:-$PWD/$BUILD_DIR/kernel-cache}"
status=0

echo "== GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT_DIR/gpu.txt"

if [ "${ATTNJIT_BUILD:-1}" != 0 ]; then
echo "== build ($BUILD_DIR)"
start=$(date +%s)
if ! { cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release &&
       cmake --build "$BUILD_DIR" -j "$(nproc)"; } >"$OUT_DIR/build.log" 2>&1; then
  tail -50 "$OUT_DIR/build.log"
  echo "BUILD FAILED"
  python3 tools/summarize_results.py "$OUT_DIR" --build-failed
  exit 1
fi
echo "built in $(( $(date +%s) - start )) s"
fi
# The commit may be stale in a copied tree; the templates digest names the kernel sources.
"$BUILD_DIR/attnjit" --version | tee "$OUT_DIR/version.txt"

if [ "${ATTNJIT_TESTS:-1}" != 0 ]; then
echo "== tests"
# CPU cases too: they prove the build with this machine's Catch2/CLI11 versions.
"$BUILD_DIR/tests/attnjit_tests" "~[gpu]" -r junit -o "$OUT_DIR/tests-cpu.xml" >"$OUT_DIR/tests-cpu.log" 2>&1 || status=1
# A hung kernel must not eat the whole lease: the GPU cases get a hard time limit.
timeout -s KILL "${TEST_TIMEOUT:-240}" "$BUILD_DIR/tests/attnjit_tests" "${TEST_FILTER:-[gpu]}" -r junit -o "$OUT_DIR/tests-gpu.xml" >"$OUT_DIR/tests-gpu.log" 2>&1 || status=1

fi

if [ "${ATTNJIT_BENCH:-1}" != 0 ]; then
  echo "== benchmarks"
  bench() { timeout -s KILL "${BENCH_TIMEOUT:-60}" "$BUILD_DIR/attnjit" bench "$@" --json >>"$OUT_DIR/bench.jsonl" 2>>"$OUT_DIR/bench.err" || { echo "bench $* failed"; status=1; }; }
  # wanted GROUP: this call runs GROUP's benchmarks (all of them without ATTNJIT_BENCH_ONLY).
  wanted() { [ -z "${ATTNJIT_BENCH_ONLY:-}" ] || [[ " $ATTNJIT_BENCH_ONLY " == *" $1 "* ]]; }
  : >"$OUT_DIR/bench.jsonl"
  if wanted dispatch; then bench dispatch; fi
  # Disk cache: fill a fresh cache, then time a fresh process's hits + loads (goal <= 5 ms).
  if wanted cache_load; then
    load_cache="$(mktemp -d)/cache"
    "$BUILD_DIR/attnjit" precompile --op tma_copy --cache-dir "$load_cache" --json >/dev/null 2>>"$OUT_DIR/bench.err" &&
      "$BUILD_DIR/attnjit" precompile --op tma_copy --cache-dir "$load_cache" --load --jobs 1 --json \
        | python3 -c 'import json,sys; j=json.load(sys.stdin); j["op"]="cache_load"; print(json.dumps(j))' \
        >>"$OUT_DIR/bench.jsonl" 2>>"$OUT_DIR/bench.err" || { echo "cache load timing failed"; status=1; }
  fi
  # mla_decode: the issue's shapes (each checked against the float64 reference first),
  # then the PyTorch peer and the machine's ceilings in the same call.
  if wanted mla_decode; then
    BENCH_TIMEOUT=300 bench mla_decode
    # The other schedule (softmax warpgroup + two P·V warpgroups), same shapes, same call.
    BENCH_TIMEOUT=300 bench mla_decode --config '{"schedule":"softmax_wg"}'
    timeout -s KILL 300 python3 tools/bench_mla_torch.py >>"$OUT_DIR/bench.jsonl" 2>>"$OUT_DIR/bench.err" || { echo "bench_mla_torch.py failed"; status=1; }
  fi
  # mla_decode_sparse: issue 20's rows in both cache layouts (each checked against float64
  # on sampled tokens first).
  if wanted mla_decode_sparse; then BENCH_TIMEOUT=400 bench mla_decode_sparse; fi
  # mla_prefill_sparse: issue 21's rows (each checked against float64 on sampled tokens).
  if wanted mla_prefill_sparse; then BENCH_TIMEOUT=400 bench mla_prefill_sparse; fi
  # mla_decode_fp8: issue 19's rows in every cache form, the default (narrow) kernel, then
  # the seesaw schedule (the fastest widening kernel, bf16 P′: the accuracy alternative).
  if wanted mla_decode_fp8; then
    BENCH_TIMEOUT=400 bench mla_decode_fp8
    BENCH_TIMEOUT=400 bench mla_decode_fp8 --config '{"schedule":1,"block_m":64,"block_n":64,"stages":2}'
  fi
  # mla_decode_branch_fp8: issue 22's rows, the whole branch and each stage alone (each
  # checked against the unfused float64 branch first), then the plain-PyTorch peer.
  if wanted mla_decode_branch_fp8; then
    BENCH_TIMEOUT=400 bench mla_decode_branch_fp8
    timeout -s KILL 300 python3 tools/bench_branch_torch.py >>"$OUT_DIR/bench.jsonl" 2>>"$OUT_DIR/bench.err" || { echo "bench_branch_torch.py failed"; status=1; }
  fi
  # mha_fwd: the issue's rows (each checked against the float64 reference first), then
  # PyTorch SDPA with the cuDNN and flash backends in the same call.
  if wanted mha_fwd; then
    BENCH_TIMEOUT=400 bench mha_fwd
    timeout -s KILL 400 python3 tools/bench_mha_torch.py >>"$OUT_DIR/bench.jsonl" 2>>"$OUT_DIR/bench.err" || { echo "bench_mha_torch.py failed"; status=1; }
  fi
  # merge_states: its rows (each checked against float64 first), then the PyTorch peer.
  if wanted merge_states; then
    bench merge_states
    timeout -s KILL 120 python3 tools/bench_merge_torch.py >>"$OUT_DIR/bench.jsonl" 2>>"$OUT_DIR/bench.err" || { echo "bench_merge_torch.py failed"; status=1; }
  fi
  if wanted tma_copy; then
    for dt in bf16 e4m3; do
      bench tma_copy --shape rows=16384,cols=16384,dtype=$dt
    done
    for sw in none 32B 64B 128B; do
      bench tma_copy --shape rows=16384,cols=8192,dtype=bf16 --config "{\"swizzle\":\"$sw\",\"block_n\":128}"
    done
    for cfg in '{"block_m":64,"block_n":256,"stages":4}' '{"block_m":128,"block_n":64,"stages":6}' \
               '{"block_m":256,"block_n":64,"stages":4}' '{"block_m":128,"block_n":128,"stages":3}' \
               '{"block_m":64,"block_n":64,"stages":8}'; do
      bench tma_copy --shape rows=16384,cols=8192,dtype=bf16 --config "$cfg"
    done
  fi
fi

# compute-sanitizer over every kernel family at small sizes; reports not in
# tools/sanitizer_known.txt fail the run (its own call on the lease: ATTNJIT_TESTS=0
# ATTNJIT_BENCH=0 ATTNJIT_SANITIZE=1).
if [ "${ATTNJIT_SANITIZE:-0}" = 1 ]; then
  echo "== sanitizers"
  bash tools/gpu_sanitize.sh "$BUILD_DIR/tests/attnjit_tests" "$OUT_DIR/sanitize"
  sanitize_rc=$?
  echo "$sanitize_rc" >"$OUT_DIR/sanitize-status.txt"  # read by summarize_results.py
  [ "$sanitize_rc" = 0 ] || status=1
fi

if [ "${TUNE:-0}" = 1 ]; then
  bash tools/gpu_tune.sh "$OUT_DIR/tune" || status=1
fi
python3 tools/summarize_results.py "$OUT_DIR" || status=1
exit $status
