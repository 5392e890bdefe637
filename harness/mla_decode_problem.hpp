#pragma once
// mla_decode as a problem: one shape vocabulary for `attnjit bench`, the tune worker and the
// tests, and the tensors, arguments, float64 reference and per-row comparison of a case.
//
// A case's inputs: lengths s_k each (or uniform in [max(s_k/4, q_len), s_k] when varlen),
// pages in shuffled order as a serving allocator leaves them, q and cache values drawn
// from N(0, 1) and rounded to the dtype. The page pool repeats one block of kChunkRows
// random rows, so a multi-GB cache need not be drawn value by value; the reference reads the
// pool through that period. Given the L2 size, enough input sets rotate that consecutive
// calls never find theirs in L2 (the benchmarks); out and lse are shared.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnjit/ops/mla_decode.hpp"
#include "harness/device.hpp"
#include "harness/mla_reference.hpp"
#include "harness/problem.hpp"

namespace attnjit::harness {

struct MlaDecodeCase {
  int b = 128;
  int q_len = 1;
  int h = 128;
  int s_k = 4096;  // every length (varlen: the longest)
  int page = 64;
  DType dtype = DType::kBF16;
  bool varlen = false;  // lengths uniform in [max(s_k/4, q_len), s_k]
  int short_len = 0;    // > 0: a long tail or heavy half — `long_count` sequences at s_k,
  int long_count = 1;   //   the rest at short_len
  bool equal_work = false;  // every length the mean of the lengths drawn above (same Σ):
                            // the uniform row a mixed row is compared with
  bool lse = false;     // the call asks for lse too
  int splits = 0;       // 0: the plan's choice

  nlohmann::ordered_json to_json() const;  // every key, as mla_decode_case reads it (flags 0/1)
  std::string describe() const;            // "b=128 q_len=1 h=128 s_k=4096 page=64 bf16"
};

// The tuning vocabulary — the registry's canonical_shape for mla_decode: b, q_len, h, s_k,
// page, dtype, with its defaults and ranges — plus varlen, short, long, equal_work, lse and
// splits. Errors name the key.
MlaDecodeCase mla_decode_case(const nlohmann::json& shape);

// `attnjit bench mla_decode`'s list: the registry's bench shapes (the ones
// tools/gpu_tune.sh sweeps), the mixed-length row, h = 8 with q_len 1 and 4 (b = 128,
// s_k = 8192), then each mixed-length row beside its equal-work uniform row: lengths
// uniform in [s/4, s] (b = 128, s = 8192, h 16 / 64 / 128, q_len 1 and 2), a long tail
// (b = 64: one at 65536, the rest at 1024) and a heavy half (b = 32: half at 32768, half at
// 512), both at h 16 and 128.
std::vector<MlaDecodeCase> mla_decode_bench_cases();

class MlaDecodeProblem final : public Problem {
 public:
  static constexpr float kSoftmaxScale = 0.07216878f;  // 1/sqrt(192): DeepSeek's q·k scale
  static constexpr int kChunkRows = 4096;               // the pool's period (every page size divides it)

  // Draws the case's inputs from `seed` and uploads one set of them, or with `l2_bytes`
  // copies_out_of_l2(one set, l2_bytes, 16) sets.
  MlaDecodeProblem(const MlaDecodeCase& c, uint64_t seed, size_t l2_bytes = 0);

  const MlaDecodeCase& spec() const { return c_; }
  nlohmann::ordered_json case_json() const override { return c_.to_json(); }
  std::string describe() const override { return c_.describe(); }
  int copies() const override { return static_cast<int>(q_.size()); }

  MlaDecodeArgs args(int copy = 0) const;
  // What an engine plans with: the views of args(0), max_len = s_k, num_splits = splits.
  MlaDecodeShape shape() const;

  Prepared prepare(const nlohmann::json* overrides) override;
  void poison_output() override;                       // 0xFF bytes: NaN in out and lse
  std::vector<uint8_t> output_bytes() const override;  // out as the GPU wrote it
  // Downloads out (and lse) and judges them against the float64 reference on
  // `sampled_rows` random rows plus every edge row (0: all rows), and the whole output's
  // structure (poison left, empty rows, lse infinities).
  MlaComparison judge(int sampled_rows = 16) const;
  Verdict check(int sampled_rows) const override;
  // Split count and tile size change the summation order only (bf16: ~2^-9 relative per
  // element); a wrong kernel is off by O(1).
  std::string compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const override;

  double bytes() const override;  // cache rows read once + q + out (lse not counted)
  double flops() const override;  // 2 · (q·k pairs) · (576 + 512), causal for q_len > 1
  // docs/performance.md's targets on the H100: h = 16 memory-bound, h = 128 with q_len = 2
  // compute-bound.
  nlohmann::json target() const override;

 private:
  MlaProblem host_problem() const;  // the reference's view of the inputs

  MlaDecodeCase c_;
  int max_pages_ = 0, num_pages_ = 0;
  std::vector<int32_t> lens_, table_, ref_table_;
  std::vector<float> q_vals_, chunk_vals_;
  std::vector<DeviceBuffer> q_, cache_;
  DeviceBuffer table_d_, lens_d_, out_d_, lse_d_;
};

}  // namespace attnjit::harness
