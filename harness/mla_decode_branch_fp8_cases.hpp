#pragma once
// The cases of the mla_decode_branch_fp8 problem (harness/mla_decode_branch_fp8_problem.cpp):
// one row of `attnjit bench mla_decode_branch_fp8`, its JSON keys, and issue 22's bench rows.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnjit/ops/mla_decode_branch_fp8.hpp"

namespace attnjit::harness {

// The cache pool's period in rows: one draw of rows repeated through the pool (every page
// size divides it).
inline constexpr int kBranchPoolPeriod = 4096;

struct BranchCase {
  int b = 128, q_len = 1, h = 128, s_k = 4096, page = 64;
  bool fp8 = false;    // the 640-byte cache
  bool block = false;  // the 656-byte cache (sparse only); neither: bf16
  bool varq = false;   // each sequence's new tokens uniform in 0..q_len (0 included)
  int topk = 0;        // sparse attention: indices per token, with a sink (0: dense)
  int extra = 0;       // sparse: the extra cache's indices per token (0: none)
  MlaBranchStage stage = MlaBranchStage::kAll;
  const char* cache_name() const { return fp8 ? "fp8" : block ? "fp8b" : "bf16"; }
  nlohmann::ordered_json to_json() const {
    return {{"b", b},     {"q_len", q_len},         {"h", h},
            {"s_k", s_k}, {"page", page},           {"cache", cache_name()},
            {"varq", varq ? 1 : 0}, {"topk", topk}, {"extra", extra}, {"stage", std::string(to_string(stage))}};
  }
};

// A case from its JSON (every key optional; errors name the key and its rule).
BranchCase read_case(const nlohmann::json& s);

// Issue 22's rows: b 128, q_len 1 and 2, h 128 and 16, cache 4096 and 32768, bf16 and fp8
// caches, the whole branch; then each stage alone at q_len 1, h 128 and h 16 (cache 4096);
// the sparse top-k 2048 rows; then the projections alone at 16, 64 and 256 tokens.
std::vector<BranchCase> bench_cases();

}  // namespace attnjit::harness
