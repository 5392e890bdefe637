// merge_states' shape vocabulary (the harness's cases, `attnjit bench merge_states`) and its
// benchmark shapes. Not tunable: a single memory-bound pass whose default config runs at the
// copy limit (docs/performance.md, "merge_states"), so there is no search space and no
// tuning database lookup.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "attnjit/ops/merge_states.hpp"
#include "ops/registry.hpp"
#include "tuning/shape.hpp"

namespace attnjit::ops {
namespace {

using nlohmann::json;

constexpr const char* kShapeKeys = "tokens, heads, head_dim, dtype, lse_log2 (0 or 1)";

json shape_json(int64_t tokens, int64_t heads, int64_t head_dim, DType dtype, int64_t lse_log2 = 0) {
  return {{"tokens", tokens},
          {"heads", heads},
          {"head_dim", head_dim},
          {"dtype", std::string(to_string(dtype))},
          {"lse_log2", lse_log2}};
}

json canonical_shape(const json& j) {
  tuning::ShapeReader r(j, "merge_states", kShapeKeys);
  const int64_t tokens = r.get_int("tokens", 8192, 0, INT32_MAX);
  const int64_t heads = r.get_int("heads", 32, 1, 1 << 16);
  const int64_t head_dim = r.get_int("head_dim", 128, 1, 4096);
  const DType dtype = r.get_dtype("dtype", DType::kBF16);
  const int64_t lse_log2 = r.get_int("lse_log2", 0, 0, 1);
  r.finish();
  if (dtype != DType::kBF16 && dtype != DType::kF16 && dtype != DType::kF32)
    fail_arg(r.where("dtype"), fmt::format("must be bf16, f16 or f32, got {}", to_string(dtype)));
  return shape_json(tokens, heads, head_dim, dtype, lse_log2);
}

}  // namespace

TuningSpec merge_states_tuning_spec() {
  TuningSpec t;
  t.shape_keys = kShapeKeys;
  t.canonical_shape = canonical_shape;
  t.bucket = [](const json& s) { return s.dump(); };
  // Cascade prefill (a shared prefix and the suffixes, MHA heads of 128), an MLA decode
  // batch merged across context-parallel ranks (h 128, 512-wide latent values), f32
  // partials, and a small decode batch whose time is launch latency.
  t.bench_shapes = {shape_json(8192, 32, 128, DType::kBF16), shape_json(128, 128, 512, DType::kBF16),
                    shape_json(1024, 16, 512, DType::kF32), shape_json(64, 32, 128, DType::kBF16, 1)};
  return t;
}

}  // namespace attnjit::ops
