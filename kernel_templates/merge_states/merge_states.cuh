#pragma once
// merge_states: two attention states over disjoint key sets merged into the state of their
// union (cascade attention's shared prefix + suffix, context parallelism's ranks):
//   m = max(lse_a, lse_b),  w_x = exp(lse_x − m),
//   out = (w_a · v_a + w_b · v_b) / (w_a + w_b),  lse = m + log(w_a + w_b).
// A state with lse −inf saw no key: its weight is 0 and its values are not used, so
// whatever they hold (NaN included) cannot reach the output. Both −inf: out = 0 exactly,
// lse −inf. Memory-bound: one pass, 16-byte vectors, f32 arithmetic.
#include "common/arch.cuh"
#include "common/numeric.cuh"
#include "common/types.cuh"
#include "merge_states/layout.cuh"

namespace attnjit::merge_states {

using namespace attnjit::layout::merge_states;

// P is the config's fields — the rows of runtime/include/attnjit/ops/merge_states_config.def
// — as a struct the generated translation unit declares: dtype (of v_a, v_b and out),
// head_dim, lse_log2 (lse in log2 units instead of natural log), threads.
template <auto P>
struct Traits {
  static constexpr int kElemBytes = dtype_bytes(P.dtype);
  static constexpr int kVecElems = kVectorBytes / kElemBytes;
  static constexpr int kLanes = row_lanes(P.head_dim, kElemBytes);  // lanes per row
  static constexpr int kVecsPerLane = row_vectors(P.head_dim, kElemBytes) / kLanes;
  static constexpr int kRowsPerCta = rows_per_cta(P.threads, P.head_dim, kElemBytes);
  static_assert(P.dtype == DType::kBF16 || P.dtype == DType::kF16 || P.dtype == DType::kF32,
                "values are bf16, f16 or f32");
  static_assert(P.head_dim * kElemBytes % kVectorBytes == 0, "a row is whole 16-byte vectors");
  static_assert(P.threads % 32 == 0 && P.threads <= 1024, "whole warps");
};

// One 16-byte vector as floats.
template <DType kType>
ATTNJIT_DEVICE void unpack(const uint4& raw, float (&x)[kVectorBytes / dtype_bytes(kType)]) {
  if constexpr (kType == DType::kF32) {
    x[0] = __uint_as_float(raw.x), x[1] = __uint_as_float(raw.y);
    x[2] = __uint_as_float(raw.z), x[3] = __uint_as_float(raw.w);
  } else {
    const u32 w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (kType == DType::kBF16) {  // bf16 is the top half of an f32
        x[2 * i] = __uint_as_float(w[i] << 16);
        x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
      } else {
        const u16 lo = static_cast<u16>(w[i]), hi = static_cast<u16>(w[i] >> 16);
        asm("cvt.f32.f16 %0, %1;" : "=f"(x[2 * i]) : "h"(lo));
        asm("cvt.f32.f16 %0, %1;" : "=f"(x[2 * i + 1]) : "h"(hi));
      }
    }
  }
}

template <DType kType>
ATTNJIT_DEVICE uint4 pack(const float (&x)[kVectorBytes / dtype_bytes(kType)]) {
  if constexpr (kType == DType::kF32) {
    return make_uint4(__float_as_uint(x[0]), __float_as_uint(x[1]), __float_as_uint(x[2]),
                      __float_as_uint(x[3]));
  } else {
    return make_uint4(pack2<kType>(x[0], x[1]), pack2<kType>(x[2], x[3]),
                      pack2<kType>(x[4], x[5]), pack2<kType>(x[6], x[7]));
  }
}

// The element offset of (i0, i1, head) in a view with `stride`s.
ATTNJIT_DEVICE i64 offset(const long long (&stride)[3], int i0, int i1, int head) {
  return i0 * stride[0] + i1 * stride[1] + head * stride[2];
}

