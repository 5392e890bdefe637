#!/usr/bin/env bash
# ncu profile of one mha_fwd row, ours against PyTorch SDPA's cuDNN kernel on the same shape
# (GPU machine; reads the hardware counters, leaves the clocks alone).
#
#   tools/ncu_mha.sh NAME B SEQ H D CAUSAL CONFIG_JSON [OUT_DIR]
#   e.g. tools/ncu_mha.sh d64_1k 32 1024 32 64 0 '{"block_n":208,"stages":3,"persistent":true}'
#
# Writes NAME.details.txt (speed of light, pipes, scheduler and warp-state statistics,
# instruction counts), NAME.source.csv (per-SASS-instruction executions and stall samples)
# and cudnn_NAME.details.txt. Environment: BUILD_DIR (default build-gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 b=$2 seq=$3 h=$4 d=$5 causal=$6 config=$7
out=${8:-${OUT:-$PWD/out}}
mkdir -p "$out"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats
          --section WarpStateStats --section SchedulerStats --section LaunchStats
          --section Occupancy --section MemoryWorkloadAnalysis)
ncu_run() { ncu --clock-control none --target-processes all "${sections[@]}" "$@"; }

# Ours: the third launch of the kernel (after the bench's reference check and warm-up).
ncu_run --section SourceCounters --kernel-name-base mangled -k regex:mha_fwd6kernel -s 2 -c 1 \
  -o "$out/$name" "$BUILD_DIR/attnjit" bench mha_fwd \
  --shape "b=$b,seq=$seq,h=$h,d=$d,causal=$causal" --config "$config" >"$out/$name.run" 2>&1
ncu -i "$out/$name.ncu-rep" --page details >"$out/$name.details.txt"
ncu -i "$out/$name.ncu-rep" --page source --csv --print-source sass >"$out/$name.source.csv"

# cuDNN: one SDPA call inside a profiler range, after warm-up.
cat >"$out/cudnn_once.py" <<'PY'
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
b, s, h, d, causal = (int(x) for x in sys.argv[1:6])
q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
           for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3):
        F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
PY
ncu_run --profile-from-start off -o "$out/cudnn_$name" \
  python3 "$out/cudnn_once.py" "$b" "$seq" "$h" "$d" "$causal" >"$out/cudnn_$name.run" 2>&1
ncu -i "$out/cudnn_$name.ncu-rep" --page details >"$out/cudnn_$name.details.txt"
rm -f "$out/$name.ncu-rep" "$out/cudnn_$name.ncu-rep" "$out/cudnn_once.py"
echo "wrote $out/$name.details.txt, $out/$name.source.csv, $out/cudnn_$name.details.txt"
