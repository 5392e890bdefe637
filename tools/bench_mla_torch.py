#!/usr/bin/env python3
"""Plain-PyTorch peer of `attnjit bench mla_decode`, plus the machine's ceilings.

Prints JSON lines: one {"op": "mla_decode_torch", "impl": ...} per shape and
implementation, and {"op": "ceiling", "kind": "copy" | "matmul_bf16"} for the
device-to-device copy rate and an 8192^3 bf16 matmul, all measured in the same run.

Implementations (both what a PyTorch user would write; heads are folded into query rows
since the latent KV head is shared by all h heads, as in MQA):
  bmm  - gather pages by the block table, scores = bmm(q, K^T) [b, q_len*h, s], masked
         fp32 softmax, out = bmm(P, V) with V = the first 512 dims of each cache row;
  sdpa - the same gather, then F.scaled_dot_product_attention with a 576-dim K, a
         512-dim V and a boolean mask (PyTorch picks the backend).
Masking follows docs/design.md: cache length L includes the q_len new tokens; query t sees
keys 0 .. L - q_len + t; a row with no key gives 0.

Timing: CUDA events around each call (gather and mask included: they are part of the
work in plain PyTorch), warm-up first, median reported. GB/s and TFLOP/s use the same
conventions as the C++ bench (cache rows read once + q + out; 2 * pairs * (576 + 512)).

Self-contained: needs only torch (2.x) on a CUDA machine.
"""
import argparse
import json
import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

D_QK, D_V = 576, 512
SCALE = 1.0 / math.sqrt(192.0)

DEFAULT_SHAPES = [
    dict(b=128, q_len=1, h=16, s_k=4096),
    dict(b=128, q_len=2, h=16, s_k=8192),
    dict(b=128, q_len=1, h=64, s_k=8192),
    dict(b=128, q_len=1, h=128, s_k=4096),
    dict(b=128, q_len=2, h=128, s_k=4096),
    dict(b=8, q_len=1, h=128, s_k=32768),
    dict(b=128, q_len=1, h=128, s_k=8192, varlen=1),
]
SHAPE_KEYS = ("b", "q_len", "h", "s_k", "page", "dtype", "splits", "varlen")


def parse_shape(text):
    shape = dict(page=64, dtype="bf16", splits=0, varlen=0)
    for item in text.split(","):
        if "=" not in item:
            sys.exit(f"--shape: '{item}' is not key=value")
        k, v = item.split("=", 1)
        if k not in SHAPE_KEYS:
            sys.exit(f"--shape: unknown key '{k}' ({', '.join(SHAPE_KEYS)})")
        shape[k] = v if k == "dtype" else int(v)
    for k in ("b", "q_len", "h", "s_k"):
        if k not in shape:
            sys.exit(f"--shape: '{k}' is required")
    return shape


def full_shape(s):
    out = dict(page=64, dtype="bf16", splits=0, varlen=0)
    out.update(s)
    return out


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


