#!/usr/bin/env python3
"""PyTorch SDPA peer of `attnjit bench mha_fwd`, plus the machine's ceilings.

Prints JSON lines: one {"op": "mha_fwd_torch", "impl": ...} per shape and backend, and
{"op": "ceiling", "kind": "copy" | "matmul_bf16"} for the device-to-device copy rate and
an 8192^3 bf16 matmul, all measured in the same run.

Backends (what a PyTorch user gets from F.scaled_dot_product_attention, forced with
torch.nn.attention.sdpa_kernel): cudnn (SDPBackend.CUDNN_ATTENTION), flash
(SDPBackend.FLASH_ATTENTION), optionally efficient (EFFICIENT_ATTENTION). A backend that
refuses a shape (e.g. head dim 256, or d_qk 192 with d_v 128) gets a line with "error"
instead of numbers; the run goes on.

Layout: q/k/v are allocated [b, s, h, d] like attnjit's padded layout and handed to SDPA
as transpose(1, 2) views ([b, h, s, d] with the last dim contiguous, no copy).
Masks: causal rows have s_q = s_k, where SDPA's is_causal (top-left aligned) and
docs/design.md's bottom-right rule agree. GQA (the decode row): enable_gqa=True where the
torch version and backend take it; else K/V heads are expanded with repeat_interleave
inside the timed call (what a PyTorch user has to do each step); "gqa" says which.

Timing: CUDA events around each call, warm-up first, median of --iters, inputs rotated
over --sets copies so that no call finds its inputs in L2. FLOPs follow docs/performance.md:
2 * h * sum of visible (query, key) pairs * (d_qk + d_v), pairs = s_q * s_k per head and
sequence, s(s+1)/2 for causal at s_q = s_k. Bytes (for the memory-bound decode row) are
q + k + v read once + out written.

Self-contained: needs only torch (2.3+ for torch.nn.attention) on a CUDA machine.
"""
import argparse
import json
import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

HIDDEN = 2048
TOKENS = 32768


def default_shapes():
    """The issue's rows: seq 1k/4k/8k/16k at b * seq = 32k, hidden 2048, and one decode."""
    shapes = []
    for s in (1024, 4096, 8192, 16384):
        for d, dv in ((64, 64), (128, 128), (256, 256), (192, 128)):
            h = HIDDEN // dv  # (192, 128): 16 heads, as for d 128
            for causal in (0, 1):
                shapes.append(dict(b=TOKENS // s, s_q=s, s_k=s, h=h, h_kv=h, d=d, dv=dv,
                                   causal=causal))
    # Decode: one new token per sequence over a 32k cache, GQA 8 (h_q 16, h_kv 2), batch 64.
    shapes.append(dict(b=64, s_q=1, s_k=32768, h=16, h_kv=2, d=128, dv=128, causal=0))
    return shapes


SHAPE_KEYS = ("b", "s_q", "s_k", "h", "h_kv", "d", "dv", "causal", "dtype")


def full_shape(s):
    out = dict(dtype="bf16")
    out.update(s)
    out.setdefault("s_k", out.get("s_q"))
    out.setdefault("h_kv", out.get("h"))
    out.setdefault("dv", out.get("d"))
    out.setdefault("causal", 0)
    return out


def parse_shape(text):
    shape = {}
    for item in text.split(","):
        if "=" not in item:
            sys.exit(f"--shape: '{item}' is not key=value")
        k, v = item.split("=", 1)
        if k not in SHAPE_KEYS:
            sys.exit(f"--shape: unknown key '{k}' ({', '.join(SHAPE_KEYS)})")
        shape[k] = v if k == "dtype" else int(v)
    for k in ("b", "s_q", "h", "d"):
        if k not in shape:
            sys.exit(f"--shape: '{k}' is required")
    s = full_shape(shape)
    if s["causal"] and s["s_q"] != s["s_k"]:
        sys.exit("--shape: causal rows need s_q = s_k (SDPA's is_causal aligns top-left)")
    if s["h"] % s["h_kv"]:
        sys.exit("--shape: h must be a multiple of h_kv")
    return s


