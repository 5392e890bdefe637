#pragma once
// mla_decode_sparse's helper kernels: the 656-byte quantizer (what an engine runs when it
// appends rows to an fp8 cache), the logical → physical index remap, and the checked
// mode's validation of the indices, lengths and offsets that live on the GPU.
#include "common/arch.cuh"
#include "common/numeric.cuh"
#include "common/types.cuh"
#include "mla_decode/common.cuh"
#include "mla_decode_sparse/layout.cuh"

namespace attnjit::mla_decode_sparse {

using namespace attnjit::layout::mla_decode_sparse;
using mla_decode::Seq;
using mla_decode::sequence;

// P: the helper table's fields (runtime/ops/mla_decode_sparse/helper_config.def), declared
// by the generated translation unit: threads.

// 16 f32 → 16 e4m3 codes (RN-even, saturating to ±448; NaN stays NaN), lowest address first.
ATTNJIT_DEVICE uint4 to_e4m3x16(const float (&x)[16]) {
  u32 w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = e4m3x2(x[4 * i], x[4 * i + 1]) | e4m3x2(x[4 * i + 2], x[4 * i + 3]) << 16;
  return make_uint4(w[0], w[1], w[2], w[3]);
}

ATTNJIT_DEVICE float bf16_bits_to_float(u32 bits16) { return __uint_as_float(bits16 << 16); }

// One warp per row: lane l quantizes content values [16l, 16l + 16) (block l / 8, whose
// amax the 8 lanes of the block reduce), lanes 0..7 copy the rope's 16-byte units.
// Grid-strided over rows; a destination outside the pool is skipped.
template <auto P>
__global__ void __launch_bounds__(P.threads) quantize_kernel(const QuantArgs a) {
  static_assert(P.threads == kQuantThreads, "the host launches kQuantThreads");
  const int lane = lane_id();
  const i64 warps = static_cast<i64>(gridDim.x) * (P.threads / 32);
  for (i64 r = static_cast<i64>(blockIdx.x) * (P.threads / 32) + warp_id(); r < a.n; r += warps) {
    const i64 dst_row = a.dst_rows != nullptr ? a.dst_rows[r] : r;
    if (dst_row < 0 || dst_row >= a.num_rows) continue;  // uniform over the warp
    const unsigned short* src = a.src + r * kHeadDim;
    u8* dst = a.pool + dst_row * kFp8RowBytes;
    const uint4 raw0 = reinterpret_cast<const uint4*>(src)[2 * lane];
    const uint4 raw1 = reinterpret_cast<const uint4*>(src)[2 * lane + 1];
    const u32 words[8] = {raw0.x, raw0.y, raw0.z, raw0.w, raw1.x, raw1.y, raw1.z, raw1.w};
    float x[16];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      x[2 * i] = bf16_bits_to_float(words[i] & 0xffffu);
      x[2 * i + 1] = bf16_bits_to_float(words[i] >> 16);
      amax = fmaxf(amax, fmaxf(fabsf(x[2 * i]), fabsf(x[2 * i + 1])));
    }
#pragma unroll
    for (int o = 1; o < 8; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    // An all-zero block keeps scale 1: its codes are 0 and nothing divides by zero.
    const float scale = amax > 0.0f ? __fdiv_rn(amax, kE4M3Max) : 1.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) x[i] = __fdiv_rn(x[i], scale);
    reinterpret_cast<uint4*>(dst)[lane] = to_e4m3x16(x);
    if (lane % 8 == 0) reinterpret_cast<float*>(dst + kFp8ScaleOffset)[lane / 8] = scale;
    if (lane < 8)
      reinterpret_cast<uint4*>(dst + kFp8RopeOffset)[lane] =
          reinterpret_cast<const uint4*>(src + kValueDim)[lane];
  }
}

// CTAs stride over tokens, threads over a token's indices: 32-bit arithmetic only (a
// 64-bit division is a call that needs a stack frame).
template <auto P>
__global__ void __launch_bounds__(P.threads) remap_kernel(const RemapArgs a) {
  const int capacity = a.max_pages * a.page_size;  // the host checks it fits int32
  for (int t = static_cast<int>(blockIdx.x); t < a.tokens; t += static_cast<int>(gridDim.x)) {
    const int batch = a.token_batch != nullptr ? a.token_batch[t] : t / a.per_batch;
    const int* table = a.block_table + static_cast<i64>(batch) * a.max_pages;
    const int* logical = a.logical + static_cast<i64>(t) * a.stride;
    int* physical = a.physical + static_cast<i64>(t) * a.topk;
    for (int j = static_cast<int>(threadIdx.x); j < a.topk; j += P.threads) {
      const int pos = logical[j];
      int phys = -1;
      if (pos >= 0 && pos < capacity) {
        const int page = table[pos / a.page_size];
        if (page >= 0 && page < a.num_pages) phys = page * a.page_size + pos % a.page_size;
      }
      physical[j] = phys;
    }
  }
}

// A token's key count from a source's lengths: (clamped count, raw value).
ATTNJIT_DEVICE int raw_length(const Pool& p, i64 token, int batch) {
  if (p.lens == nullptr) return p.topk;
  return p.lens[p.lens_per_token ? token : batch];
}

// grid (max(total_q, b)): CTA x checks sequence x's offsets (ragged) and token x's lengths
// and indices. atomicMin keeps the lowest (token, what): a deterministic report.
template <auto P>
__global__ void __launch_bounds__(P.threads) check_kernel(const CheckArgs a) {
  const int x = static_cast<int>(blockIdx.x);
  const unsigned long long tag = static_cast<unsigned long long>(x) << 32;
  if (a.q.offsets != nullptr && x < a.batch && threadIdx.x == 0) {
    const int start = a.q.offsets[x], end = a.q.offsets[x + 1];
    if (start < 0 || end < start || end > a.q.total_q || end - start > a.q.q_len)
      atomicMin(a.first_bad, tag | kBadQOffsets);
  }
  if (x >= a.q.total_q) return;
  // Padded: token x is sequence x / q_len's. Ragged lengths are per token (the host's rule).
  const int batch = a.q.offsets != nullptr ? 0 : x / a.q.q_len;
  const Pool* pools[2] = {&a.main, &a.extra};
  for (int s = 0; s < 2; ++s) {
    const Pool& p = *pools[s];
    if (p.rows == nullptr) continue;
    const int raw = raw_length(p, x, batch);
    if (raw < 0 || raw > p.topk) {
      if (threadIdx.x == 0) atomicMin(a.first_bad, tag | (s ? kBadExtraLength : kBadLength));
      continue;
    }
    const int* idx = p.indices + static_cast<i64>(x) * p.stride;
    for (int j = static_cast<int>(threadIdx.x); j < raw; j += P.threads) {
      const int v = idx[j];
      if (v != -1 && (v < 0 || v >= p.num_rows))
        atomicMin(a.first_bad, tag | (s ? kBadExtraIndex : kBadIndex));
    }
  }
}

}  // namespace attnjit::mla_decode_sparse