def make_inputs(s, gen):
    """Random q, a permuted paged cache, block table, lengths (each >= q_len)."""
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[s["dtype"]]
    b, ql, h, s_k, page = s["b"], s["q_len"], s["h"], s["s_k"], s["page"]
    if s["varlen"]:
        lo = max(s_k // 4, ql)
        lens = torch.randint(lo, s_k + 1, (b,), generator=gen)
    else:
        lens = torch.full((b,), s_k, dtype=torch.int64)
    pages_per_seq = (lens + page - 1) // page
    num_pages = int(pages_per_seq.sum())
    max_pages = (s_k + page - 1) // page
    perm = torch.randperm(num_pages, generator=gen)
    table = torch.zeros((b, max_pages), dtype=torch.int32)
    start = 0
    for i in range(b):
        n = int(pages_per_seq[i])
        table[i, :n] = perm[start:start + n].to(torch.int32)
        start += n
    dev = "cuda"
    cache = torch.randn((num_pages, page, D_QK), device=dev, dtype=dtype,
                        generator=torch.Generator(dev).manual_seed(int(gen.initial_seed()) + 1))
    q = torch.randn((b, ql, h, D_QK), device=dev, dtype=dtype,
                    generator=torch.Generator(dev).manual_seed(int(gen.initial_seed()) + 2))
    return q, cache, table.to(dev), lens.to(dev, torch.int32), lens


# The bench's lengths are all >= q_len, so every row sees key 0 and no softmax row is
# all -inf. Rows past a sequence's length (the rest of its last page, or page 0 through
# the table's padding) hold finite data here: masked to probability 0 they add 0 · finite.


def visible_mask(lens, q_len, s_max):
    """[b, q_len, 1, s_max] bool: query t of sequence b sees keys j <= L_b - q_len + t."""
    t = torch.arange(q_len, device=lens.device)
    last = lens[:, None].long() - q_len + t[None, :]  # [b, q_len]: last visible key
    j = torch.arange(s_max, device=lens.device)
    return (j[None, None, :] <= last[:, :, None])[:, :, None, :]


def gather(cache, table, s_max):
    """[b, s_max, 576]: each sequence's cache rows in order, through the block table."""
    page = cache.shape[1]
    pages = (s_max + page - 1) // page
    kv = cache[table[:, :pages].long()]  # [b, pages, page, 576]
    return kv.reshape(table.shape[0], pages * page, D_QK)[:, :s_max]


def mla_bmm(q, cache, table, lens, s_max, scale, scores_fp32):
    b, ql, h, _ = q.shape
    kv = gather(cache, table, s_max)
    qr = q.reshape(b, ql * h, D_QK)  # heads folded into query rows: one K for all of them
    if scores_fp32:
        scores = torch.bmm(qr, kv.transpose(1, 2), out_dtype=torch.float32)
    else:
        scores = torch.bmm(qr, kv.transpose(1, 2)).float()
    scores = scores.mul_(scale).view(b, ql, h, s_max)
    scores.masked_fill_(~visible_mask(lens, ql, s_max), float("-inf"))
    p = torch.softmax(scores.view(b, ql * h, s_max), dim=-1)
    out = torch.bmm(p.to(q.dtype), kv[..., :D_V])  # [b, q_len*h, 512]
    return out.view(b, ql, h, D_V)


def mla_sdpa(q, cache, table, lens, s_max, scale):
    b, ql, h, _ = q.shape
    kv = gather(cache, table, s_max)
    m = visible_mask(lens, ql, s_max)  # [b, q_len, 1, s]
    if ql == 1:
        mask = m  # broadcasts as [b, 1, 1, s]
    else:
        mask = m.expand(-1, -1, h, -1).reshape(b, 1, ql * h, s_max)
    out = F.scaled_dot_product_attention(
        q.reshape(b, 1, ql * h, D_QK), kv[:, None], kv[:, None, :, :D_V],
        attn_mask=mask, scale=scale)
    return out.view(b, ql, h, D_V)


def reference_rows(q, cache, table, lens_host, scale, seqs):
    """float64 answer for sequences `seqs`: {i: [q_len, h, 512]}."""
    res = {}
    ql, h = q.shape[1], q.shape[2]
    for i in seqs:
        L = int(lens_host[i])
        page = cache.shape[1]
        rows = torch.cat([cache[int(table[i, p])] for p in range((L + page - 1) // page)])[:L]
        k = rows.double()
        qi = q[i].double().reshape(ql * h, D_QK)
        s = (qi @ k.T) * scale
        t = torch.arange(ql, device=q.device).repeat_interleave(h)
        j = torch.arange(L, device=q.device)
        m = j[None, :] <= (L - ql + t)[:, None]
        s = s.masked_fill(~m, float("-inf"))
        p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
        res[i] = (p @ k[:, :D_V]).reshape(ql, h, D_V)
    return res


def rel_l2(out, ref):
    num = den = 0.0
    for i, r in ref.items():
        d = out[i].double() - r
        num += float((d * d).sum())
        den += float((r * r).sum())
    return math.sqrt(num / den) if den > 0 else float("inf")


def bench_shape(s, args, gpu, sha):
    gen = torch.Generator().manual_seed(1234 + s["b"] * 31 + s["s_k"])
    q, cache, table, lens, lens_host = make_inputs(s, gen)
    s_max = int(lens_host.max())
    pairs = 0
    for L in lens_host.tolist():
        for t in range(s["q_len"]):
            pairs += s["h"] * max(0, min(L, L - s["q_len"] + t + 1))
    esize = q.element_size()
    bytes_moved = (int(lens_host.sum()) * D_QK + q.numel() + q.numel() // D_QK * D_V) * esize
    flops = 2.0 * pairs * (D_QK + D_V)
    ref = reference_rows(q, cache, table, lens_host, SCALE, sorted({0, s["b"] - 1}))

    scores_fp32 = True
    try:
        mla_bmm(q, cache, table, lens, s_max, SCALE, True)
    except (TypeError, RuntimeError):
        scores_fp32 = False  # this torch has no out_dtype: bf16 scores
    impls = {
        "bmm": lambda: mla_bmm(q, cache, table, lens, s_max, SCALE, scores_fp32),
        "sdpa": lambda: mla_sdpa(q, cache, table, lens, s_max, SCALE),
    }
    for name in args.impl.split(","):
        rec = dict(op="mla_decode_torch", impl=name, gpu=gpu, commit=sha, torch=torch.__version__,
                   shape=full_shape(s))
        if name == "bmm":
            rec["scores_dtype"] = "f32" if scores_fp32 else str(q.dtype).replace("torch.", "")
        try:
            out = impls[name]()
            torch.cuda.synchronize()
            err = rel_l2(out, ref)
            rec["check"] = dict(rel_l2=err, passed=bool(err <= 1e-2 and torch.isfinite(out).all()),
                                sequences=sorted(ref))
            del out
            ms = median_ms(impls[name], args.warmup, args.iters)
            rec.update(median_us=ms * 1e3, bytes=bytes_moved, flops=flops,
                       gbps=bytes_moved / (ms * 1e-3) / 1e9, tflops=flops / (ms * 1e-3) / 1e12)
        except Exception as e:  # e.g. out of memory, or no SDPA backend for this shape
            rec["error"] = f"{type(e).__name__}: {e}"[:500]
        print(json.dumps(rec), flush=True)
        torch.cuda.empty_cache()


def ceilings(args, gpu, sha):
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), args.warmup, args.iters)
    print(json.dumps(dict(op="ceiling", kind="copy", gpu=gpu, commit=sha, bytes=2 * n,
                          median_us=ms * 1e3, gbps=2 * n / (ms * 1e-3) / 1e9)), flush=True)
    del src, dst
    m = 8192
    a = torch.randn((m, m), device="cuda", dtype=torch.bfloat16)
    b = torch.randn((m, m), device="cuda", dtype=torch.bfloat16)
    ms = median_ms(lambda: torch.matmul(a, b), max(args.warmup, 3), args.iters)
    print(json.dumps(dict(op="ceiling", kind="matmul_bf16", gpu=gpu, commit=sha, m=m, n=m, k=m,
                          median_us=ms * 1e3, tflops=2.0 * m ** 3 / (ms * 1e-3) / 1e12)),
          flush=True)
    del a, b
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", action="append",
                    help="b=..,q_len=..,h=..,s_k=..[,page=64,dtype=bf16,varlen=0] (repeatable; "
                         "default: the issue's list)")
    ap.add_argument("--impl", default="bmm,sdpa", help="comma-separated: bmm, sdpa")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-ceilings", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_mla_torch: no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = torch.cuda.get_device_name(0)
    sha = commit()
    if not args.no_ceilings:
        ceilings(args, gpu, sha)
    shapes = [parse_shape(t) for t in args.shape] if args.shape else \
        [full_shape(s) for s in DEFAULT_SHAPES]
    for s in shapes:
        bench_shape(s, args, gpu, sha)


if __name__ == "__main__":
    main()
