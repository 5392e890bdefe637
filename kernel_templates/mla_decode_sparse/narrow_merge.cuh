#pragma once
// The narrow kernel's merge (narrow.cuh includes this after the consumers' pieces): after
// both walks, each consumer hands the other the Oᵀ tiles of the other's half of the output
// dims through shared memory, then merges its own half with the other's m and l and writes
// it (unsplit: bf16 out, lse, max logit; split: the f32 partial and its lse, or, when the
// token's splits are one cluster, the merge across them below).
//
// The merge in the cluster (Args::merge_in_cluster: n = 2, 4 or 8 splits, cluster dims
// 1 × n): CTA r owns the output dims [64 · r·8/n, +64 · 8/n). Each CTA sends each owner the
// tiles of its dims, normalized by its own l as a partial would be, and its lse; each owner
// then weighs them as mla_decode's combine does (the sink in the denominator) and writes
// bf16 out and lse. No partials, no combine launch: (64, 1, 8, 2048) fp8 37.1 → 35.7–36.0
// µs, (64, 1, 16) 40.5 → 38.0, (8, 1, 16) 16.6 → 15.7 (H200). The plan takes this path only
// when every token's cluster runs at once (runtime/ops/mla_decode_sparse/internal.hpp).
// The receive area is exchange(), free once every CTA's merge_half has read it (the first
// cluster barrier):
//   floats [src][8/n tiles][h][64], then lse [src][h].

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

// Consumer kHalf's tiles (dims 256·kHalf ..), each scaled by 1 / l, to their owners' receive
// areas, and (one thread per column) the column's lse to every CTA of the cluster.
template <auto P, int kHalf>
ATTNJIT_DEVICE void send_to_owners(SharedStorage<P>& s, const Args& a, const float (&o)[Traits<P>::kDimTiles][Traits<P>::kAcc],
                                   const float (&m_all)[Traits<P>::kCols], const float (&l_all)[Traits<P>::kCols]) {
  using T = Traits<P>;
  constexpr int H = P.num_heads, kMine = 4 * kHalf;
  const int tid = thread_in_warpgroup(), warp = tid / 32, g = (tid % 32) / 4;
  static_assert(sizeof(s.q) + sizeof(s.p) >= (T::kDimTiles * H * 64 + 8 * H) * sizeof(float),
                "q and P′ hold the receive area of a cluster of 8");
  const int n = a.num_splits, per = T::kDimTiles / n;
  const u32 rank = cluster_cta_rank(), base = smem_u32(exchange(s));
#pragma unroll
  for (int c = 0; c < T::kCols; ++c) {
    const int head = acc_column(tid, c), i0 = 4 * (c / 2) + c % 2;
    const float inv = l_all[c] > 0.0f ? 1.0f / l_all[c] : 0.0f;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int owner = (kMine + b) / per, j = (kMine + b) % per;
      const int at = ((static_cast<int>(rank) * per + j) * H + head) * 64 + 16 * warp + 2 * g;
      st_cluster_f32x2(cluster_smem_addr(base + 4u * static_cast<u32>(at), static_cast<u32>(owner)),
                       o[kMine + b][i0] * inv, o[kMine + b][i0 + 2] * inv);
    }
    if (kHalf == 0 && warp == 0 && g == 0) {
      const float lse = row_lse(m_all[c], l_all[c]);
      const u32 at = base + 4u * static_cast<u32>(T::kDimTiles * H * 64 + static_cast<int>(rank) * H + head);
      for (int dst = 0; dst < n; ++dst) st_cluster_f32(cluster_smem_addr(at, static_cast<u32>(dst)), lse);
    }
  }
}

// This CTA's dims from every CTA's partial: thread u (0 .. 255, both consumers) takes 4
// dims of one (tile, head) at a time. The weights as mla_decode's combine: w = exp(lse −
// max lse), 0 for a split that saw no key; out = Σ w·O / (Σ w + exp(sink − max)); lse =
// max + log Σ w (without the sink); a row no split saw: out 0, lse −inf.
template <auto P>
ATTNJIT_DEVICE void merge_owned(SharedStorage<P>& s, const Args& a, const Work& w, const Seq& seq, int u) {
  using T = Traits<P>;
  constexpr int H = P.num_heads;
  const int n = a.num_splits, per = T::kDimTiles / n;
  const int rank = static_cast<int>(cluster_cta_rank());
  const float* x = exchange(s);
  const float* lse_in = x + T::kDimTiles * H * 64;
  for (int q = u; q < per * H * 16; q += T::kConsumers * kWarpgroupThreads) {
    const int j = q / (H * 16), head = q / 16 % H, d4 = q % 16;
    float mx = neg_inf();
    for (int src = 0; src < n; ++src) mx = fmaxf(mx, lse_in[src * H + head]);
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float sum = 0.0f;
    for (int src = 0; src < n; ++src) {
      const float lse = lse_in[src * H + head];
      if (lse == neg_inf()) continue;  // no key: weight 0, its values never read
      const float wt = __expf(lse - mx);
      const float4 v = *reinterpret_cast<const float4*>(x + ((src * per + j) * H + head) * 64 + 4 * d4);
      sum += wt;
      acc.x += wt * v.x, acc.y += wt * v.y, acc.z += wt * v.z, acc.w += wt * v.w;
    }
    const float sink = a.sink != nullptr ? a.sink[head] : neg_inf();
    const float denom = sum + (sum > 0.0f && sink != neg_inf() ? __expf(sink - mx) : 0.0f);
    const float inv = sum > 0.0f ? 1.0f / denom : 0.0f;
    u32* out = reinterpret_cast<u32*>(static_cast<u16*>(a.out) +
                                      ((static_cast<u64>(seq.start) + w.q_idx) * H + head) * kValueDim +
                                      64 * (rank * per + j) + 4 * d4);
    *reinterpret_cast<uint2*>(out) = make_uint2(pack2<DType::kBF16>(acc.x * inv, acc.y * inv),
                                                pack2<DType::kBF16>(acc.z * inv, acc.w * inv));
    if (a.lse != nullptr && rank == 0 && j == 0 && d4 == 0)
      a.lse[lse_index(a.q, w.batch, seq, H, head, w.q_idx)] = sum > 0.0f ? mx + __logf(sum) : neg_inf();
  }
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
  if (a.merge_in_cluster) {
    cluster_sync();  // every CTA's exchange area has been read: it receives now
    send_to_owners<P, kHalf>(s, a, o, m_all, l_all);
    cluster_sync();  // every CTA's sends have landed
    merge_owned<P>(s, a, w, seq, kHalf * kWarpgroupThreads + tid);
    return;
  }

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
