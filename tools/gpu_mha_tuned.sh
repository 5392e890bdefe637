#!/usr/bin/env bash
# mha_fwd tuned on every row of its benchmark, then the issue's ratio table through the
# runtime: `attnjit tune` sweeps the key tile of each row (the op's own candidates, pruned
# by MhaFwdConfig::validate), `attnjit bench mha_fwd` runs every row with the resulting DB
# (config = mha_fwd_selected_config's pick), and the PyTorch SDPA peers run in the same call.
#
#   tools/gpu_mha_tuned.sh [OUT_DIR]     (default: $OUT, else ./out; after tools/gpu_run.sh
#                                         has built $BUILD_DIR, default build-gpu)
#
# Writes OUT_DIR/{tuning.json, sweep.json, bench.jsonl, ratios.txt}.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-$PWD/out}}"
mkdir -p "$OUT_DIR"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
AJ="$BUILD_DIR/attnjit"
export ATTNJIT_CACHE_DIR="${ATTNJIT_CACHE_DIR:-$PWD/$BUILD_DIR/kernel-cache}"
DB="$OUT_DIR/tuning.json"
status=0

# The rows of `attnjit bench mha_fwd` (harness/mha_fwd_problem.cpp, mha_fwd_bench_cases()).
python3 - >"$OUT_DIR/shapes.json" <<'EOF'
import json
rows = []
for d, dv in ((64, 64), (128, 128), (256, 256), (192, 128)):
    for causal in (0, 1):
        for seq in (1024, 4096, 8192, 16384):
            h = 2048 // dv
            rows.append(dict(b=32768 // seq, s_q=seq, s_k=seq, h=h, h_kv=h, d=d, dv=dv,
                             causal=causal, dtype="bf16", group=0))
rows.append(dict(b=64, s_q=1, s_k=32768, h=16, h_kv=2, d=128, dv=128, causal=1, dtype="bf16", group=8))
print(json.dumps(rows))
EOF
echo '{"block_n": [64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256], "stages": [2], "num_splits": [0, 1, 2, 4, 8]}' >"$OUT_DIR/space.json"

t0=$(date +%s)
timeout -s KILL "${TUNE_TIMEOUT:-420}" "$AJ" tune --op mha_fwd --shapes "$OUT_DIR/shapes.json" \
  --space "$OUT_DIR/space.json" --db "$DB" --iters 20 --json >"$OUT_DIR/sweep.json" 2>"$OUT_DIR/sweep.log" || status=1
echo "sweep: $(( $(date +%s) - t0 )) s"

: >"$OUT_DIR/bench.jsonl"
ATTNJIT_TUNING_DB="$DB" timeout -s KILL 400 "$AJ" bench mha_fwd --json >>"$OUT_DIR/bench.jsonl" 2>>"$OUT_DIR/bench.err" || status=1
timeout -s KILL 300 python3 tools/bench_mha_torch.py >>"$OUT_DIR/bench.jsonl" 2>>"$OUT_DIR/bench.err" || status=1

python3 - "$OUT_DIR" <<'EOF' | tee "$OUT_DIR/ratios.txt"
import json, os, sys
sys.path.insert(0, "tools")
from summarize_results import mha_key, mha_ratios
out = sys.argv[1]
bench = [json.loads(l) for l in open(os.path.join(out, "bench.jsonl")) if l.strip()]
tile = {mha_key(b["shape"]): b["config"]["block_n"] for b in bench
        if b.get("op") == "mha_fwd" and "median_us" in b}
rows = mha_ratios(bench)
ok = sum(r["ratio"] >= 0.85 for r in rows)
print(f"mha_fwd with the tuned DB vs SDPA cuDNN (same call): {ok} of {len(rows)} rows >= 0.85")
for r in rows:
    print(f"  {r['row']:<40} block_n {tile[r['row']]:>3}  attnjit {r['attnjit_us']:9.1f} us"
          f"  cudnn {r['cudnn_us']:9.1f} us  ratio {r['ratio']:.2f}")
EOF
exit $status
