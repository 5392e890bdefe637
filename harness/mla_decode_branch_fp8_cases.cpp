// The mla_decode_branch_fp8 problem's cases: the JSON reader and issue 22's bench rows.
#include "harness/mla_decode_branch_fp8_cases.hpp"

#include <fmt/format.h>

#include "attnjit/error.hpp"
#include "ops/registry.hpp"

namespace attnjit::harness {

BranchCase read_case(const nlohmann::json& s) {
  if (!s.is_object()) fail_arg("mla_decode_branch_fp8 shape", "must be a JSON object");
  BranchCase c;
  for (const auto& item : s.items()) {
    const std::string& key = item.key();
    const nlohmann::json& v = item.value();
    auto int_in = [&](int lo, int hi) {
      if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
        fail_arg(fmt::format("mla_decode_branch_fp8 shape key '{}'", key),
                 fmt::format("must be an integer in {}..{}, got {}", lo, hi, v.dump()));
      return v.get<int>();
    };
    if (key == "b") c.b = int_in(1, 4096);
    else if (key == "q_len") c.q_len = int_in(1, 8);
    else if (key == "h") c.h = int_in(1, 128);
    else if (key == "s_k") c.s_k = int_in(1, 1 << 18);
    else if (key == "page") c.page = int_in(64, 256);
    else if (key == "varq") c.varq = int_in(0, 1) == 1;
    else if (key == "topk") c.topk = int_in(0, 65536);
    else if (key == "extra") c.extra = int_in(0, 4096);
    else if (key == "cache") {
      if (v != "bf16" && v != "fp8" && v != "fp8b")
        fail_arg("mla_decode_branch_fp8 shape key 'cache'",
                 fmt::format("must be \"bf16\", \"fp8\" (640-byte) or \"fp8b\" (656-byte, sparse), got {}", v.dump()));
      c.fp8 = v == "fp8";
      c.block = v == "fp8b";
    } else if (key == "stage") {
      bool found = false;
      for (MlaBranchStage st : {MlaBranchStage::kAll, MlaBranchStage::kRope, MlaBranchStage::kAbsorb,
                                MlaBranchStage::kAttention, MlaBranchStage::kOutput})
        if (v.is_string() && v.get<std::string>() == to_string(st)) c.stage = st, found = true;
      if (!found)
        fail_arg("mla_decode_branch_fp8 shape key 'stage'",
                 fmt::format("must be all, rope, absorb, attention or output, got {}", v.dump()));
    } else {
      fail_arg(fmt::format("mla_decode_branch_fp8 shape key '{}'", key),
               "is not one of b, q_len, h, s_k, page, cache, varq, topk, extra, stage");
    }
  }
  if (kBranchPoolPeriod % c.page != 0) fail_arg("mla_decode_branch_fp8 shape key 'page'", "must be 64, 128 or 256");
  if (c.s_k < c.q_len) fail_arg("mla_decode_branch_fp8 shape key 's_k'", "must be >= q_len (lengths after the step)");
  if (c.block && c.topk == 0) fail_arg("mla_decode_branch_fp8 shape key 'topk'", "must be >= 1 with cache fp8b (sparse)");
  if (c.fp8 && c.topk > 0) fail_arg("mla_decode_branch_fp8 shape key 'topk'", "must be 0 with cache fp8 (dense only)");
  if (c.extra > 0 && c.topk == 0) fail_arg("mla_decode_branch_fp8 shape key 'extra'", "needs topk >= 1 (sparse)");
  return c;
}

std::vector<BranchCase> bench_cases() {
  std::vector<BranchCase> v;
  for (const nlohmann::json& s : ops::find_op("mla_decode_branch_fp8").tuning.bench_shapes) v.push_back(read_case(s));
  for (bool fp8 : {false, true})
    for (int h : {128, 16})
      for (MlaBranchStage st : {MlaBranchStage::kRope, MlaBranchStage::kAbsorb, MlaBranchStage::kAttention,
                                MlaBranchStage::kOutput}) {
        BranchCase c;
        c.fp8 = fp8, c.h = h, c.stage = st;
        v.push_back(c);
      }
  // The sparse top-k 2048 rows (issue 20's, 32k positions per sequence, the 656-byte cache).
  for (int h : {128, 16}) {
    BranchCase c;
    c.h = h, c.s_k = 32768, c.block = true, c.topk = 2048;
    v.push_back(c);
  }
  // The projections at a decode step of 16 tokens (b 16, q_len 1), where issue 22 asks for
  // the weights read at >= 2.0 TB/s.
  for (int h : {128, 16})
    for (MlaBranchStage st : {MlaBranchStage::kAbsorb, MlaBranchStage::kOutput}) {
      BranchCase c;
      c.b = 16, c.h = h, c.stage = st;
      v.push_back(c);
    }
  // And at 64 and 256 tokens, the ends of the range where it asks for all their bytes at
  // >= 80 % of copy (128 tokens is the stage rows above).
  for (int b : {64, 256})
    for (MlaBranchStage st : {MlaBranchStage::kAbsorb, MlaBranchStage::kOutput}) {
      BranchCase c;
      c.b = b, c.stage = st;
      v.push_back(c);
    }
  return v;
}

}  // namespace attnjit::harness
