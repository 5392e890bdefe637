#!/usr/bin/env python3
"""Plain-PyTorch peer of `attnjit bench mla_decode_branch_fp8` (bf16 cache rows).

Prints one JSON line {"op": "mla_decode_branch_torch", "impl": "torch", "stage": ...} per
shape and stage: DeepSeek's MLA decode branch for one layer and one step, written the way a
PyTorch user writes it (bf16 weights, torch matmuls, naive attention, eager mode).

Inputs per shape (b sequences, q_len new tokens each, tokens = b * q_len, h heads):
  q [tokens, h, 192] bf16 (nope 0..127, rope 128..191), kv_input [tokens, 576] bf16
  (latent 0..511, rope 512..575), freqs_cis [s_k + 1, 64] f32 ((cos, sin) interleaved
  pairs, base 10000), gamma [512] bf16, eps 1e-6, W_UK [h, 512, 128] bf16, W_UV
  [h, 128, 512] bf16, a paged bf16 cache [pages, 64, 576] with a random block table (each
  sequence's pages distinct, shuffled over the pool), lengths after the step s_k, before
  the step s_k - q_len. Token t belongs to sequence t // q_len, at position
  p = before + t % q_len.

The step ("all": the four stages below, one timed region per call):
  rope       RMSNorm of kv_input[:, :512] (float32 math, rounded to bf16, times gamma),
             interleaved RoPE of kv_input[:, 512:] and of q[..., 128:] at p (freqs_cis
             gathered by position; pairs (x0, x1) -> (x0 c - x1 s, x0 s + x1 c), as
             DeepSeek's apply_rotary_emb: a complex64 product, rounded to bf16), and the
             new rows written into the paged cache by advanced indexing at physical row
             table[b, p // 64] * 64 + p % 64;
  absorb     q_latent = einsum('thk,hnk->thn', q_nope, W_UK) as one torch.bmm over heads
             (bf16), q_full = cat(q_latent, rotated q_rope) -> [tokens, h, 576];
  attention  each sequence's rows gathered through its block table into [b, s_k, 576]
             (the gather is part of the work), scores = q_full as [b, q_len*h, 576] @ K^T
             (bf16 bmm: the scores come out rounded to bf16, "scores_dtype"), then
             float32: * 1/sqrt(192), causal mask within the new tokens
             (query i sees keys 0 .. before + i), softmax; out_latent = P (bf16) @ V with
             V = K[..., :512] (a strided view, no copy);
  output     out = einsum('thk,hnk->thn', out_latent, W_UV) as one torch.bmm over heads,
             made contiguous: [tokens, h, 128] bf16.
Each stage is also timed alone ("stage": "rope" | "absorb" | "attention" | "output"),
reading the intermediates that one full step left behind (as the C++ bench's per-stage
rows do). The C++ bench times its stage rows only at q_len 1, s_k 4096; here every shape
gets all five rows.

Outside the timed region, once per shape (per-step metadata, which the C++ op builds in
its once-per-step schedule and every layer reuses): the positions p, the physical rows of
the new tokens, the block table as int64. Inside it: everything above, including the
freqs_cis gather, the causal mask (built per call, as bench_mla_torch.py does) and the
cache write. The cache write is idempotent (same rows, same values every call).

Cold data: the cache (>= 600 MB at b 128) is far larger than L2. The weights are 16 MiB
per projection at h 128 in bf16 (2 MiB at h 16); like the C++ bench (which rotates its
e4m3 copies the same way), the script allocates ceil(4 * L2 / both projections' bytes)
copies of W_UK and W_UV, at most --max-weight-copies (8, the C++ bench's cap), and call i
uses copy i % copies. At h 128 that keeps the weights out of L2 between calls; at h 16
the 8 copies (32 MiB in all) fit in an H100's 50 MB L2, so the "absorb" and "output"
rows at h 16 may find their weights partly in L2 (the C++ bench's h 16 rows likewise:
16 MiB of e4m3 copies). q, kv_input and the intermediates are not rotated (a few MB; the
C++ bench does not rotate them either). "weight_copies" is in every line.

Timing: CUDA events around each call, warm-up first, median reported (bench_mla_torch.py's
method). Eager mode, no CUDA graph and no torch.compile: every call's kernel launches and
allocator traffic count, which dominates the small rows (h 16, s_k 4096, and the
projection and rope stages).

bytes and flops follow harness/mla_decode_branch_fp8_problem.cpp (the minimum the stage
must move: cache rows read once, new rows written once, activations once), except that the
weights count at 2 bytes per value with no scales (bf16, what this script reads), so gbps
here is against this implementation's own minimum; compare median_us across
implementations.

Check (once per shape, before timing; --no-check skips it): the step's output for the
first and last sequence (every token and head) against a float64 evaluation of the same
math from the same inputs, and the new cache rows against their float64 RMSNorm/RoPE;
rel-L2 limits 2e-2 (output) and 1e-2 (cache rows).

Memory: the largest default row (b 128, h 128, q_len 2, s_k 32768) holds the 4.8 GB pool,
the 4.8 GB gathered K and 4.3 GB float32 scores (plus the softmax's copy): about 20 GB.
A row that runs out of memory prints {"error": "oom", ...} instead of median_us.

Runtime: the 8 default shapes x 5 stages take well under a minute of timed calls on an
H100 (the slowest call, attention at b 128 h 128 q_len 2 s_k 32768, is tens of ms); set-up
and the float64 check add a few seconds per shape.

Self-contained: needs only torch (2.x) on a CUDA machine.
"""
import argparse
import gc
import json
import math
import os
import subprocess
import sys

