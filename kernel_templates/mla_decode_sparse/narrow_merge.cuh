#pragma once
// The narrow kernel's merge (narrow.cuh includes this after the consumers' pieces): after
// both walks, each consumer hands the other the Oᵀ tiles of the other's half of the output
// dims through shared memory, then merges its own half with the other's m and l and writes
// it (unsplit: bf16 out, lse, max logit; split: the f32 partial and its lse).

namespace attnjit::mla_decode_sparse::narrow {

// The merge's exchange area: q and the P′ tiles (adjacent), free once both walks are over
// (their last readers, the wgmmas, retired). Not the ring, which is filled asynchronously:
// with the exchange there (then filled by cp.async), racecheck reported its generic stores
// against the loads after the barrier, as on mla_decode_fp8's narrow kernel
// (docs/sanitizers.md).
template <auto P>
ATTNJIT_DEVICE float* exchange(SharedStorage<P>& s) {
  using T = Traits<P>;
  // p follows q with no padding: both 1024-aligned, q a multiple of 1024 bytes.
  static_assert(sizeof(s.q) % 1024 == 0 &&
                    sizeof(s.q) + sizeof(s.p) >= 2 * 4 * T::kAcc * kWarpgroupThreads * sizeof(float),
                "q and P′ hold both consumers' handed-over halves");
  return reinterpret_cast<float*>(&s.q[0]);
}

// Consumer kHalf hands the other the Oᵀ tiles of the other's half (dims 256·(1 − kHalf) ..).
template <auto P, int kHalf>
ATTNJIT_DEVICE void hand_over(SharedStorage<P>& s, const float (&o)[Traits<P>::kDimTiles][Traits<P>::kAcc]) {
  hand_over_half<Traits<P>::kAcc, kHalf>(exchange(s), o);
}

// The merge and consumer kHalf's half of the output (dims 256·kHalf ..), after both
// hand_overs: unsplit, bf16 out (the sink in the denominator), lse and max logit; split,
// the f32 partial and its lse (the combine applies the sink). l = 0: no key, out 0, lse -inf.
template <auto P, int kHalf>
ATTNJIT_DEVICE void finish(SharedStorage<P>& s, const Args& a, const Work& w, const Seq& seq,
                           float (&o)[Traits<P>::kDimTiles][Traits<P>::kAcc], const float (&m)[Traits<P>::kCols],
                           const float (&l)[Traits<P>::kCols]) {
  using T = Traits<P>;
  constexpr int kMine = 4 * kHalf;
  const int tid = thread_in_warpgroup(), warp = tid / 32, g = (tid % 32) / 4;
  float l_all[T::kCols], m_all[T::kCols];
  merge_half<T::kAcc, kHalf>(exchange(s), o, m, l, s.stats[1 - kHalf][0], s.stats[1 - kHalf][1], m_all, l_all);

  // Fragment rows g and g + 8 of a dim tile are dims 2g and 2g + 1: accumulators i and
  // i + 2 of one column, one bf16x2 (or float2).
#pragma unroll
  for (int c = 0; c < T::kCols; ++c) {
    const int head = acc_column(tid, c);
    const int i0 = 4 * (c / 2) + c % 2;  // column c's accumulators: rows g, g + 8
    const u32 dim0 = static_cast<u32>(16 * warp + 2 * g);
    const bool stats = kHalf == 0 && warp == 0 && g == 0;  // one thread per column
    if (w.slot < 0) {
      const float inv = unsplit_inv(a, head, m_all[c], l_all[c]);
      u32* out = reinterpret_cast<u32*>(static_cast<u16*>(a.out) +
                                        ((static_cast<u64>(seq.start) + w.q_idx) * P.num_heads + head) * kValueDim +
                                        dim0);
#pragma unroll
      for (int b = 0; b < 4; ++b)
        out[32 * (kMine + b)] = pack2<DType::kBF16>(o[kMine + b][i0] * inv, o[kMine + b][i0 + 2] * inv);
      if (stats) store_row_stats(a, w, seq, P.num_heads, head, m_all[c], l_all[c]);
    } else {
      const float inv = l_all[c] > 0.0f ? 1.0f / l_all[c] : 0.0f;
      const u64 part = partial_row(a, w, P.num_heads, head);
      float* out = a.part_out + part * kValueDim + dim0;
#pragma unroll
      for (int b = 0; b < 4; ++b)
        *reinterpret_cast<float2*>(out + 64 * (kMine + b)) =
            make_float2(o[kMine + b][i0] * inv, o[kMine + b][i0 + 2] * inv);
      if (stats) a.part_lse[part] = row_lse(m_all[c], l_all[c]);
    }
  }
}

}  // namespace attnjit::mla_decode_sparse::narrow