// exp / log in the lse's base (2^x is one MUFU op; e^x = 2^(x·log2 e)).
template <auto P>
ATTNJIT_DEVICE float weight_of(float lse, float m) {
  if (lse == neg_inf()) return 0.0f;  // no key: weight 0, and no −inf − (−inf) when both are
  return P.lse_log2 ? exp2f(lse - m) : __expf(lse - m);
}
template <auto P>
ATTNJIT_DEVICE float log_of(float sum) {
  return P.lse_log2 ? log2f(sum) : __logf(sum);
}

// threads threads; a grid-stride loop over rows, kRowsPerCta at a time.
template <auto P>
__global__ void __launch_bounds__(P.threads) kernel(const Args a) {
  using T = Traits<P>;
  constexpr int kVecElems = T::kVecElems;
  const int lane = static_cast<int>(threadIdx.x) % T::kLanes;  // within the row's group
  // The row group's lanes: they hand its lse reads to the write (lse_out may be lse_a).
  const u32 group_mask = (T::kLanes == 32 ? 0xffffffffu : ((1u << T::kLanes) - 1u))
                         << (lane_id() & ~(T::kLanes - 1));
  const i64 rows = static_cast<i64>(a.n0) * a.n1 * a.heads;
  const i64 step = static_cast<i64>(gridDim.x) * T::kRowsPerCta;
  for (i64 row = static_cast<i64>(blockIdx.x) * T::kRowsPerCta + threadIdx.x / T::kLanes; row < rows;
       row += step) {
    const int head = static_cast<int>(row % a.heads);
    const i64 token = row / a.heads;
    const int i1 = static_cast<int>(token % a.n1), i0 = static_cast<int>(token / a.n1);
    const uint4* va = reinterpret_cast<const uint4*>(
        static_cast<const u8*>(a.a.v) + offset(a.a.v_stride, i0, i1, head) * T::kElemBytes);
    const uint4* vb = reinterpret_cast<const uint4*>(
        static_cast<const u8*>(a.b.v) + offset(a.b.v_stride, i0, i1, head) * T::kElemBytes);
    uint4* vo = reinterpret_cast<uint4*>(static_cast<u8*>(a.out.v) +
                                         offset(a.out.v_stride, i0, i1, head) * T::kElemBytes);
    // Every load at once — both lse and kVecsPerLane × 2 value vectors per lane — so a row
    // costs one memory latency, not an lse load and then the values. An empty side's values
    // are read (its memory is the caller's tensor) but never used.
    const float la = a.a.lse[offset(a.a.lse_stride, i0, i1, head)];
    const float lb = a.b.lse[offset(a.b.lse_stride, i0, i1, head)];
    uint4 ra[T::kVecsPerLane], rb[T::kVecsPerLane];
#pragma unroll
    for (int j = 0; j < T::kVecsPerLane; ++j) {
      ra[j] = va[lane + j * T::kLanes];
      rb[j] = vb[lane + j * T::kLanes];
    }
    const float m = fmaxf(la, lb);
    const float wa = weight_of<P>(la, m), wb = weight_of<P>(lb, m);
    const float sum = wa + wb;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const float ca = wa * inv, cb = wb * inv;  // ca + cb = 1 (or both 0: no key at all)
#pragma unroll
    for (int j = 0; j < T::kVecsPerLane; ++j) {
      float xa[kVecElems], xb[kVecElems], xo[kVecElems];
      unpack<P.dtype>(ra[j], xa);
      unpack<P.dtype>(rb[j], xb);
#pragma unroll
      for (int e = 0; e < kVecElems; ++e)  // a zero-weight side adds nothing, not 0 · NaN
        xo[e] = (ca != 0.0f ? ca * xa[e] : 0.0f) + (cb != 0.0f ? cb * xb[e] : 0.0f);
      vo[lane + j * T::kLanes] = pack<P.dtype>(xo);
    }
    if (a.out.lse != nullptr) {
      __syncwarp(group_mask);  // every lane of the row has read lse_a and lse_b
      if (lane == 0)
        a.out.lse[offset(a.out.lse_stride, i0, i1, head)] = sum > 0.0f ? m + log_of<P>(sum) : neg_inf();
    }
  }
}

}  // namespace attnjit::merge_states