import torch

D_NOPE, D_ROPE, D_Q = 128, 64, 192  # q per head: nope + rope
D_LAT, D_ROW = 512, 576             # latent, cache row (latent + rope)
D_V = 128                           # out per head
SCALE = 1.0 / math.sqrt(192.0)
EPS = 1e-6
STAGES = ("all", "rope", "absorb", "attention", "output")
SHAPE_KEYS = ("b", "q_len", "h", "s_k", "page", "cache")
# issue 22's whole-branch rows on the bf16 cache, in the C++ bench's order
DEFAULT_SHAPES = [dict(b=128, q_len=ql, h=h, s_k=s_k)
                  for h in (128, 16) for ql in (1, 2) for s_k in (4096, 32768)]
OOM_ERRORS = tuple(e for e in (getattr(torch.cuda, "OutOfMemoryError", None),) if e is not None)
OUT_LIMIT, CACHE_LIMIT = 2e-2, 1e-2


def full_shape(s):
    out = dict(b=s["b"], q_len=s["q_len"], h=s["h"], s_k=s["s_k"], page=64, cache="bf16")
    out.update(s)
    return out


def parse_shape(text):
    shape = {}
    for item in text.split(","):
        if "=" not in item:
            sys.exit(f"--shape: '{item}' is not key=value")
        k, v = item.split("=", 1)
        k = k.strip()
        if k not in SHAPE_KEYS:
            sys.exit(f"--shape: unknown key '{k}' ({', '.join(SHAPE_KEYS)})")
        if k == "cache":
            if v != "bf16":
                sys.exit("--shape: cache must be bf16 (this script has no fp8 cache)")
            shape[k] = v
        else:
            try:
                shape[k] = int(v)
            except ValueError:
                sys.exit(f"--shape: '{k}' must be an integer, got '{v}'")
    for k in ("b", "q_len", "h", "s_k"):
        if k not in shape:
            sys.exit(f"--shape: '{k}' is required")
    shape = full_shape(shape)
    if shape["b"] < 1 or shape["h"] < 1 or shape["q_len"] < 1 or shape["page"] < 1:
        sys.exit("--shape: b, q_len, h and page must be >= 1")
    if shape["s_k"] < shape["q_len"]:
        sys.exit("--shape: s_k (the length after the step) must be >= q_len")
    return shape


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


