#pragma once
// mha_fwd as a problem: one shape vocabulary for `attnjit bench`, the tune worker and the
// tests, and the tensors, arguments, float64 reference and per-row comparison of a case.
//
// A case is padded and contiguous: q [b, s_q, h, d], k [b, s_k, h_kv, d], v [b, s_k, h_kv,
// dv], out like q with dv, lse [h, b·s_q]; no mask or causal (bottom-right aligned), with
// query heads packed per KV head when group > 0. Values are drawn from N(0, 1), rounded to
// the dtype, in a block of a prime number of values repeated over each tensor: drawing
// 100M normals one by one would dominate a run, and a prime period never lines up with rows
// or heads. Given the L2 size, enough input sets rotate that consecutive calls never find
// theirs in L2 (the benchmarks); out and lse are shared.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnjit/ops/mha_fwd.hpp"
#include "harness/device.hpp"
#include "harness/mha_reference.hpp"
#include "harness/problem.hpp"

namespace attnjit::harness {

struct MhaFwdCase {
  int b = 8;
  int s_q = 4096;
  int s_k = 4096;
  int h = 16;
  int h_kv = 16;
  int d = 128;
  int dv = 128;
  bool causal = false;
  DType dtype = DType::kBF16;
  int group = 0;   // query heads packed per KV head (the config's group)
  int splits = 0;  // 0: the plan's choice

  nlohmann::ordered_json to_json() const;  // every key, as mha_fwd_case reads it (causal 0/1)
  std::string describe() const;            // "b=8 s_q=4096 s_k=4096 h=16 d=128 causal bf16"
  MhaFwdFeatures features() const;         // what the tensors cannot say: mask, group, ...
};

// The tuning vocabulary — the registry's canonical_shape for mha_fwd: b, s_q, s_k, h, h_kv,
// d, dv, causal, dtype, group, with its defaults and ranges — plus splits, and seq (sets
// s_q and s_k unless given). Errors name the key.
MhaFwdCase mha_fwd_case(const nlohmann::json& shape);

// `attnjit bench mha_fwd`'s rows: seq 1k, 4k, 8k, 16k with batch·seq = 32k tokens, hidden
// 2048 (h = 2048 / dv), d 64 / 128 / 256 and (192, 128), causal and not; then a GQA-8
// decode row (b 64, one query, 32k keys, packed).
std::vector<MhaFwdCase> mha_fwd_bench_cases();

class MhaFwdProblem final : public Problem {
 public:
  // Draws the case's inputs from `seed` and uploads one set of them, or with `l2_bytes`
  // copies_out_of_l2(one set, l2_bytes, 8) sets.
  MhaFwdProblem(const MhaFwdCase& c, uint64_t seed, size_t l2_bytes = 0);

  const MhaFwdCase& spec() const { return c_; }
  nlohmann::ordered_json case_json() const override { return c_.to_json(); }
  std::string describe() const override { return c_.describe(); }
  int copies() const override { return static_cast<int>(q_.size()); }
  float softmax_scale() const;  // 1/sqrt(d)

  MhaFwdArgs args(int copy = 0) const;
  // What an engine plans with: the views of args(0) and the case's features (config: the
  // features of a given config, e.g. a tuning candidate's), num_splits = splits.
  MhaFwdShape shape() const;
  MhaFwdShape shape(const MhaFwdConfig& config) const;

  // A given config's features are the shape's (a tuning candidate may pack heads).
  Prepared prepare(const nlohmann::json* overrides) override;
  void poison_output() override;                       // 0xFF bytes: NaN in out and lse
  std::vector<uint8_t> output_bytes() const override;  // out as the GPU wrote it
  // Downloads out and lse and judges them against the float64 reference on `sampled_rows`
  // random rows plus every edge row (0: all rows), and the whole output's structure.
  MhaComparison judge(int sampled_rows = 16) const;
  Verdict check(int sampled_rows) const override;
  // Tile width, ring depth and split count change the summation order of the softmax and
  // P·V sums only (bf16: ~2^-8 relative per element); a wrong tile is off by O(1).
  std::string compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const override;

  double bytes() const override;  // K and V read once + q + out
  double flops() const override;  // 2 · (visible (row, key) pairs over every head) · (d + dv)

 private:
  MhaProblem host_problem() const;

  MhaFwdCase c_;
  std::vector<float> q_vals_, k_vals_, v_vals_;
  std::vector<DeviceBuffer> q_, k_, v_;
  DeviceBuffer out_d_, lse_d_;
};

}  // namespace attnjit::harness