def commit():
    if os.environ.get("ATTNJIT_COMMIT"):
        return os.environ["ATTNJIT_COMMIT"]
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=here,
                              capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return "unknown"


def median_ms(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return times[len(times) // 2]


def visible_pairs(s):
    """Visible (query, key) pairs of one head of one sequence."""
    if s["causal"]:
        n = s["s_q"]  # s_q = s_k
        return n * (n + 1) // 2
    return s["s_q"] * s["s_k"]


def make_sets(s, n_sets, seed):
    """n_sets independent (q, k, v) in [b, s, h, d] (N(0,1), never zeros)."""
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[s["dtype"]]
    gen = torch.Generator("cuda").manual_seed(seed)
    sets = []
    for _ in range(n_sets):
        q = torch.randn((s["b"], s["s_q"], s["h"], s["d"]), device="cuda", dtype=dtype, generator=gen)
        k = torch.randn((s["b"], s["s_k"], s["h_kv"], s["d"]), device="cuda", dtype=dtype, generator=gen)
        v = torch.randn((s["b"], s["s_k"], s["h_kv"], s["dv"]), device="cuda", dtype=dtype, generator=gen)
        sets.append((q, k, v))
    return sets


def sdpa_call(q, k, v, causal, scale, gqa):
    """out [b, s_q, h, dv] from [b, s, h, d] inputs (views, no copies)."""
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    kw = {}
    if gqa == "enable_gqa":
        kw["enable_gqa"] = True
    elif gqa == "repeat_interleave":
        r = q.shape[2] // k.shape[2]
        kt = kt.repeat_interleave(r, dim=1)
        vt = vt.repeat_interleave(r, dim=1)
    out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(causal), scale=scale, **kw)
    return out.transpose(1, 2)


def reference_check(s, q, k, v, out, scale):
    """float64 rel-L2 over up to 64 query rows (the last included) of sequence 0, heads 0
    and h-1: the numbers reported come from a run that computes the right thing."""
    g = s["h"] // s["h_kv"]
    rows = torch.unique(torch.cat([torch.linspace(0, s["s_q"] - 1, 63).long(),
                                   torch.tensor([s["s_q"] - 1])])).to("cuda")
    num = den = 0.0
    for h in sorted({0, s["h"] - 1}):
        qh = q[0, rows, h].double()                  # [r, d]
        kh = k[0, :, h // g].double()                # [s_k, d]
        vh = v[0, :, h // g].double()                # [s_k, dv]
        sc = (qh @ kh.T) * scale
        if s["causal"]:
            j = torch.arange(s["s_k"], device="cuda")
            sc = sc.masked_fill(j[None, :] > (rows + s["s_k"] - s["s_q"])[:, None], float("-inf"))
        ref = torch.softmax(sc, dim=-1) @ vh
        d = out[0, rows, h].double() - ref
        num += float((d * d).sum())
        den += float((ref * ref).sum())
    return math.sqrt(num / den) if den > 0 else float("inf")


BACKENDS = {
    "cudnn": "CUDNN_ATTENTION",
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
}


def bench_shape(s, args, gpu, sha):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    scale = 1.0 / math.sqrt(s["d"])
    flops = 2.0 * s["b"] * s["h"] * visible_pairs(s) * (s["d"] + s["dv"])
    esize = 2
    bytes_moved = esize * s["b"] * (s["s_q"] * s["h"] * (s["d"] + s["dv"]) +
                                    s["s_k"] * s["h_kv"] * (s["d"] + s["dv"]))
    try:
        sets = make_sets(s, args.sets, 1234 + s["s_q"] * 7 + s["d"])
    except Exception as e:  # out of memory for a user-given shape
        print(json.dumps(dict(op="mha_fwd_torch", impl="all", gpu=gpu, commit=sha, shape=s,
                              error=f"{type(e).__name__}: {e}"[:500])), flush=True)
        return
    for name in args.impl.split(","):
        if name not in BACKENDS:
            sys.exit(f"--impl: unknown backend '{name}' ({', '.join(BACKENDS)})")
        backend = getattr(SDPBackend, BACKENDS[name])
        rec = dict(op="mha_fwd_torch", impl=name, gpu=gpu, commit=sha, torch=torch.__version__,
                   shape=s, layout="bshd")
        try:
            gqa = "none"
            if s["h"] != s["h_kv"]:
                gqa = "enable_gqa"
                try:
                    with sdpa_kernel(backend):
                        sdpa_call(*sets[0], s["causal"], scale, gqa)
                    torch.cuda.synchronize()
                except (TypeError, RuntimeError):
                    gqa = "repeat_interleave"  # this torch/backend takes no enable_gqa
                rec["gqa"] = gqa
            with sdpa_kernel(backend):
                q, k, v = sets[0]
                out = sdpa_call(q, k, v, s["causal"], scale, gqa)
                torch.cuda.synchronize()
                err = reference_check(s, q, k, v, out, scale)
                rec["check"] = dict(rel_l2=err, passed=bool(err <= 1e-2 and torch.isfinite(out).all()))
                del out
                turn = [0]

                def call():
                    qq, kk, vv = sets[turn[0] % len(sets)]
                    turn[0] += 1
                    sdpa_call(qq, kk, vv, s["causal"], scale, gqa)

                ms = median_ms(call, args.warmup, args.iters)
            rec.update(us=ms * 1e3, flops=flops, bytes=bytes_moved,
                       tflops=flops / (ms * 1e-3) / 1e12, gbps=bytes_moved / (ms * 1e-3) / 1e9)
        except Exception as e:  # the backend refuses this shape (or runs out of memory)
            rec["error"] = f"{type(e).__name__}: {e}"[:500]
        print(json.dumps(rec), flush=True)
        torch.cuda.empty_cache()
    del sets
    torch.cuda.empty_cache()


def ceilings(args, gpu, sha):
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), args.warmup, args.iters)
    print(json.dumps(dict(op="ceiling", kind="copy", gpu=gpu, commit=sha, bytes=2 * n,
                          us=ms * 1e3, gbps=2 * n / (ms * 1e-3) / 1e9)), flush=True)
    del src, dst
    m = 8192
    a = torch.randn((m, m), device="cuda", dtype=torch.bfloat16)
    b = torch.randn((m, m), device="cuda", dtype=torch.bfloat16)
    ms = median_ms(lambda: torch.matmul(a, b), max(args.warmup, 3), args.iters)
    print(json.dumps(dict(op="ceiling", kind="matmul_bf16", gpu=gpu, commit=sha, m=m, n=m, k=m,
                          us=ms * 1e3, tflops=2.0 * m ** 3 / (ms * 1e-3) / 1e12)), flush=True)
    del a, b
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", action="append",
                    help="b=..,s_q=..,h=..,d=..[,s_k=s_q,h_kv=h,dv=d,causal=0,dtype=bf16] "
                         "(repeatable; default: the issue's list)")
    ap.add_argument("--impl", default="cudnn,flash",
                    help="comma-separated SDPA backends: " + ", ".join(BACKENDS))
    ap.add_argument("--iters", type=int, default=30, help="timed calls (median; at least 10)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sets", type=int, default=2, help="input sets rotated (at least 2)")
    ap.add_argument("--no-ceilings", action="store_true")
    args = ap.parse_args()
    if args.iters < 10 or args.sets < 2:
        sys.exit("bench_mha_torch: --iters >= 10 and --sets >= 2 (median of enough runs, inputs "
                 "not L2-resident)")
    if not torch.cuda.is_available():
        sys.exit("bench_mha_torch: no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = torch.cuda.get_device_name(0)
    sha = commit()
    if not args.no_ceilings:
        ceilings(args, gpu, sha)
    shapes = [parse_shape(t) for t in args.shape] if args.shape else \
        [full_shape(s) for s in default_shapes()]
    for s in shapes:
        bench_shape(s, args, gpu, sha)


if __name__ == "__main__":
    main()