class Step:
    """One shape's inputs, weights (rotated copies), cache and per-step metadata."""

    def __init__(self, s, seed, device, l2_bytes, max_copies):
        bf16 = torch.bfloat16
        self.b, self.q_len, self.h, self.s_k, self.page = s["b"], s["q_len"], s["h"], s["s_k"], s["page"]
        b, ql, h, s_k, page = self.b, self.q_len, self.h, self.s_k, self.page
        self.tokens = t = b * ql
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        cpu_gen = torch.Generator()
        cpu_gen.manual_seed(seed + 1)

        # Lengths around the step, the block table (each sequence's pages distinct, shuffled).
        pages_per_seq = -(-s_k // page)
        num_pages = b * pages_per_seq
        self.lens_host = [s_k] * b
        self.s_max = s_k
        self.before = torch.full((b,), s_k - ql, dtype=torch.int32, device=device)
        self.lens = self.before + ql
        self.table = torch.randperm(num_pages, generator=cpu_gen).view(b, pages_per_seq) \
            .to(device=device, dtype=torch.int32)

        # Activations, norm weight, RoPE table (DeepSeek's interleaved pairs, base 10000).
        self.q = torch.randn((t, h, D_Q), generator=gen, device=device, dtype=bf16)
        self.kv_input = torch.randn((t, D_ROW), generator=gen, device=device, dtype=bf16)
        self.gamma = (1.0 + 0.1 * torch.randn((D_LAT,), generator=gen, device=device)).to(bf16)
        max_pos = s_k + 1
        pos_all = torch.arange(max_pos, dtype=torch.float64, device=device)
        inv = 1.0 / (10000.0 ** (torch.arange(0, D_ROPE, 2, dtype=torch.float64, device=device) / D_ROPE))
        ang = pos_all[:, None] * inv[None, :]
        self.freqs = torch.stack((ang.cos(), ang.sin()), dim=-1).reshape(max_pos, D_ROPE) \
            .to(torch.float32).contiguous()

        # Weights: copy 0 drawn, the rest clones (same math every call, different addresses).
        w_uk = (torch.randn((h, D_LAT, D_NOPE), generator=gen, device=device)
                * (1.0 / math.sqrt(D_NOPE))).to(bf16)
        w_uv = (torch.randn((h, D_V, D_LAT), generator=gen, device=device)
                * (1.0 / math.sqrt(D_LAT))).to(bf16)
        per_copy = (w_uk.numel() + w_uv.numel()) * 2
        self.copies = max(1, min(max_copies, -(-4 * l2_bytes // per_copy)))
        self.w_uk = [w_uk] + [w_uk.clone() for _ in range(self.copies - 1)]
        self.w_uv = [w_uv] + [w_uv.clone() for _ in range(self.copies - 1)]

        # The pool: random bf16 rows (the new positions are overwritten by the step).
        self.cache = torch.randn((num_pages, page, D_ROW), generator=gen, device=device, dtype=bf16)

        # Per-step metadata (outside the timed region): positions and physical rows.
        tok = torch.arange(t, device=device)
        seq = tok // ql
        self.pos = self.before.long()[seq] + tok % ql
        self.table_long = self.table.long()
        self.rows = self.table_long[seq, self.pos // page] * page + self.pos % page


# ---- the branch, as a PyTorch user writes it ------------------------------------------------

def rope_pairs(x, cs):
    """Interleaved RoPE (DeepSeek's apply_rotary_emb): x [..., 64] bf16, cs complex64
    broadcastable to [..., 32]; (x0, x1) -> (x0 c - x1 s, x0 s + x1 c), bf16 out."""
    xc = torch.view_as_complex(x.float().contiguous().view(*x.shape[:-1], D_ROPE // 2, 2))
    return torch.view_as_real(xc * cs).flatten(-2).to(x.dtype)


def stage_rope(st):
    """RMSNorm + RoPE of the new KV rows, written into the cache; returns q's rotated rope
    part [tokens, h, 64]."""
    cs = torch.view_as_complex(st.freqs[st.pos].view(-1, D_ROPE // 2, 2))  # [tokens, 32]
    x = st.kv_input[:, :D_LAT].float()
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    latent = st.gamma * normed.to(torch.bfloat16)
    k_rope = rope_pairs(st.kv_input[:, D_LAT:], cs)
    st.cache.view(-1, D_ROW)[st.rows] = torch.cat((latent, k_rope), dim=-1)
    return rope_pairs(st.q[..., D_NOPE:], cs[:, None, :])


def stage_absorb(st, q_rope, w_uk):
    """q_full [tokens, h, 576] = cat(q_nope · W_UKᵀ per head, q_rope)."""
    q_lat = torch.bmm(st.q[..., :D_NOPE].transpose(0, 1), w_uk.transpose(1, 2))  # [h, t, 512]
    return torch.cat((q_lat.transpose(0, 1), q_rope), dim=-1)


def gather(cache, table_long, s_max):
    """[b, s_max, 576]: each sequence's cache rows in order, through the block table."""
    page = cache.shape[1]
    pages = -(-s_max // page)
    kv = cache[table_long[:, :pages]]  # [b, pages, page, 576]
    return kv.reshape(table_long.shape[0], pages * page, D_ROW)[:, :s_max]


def visible_mask(lens, q_len, s_max):
    """[b, q_len, 1, s_max] bool: query i of sequence b sees keys j <= L_b - q_len + i."""
    i = torch.arange(q_len, device=lens.device)
    last = lens[:, None].long() - q_len + i[None, :]  # [b, q_len]: last visible key
    j = torch.arange(s_max, device=lens.device)
    return (j[None, None, :] <= last[:, :, None])[:, :, None, :]


def stage_attention(st, q_full):
    """Naive paged attention over the bf16 cache: out_latent [tokens, h, 512]."""
    b, ql, h, s_max = st.b, st.q_len, st.h, st.s_max
    kv = gather(st.cache, st.table_long, s_max)
    scores = torch.bmm(q_full.view(b, ql * h, D_ROW), kv.transpose(1, 2)).float()
    scores.mul_(SCALE)
    scores.view(b, ql, h, s_max).masked_fill_(~visible_mask(st.lens, ql, s_max), float("-inf"))
    p = torch.softmax(scores, dim=-1).to(torch.bfloat16)
    del scores
    out = torch.bmm(p, kv[..., :D_LAT])  # [b, q_len*h, 512]
    return out.view(b * ql, h, D_LAT)


def stage_output(st, out_lat, w_uv):
    """out [tokens, h, 128] = out_latent · W_UVᵀ per head."""
    out = torch.bmm(out_lat.transpose(0, 1), w_uv.transpose(1, 2))  # [h, t, 128]
    return out.transpose(0, 1).contiguous()


def branch(st, w):
    q_rope = stage_rope(st)
    q_full = stage_absorb(st, q_rope, st.w_uk[w])
    out_lat = stage_attention(st, q_full)
    return stage_output(st, out_lat, st.w_uv[w])


# ---- the float64 check ------------------------------------------------------------------------

def rope_ref(x, f):
    """float64 interleaved RoPE: x [..., 64], f [..., 32, 2] (cos, sin), broadcast."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = f[..., 0], f[..., 1]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


def check_step(st, out, seqs):
    """rel-L2 of out (sequences `seqs`, every token and head) and of their new cache rows
    against float64; old rows are read from the cache (the step does not touch them)."""
    flat = st.cache.view(-1, D_ROW)
    w_uk, w_uv, gamma = st.w_uk[0].double(), st.w_uv[0].double(), st.gamma.double()
    dev = st.q.device
    num_o = den_o = num_c = den_c = 0.0
    ql, page = st.q_len, st.page
    for s in seqs:
        L = st.lens_host[s]
        bef, t0 = L - ql, s * ql
        rows = (st.table_long[s][:, None] * page + torch.arange(page, device=dev)[None, :]).flatten()[:L]
        keys = flat[rows].double()  # the cache after the step
        x = st.kv_input[t0:t0 + ql].double()
        lat = x[:, :D_LAT]
        lat = lat * torch.rsqrt(lat.pow(2).mean(-1, keepdim=True) + EPS) * gamma
        f = st.freqs[bef:bef + ql].double().view(ql, D_ROPE // 2, 2)
        new = torch.cat((lat, rope_ref(x[:, D_LAT:], f)), dim=-1)  # [q_len, 576]
        d = keys[bef:bef + ql] - new
        num_c += float((d * d).sum())
        den_c += float((new * new).sum())
        keys[bef:bef + ql] = new
        qs = st.q[t0:t0 + ql].double()  # [q_len, h, 192]
        q_full = torch.cat((torch.einsum("ihk,hnk->ihn", qs[..., :D_NOPE], w_uk),
                            rope_ref(qs[..., D_NOPE:], f[:, None])), dim=-1)
        sc = torch.einsum("ihd,jd->ihj", q_full, keys) * SCALE
        j = torch.arange(L, device=dev)
        vis = j[None, :] <= (bef + torch.arange(ql, device=dev))[:, None]  # [q_len, L]
        sc = sc.masked_fill(~vis[:, None, :], float("-inf"))
        p = torch.softmax(sc, dim=-1)
        raw = torch.einsum("ihj,jd->ihd", p, keys[:, :D_LAT])
        ref = torch.einsum("ihn,hvn->ihv", raw, w_uv)  # [q_len, h, 128]
        d = out[t0:t0 + ql].double() - ref
        num_o += float((d * d).sum())
        den_o += float((ref * ref).sum())
    out_err = math.sqrt(num_o / den_o) if den_o > 0 else float("inf")
    cache_err = math.sqrt(num_c / den_c) if den_c > 0 else float("inf")
    finite = bool(torch.isfinite(out).all())
    return dict(out_rel_l2=out_err, cache_rel_l2=cache_err, finite=finite,
                passed=bool(finite and out_err <= OUT_LIMIT and cache_err <= CACHE_LIMIT),
                sequences=list(seqs))


# ---- bytes and flops (harness/mla_decode_branch_fp8_problem.cpp, bf16 weights) ---------------

def bytes_flops(s, stage):
    b, ql, h, s_k = s["b"], s["q_len"], s["h"], s["s_k"]
    t = b * ql
    row = D_ROW * 2
    weights = h * D_LAT * D_NOPE * 2  # one projection, bf16
    cache = b * s_k * row
    new_rows = t * row
    proj = 2.0 * t * h * D_LAT * D_NOPE
    pairs = b * sum(s_k - ql + i + 1 for i in range(ql))
    attention = 2.0 * pairs * h * (D_ROW + D_LAT)
    if stage == "rope":
        return t * h * D_ROPE * 2 * 2 + t * D_ROW * 2 + new_rows, 0.0
    if stage == "absorb":
        return weights + t * h * (D_NOPE + D_LAT) * 2, proj
    if stage == "attention":
        return cache + t * h * (D_ROW + D_LAT) * 2, attention
    if stage == "output":
        return weights + t * h * (D_LAT + D_V) * 2, proj
    return 2 * weights + t * h * (D_Q + D_V) * 2 + t * D_ROW * 2 + new_rows + cache, 2 * proj + attention


# ---- driver -----------------------------------------------------------------------------------

def error_text(e):
    if OOM_ERRORS and isinstance(e, OOM_ERRORS):
        return "oom"
    if isinstance(e, RuntimeError) and "out of memory" in str(e):
        return "oom"
    return None


def bench_shape(s, stages, args, gpu, sha, l2_bytes):
    base = dict(op="mla_decode_branch_torch", impl="torch")
    meta = dict(gpu=gpu, commit=sha, torch=torch.__version__, weights="bf16", scores_dtype="bf16",
                warmup=args.warmup, iters=args.iters)

    def line(stage, **extra):
        rec = dict(base, stage=stage, shape=dict(s))
        rec.update(extra)
        rec.update(meta)
        print(json.dumps(rec), flush=True)

    def fail_all(e):
        kind = error_text(e)
        for stage in stages:
            if kind:
                line(stage, error=kind, detail=f"{type(e).__name__}: {e}"[:300])
            else:
                line(stage, error=f"{type(e).__name__}: {e}"[:500])

    # Inputs, one full step (the stages' intermediates) and the check.
    st = inter = None
    failure = None
    try:
        st = Step(s, args.seed + 31 * s["b"] + s["s_k"] + 7 * s["h"] + s["q_len"], "cuda",
                  l2_bytes, args.max_weight_copies)
        q_rope = stage_rope(st)
        q_full = stage_absorb(st, q_rope, st.w_uk[0])
        out_lat = stage_attention(st, q_full)
        out = stage_output(st, out_lat, st.w_uv[0])
        torch.cuda.synchronize()
        inter = (q_rope, q_full, out_lat)
        check = None if args.no_check else check_step(st, out, sorted({0, st.b - 1}))
        del out
    except Exception as e:  # out of memory above all
        failure = e
    if failure is not None:
        fail_all(failure)
        del failure, st, inter
        gc.collect()
        torch.cuda.empty_cache()
        return
    meta["weight_copies"] = st.copies
    if check is not None:
        meta["check"] = check

    q_rope, q_full, out_lat = inter
    runs = {
        "all": lambda i: branch(st, i % st.copies),
        "rope": lambda i: stage_rope(st),
        "absorb": lambda i: stage_absorb(st, q_rope, st.w_uk[i % st.copies]),
        "attention": lambda i: stage_attention(st, q_full),
        "output": lambda i: stage_output(st, out_lat, st.w_uv[i % st.copies]),
    }
    for stage in stages:
        counter = [0]

        def call(run=runs[stage]):
            run(counter[0])
            counter[0] += 1

        nbytes, flops = bytes_flops(s, stage)
        result = None
        try:
            torch.cuda.synchronize()
            ms = median_ms(call, args.warmup, args.iters)
            result = dict(median_us=ms * 1e3, bytes=nbytes, flops=flops,
                          gbps=nbytes / (ms * 1e-3) / 1e9, tflops=flops / (ms * 1e-3) / 1e12)
        except Exception as e:
            kind = error_text(e)
            result = dict(error=kind, detail=f"{type(e).__name__}: {e}"[:300]) if kind else \
                dict(error=f"{type(e).__name__}: {e}"[:500])
        line(stage, **result)
        gc.collect()
        torch.cuda.empty_cache()
    del st, inter, q_rope, q_full, out_lat, runs
    gc.collect()
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", action="append",
                    help="b=..,q_len=..,h=..,s_k=..[,page=64,cache=bf16] (repeatable; default: "
                         "b 128 x q_len {1,2} x h {128,16} x s_k {4096,32768})")
    ap.add_argument("--stage", default=",".join(STAGES),
                    help="comma-separated: " + ", ".join(STAGES) + " (default: all five)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--max-weight-copies", type=int, default=8,
                    help="cap on the rotated W_UK/W_UV copies (default 8, as the C++ bench)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--no-check", action="store_true", help="skip the float64 check")
    args = ap.parse_args()
    stages = [x.strip() for x in args.stage.split(",") if x.strip()]
    for x in stages:
        if x not in STAGES:
            sys.exit(f"--stage: unknown stage '{x}' ({', '.join(STAGES)})")
    if args.iters < 1 or args.warmup < 0 or args.max_weight_copies < 1:
        sys.exit("--iters and --max-weight-copies must be >= 1, --warmup >= 0")
    if not torch.cuda.is_available():
        sys.exit("bench_branch_torch: no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = torch.cuda.get_device_name(0)
    l2_bytes = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or (50 << 20))
    sha = commit()
    shapes = [parse_shape(t) for t in args.shape] if args.shape else \
        [full_shape(s) for s in DEFAULT_SHAPES]
    for s in shapes:
        bench_shape(s, stages, args, gpu, sha, l2_bytes)


if __name__ == "__main__":
    main()
