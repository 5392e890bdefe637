#!/usr/bin/env python3
"""Plain-PyTorch peer of `attnjit bench merge_states`.

Prints one JSON line {"op": "merge_states_torch", ...} per shape: the merge of two
attention states as a PyTorch user writes it (eager: max, two exps, a weighted sum, a
log), on the same shapes as the C++ bench (its tuning.bench_shapes), with inputs rotated
over enough copies to stay out of L2. GB/s counts the same bytes as the C++ bench: both
states and the merged state, values and lse, each once.

Timing: CUDA events around each call, warm-up first, median reported.
"""
import argparse
import json
import sys

import torch

from bench_mla_torch import commit, median_ms

# tokens, heads, head_dim, dtype, lse in log2 units (runtime/ops/merge_states/merge_states_tuning.cpp)
SHAPES = [(8192, 32, 128, torch.bfloat16, 0), (128, 128, 512, torch.bfloat16, 0),
          (1024, 16, 512, torch.float32, 0), (64, 32, 128, torch.bfloat16, 1)]
L2_BYTES = 60 << 20


def merge(va, la, vb, lb, log2):
    m = torch.maximum(la, lb)
    exp = torch.exp2 if log2 else torch.exp
    wa, wb = exp(la - m), exp(lb - m)
    s = wa + wb
    out = (va.float() * (wa / s).unsqueeze(-1) + vb.float() * (wb / s).unsqueeze(-1)).to(va.dtype)
    lse = m + (torch.log2(s) if log2 else torch.log(s))
    return out, lse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_merge_torch: no CUDA device")
    gpu, sha = torch.cuda.get_device_name(0), commit()
    for n, h, d, dtype, log2 in SHAPES:
        elem = torch.finfo(dtype).bits // 8
        nbytes = 3 * n * h * (d * elem + 4)
        copies = max(1, min(16, -(-4 * L2_BYTES // nbytes)))
        sets = [(torch.rand(n, h, d, device="cuda").to(dtype) * 2 - 1, torch.rand(n, h, device="cuda") * 16 - 8,
                 torch.rand(n, h, d, device="cuda").to(dtype) * 2 - 1, torch.rand(n, h, device="cuda") * 16 - 8)
                for _ in range(copies)]
        it = [0]

        def call():
            va, la, vb, lb = sets[it[0] % copies]
            it[0] += 1
            merge(va, la, vb, lb, log2)

        ms = median_ms(call, args.warmup, args.iters)
        print(json.dumps(dict(op="merge_states_torch", impl="eager", gpu=gpu, commit=sha, tokens=n, heads=h,
                              head_dim=d, dtype=str(dtype).replace("torch.", ""), lse_log2=log2,
                              median_us=ms * 1e3, gbps=nbytes / (ms * 1e-3) / 1e9)), flush=True)
        del sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
