// mla_decode's autotuning: shape, bucket, search space (registry TuningSpec; the split
// count is a run-time field of the candidates) and the runtime's choice for calls without
// a config or a split count.
#include "ops/mla_decode/internal.hpp"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <utility>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/tuning.hpp"
#include "driver/driver.hpp"
#include "ops/registry.hpp"
#include "tuning/db.hpp"
#include "tuning/shape.hpp"

namespace attnjit {
namespace {

using nlohmann::json;

constexpr const char* kShapeKeys = "b, q_len, h, s_k, page, dtype";
using mla_detail::kMaxSplits;  // mla_decode's own bound on num_splits

json shape_json(DType dtype, int64_t b, int64_t q_len, int64_t h, int64_t s_k, int64_t page) {
  return {{"b", b},     {"q_len", q_len}, {"h", h},
          {"s_k", s_k}, {"page", page},   {"dtype", std::string(to_string(dtype))}};
}

// The benchmark's defaults; the ranges are the kernel's (a shape no config can run is an
// error here, not an empty search space).
json canonical_shape(const json& j) {
  tuning::ShapeReader r(j, "mla_decode", kShapeKeys);
  const int64_t b = r.get_int("b", 128, 1, 1 << 20);
  const int64_t q_len = r.get_int("q_len", 1, 1, 8);
  const int64_t h = r.get_int("h", 128, 1, 128);
  const int64_t s_k = r.get_int("s_k", 4096, 1, INT32_MAX);
  const int64_t page = r.get_int("page", 64, 16, 256);
  const DType dtype = r.get_dtype("dtype", DType::kBF16);
  r.finish();
  if ((page & (page - 1)) != 0)
    fail_arg(r.where("page"), fmt::format("must be a power of two, got {}", page));
  if (dtype != DType::kBF16 && dtype != DType::kF16)
    fail_arg(r.where("dtype"), fmt::format("must be bf16 or f16, got {}", to_string(dtype)));
  return shape_json(dtype, b, q_len, h, s_k, page);
}

// Heads, q_len, page size and dtype are compiled into the kernel: exact. Batch and length
// set the grid and the split decision: one bucket per power of two of each.
std::string bucket(const json& s) {
  return fmt::format("{} h={} q_len={} page={} b=2^{} s_k=2^{}", s.at("dtype").get<std::string>(),
                     s.at("h").get<int64_t>(), s.at("q_len").get<int64_t>(),
                     s.at("page").get<int64_t>(), tuning::ceil_log2(s.at("b").get<int64_t>()),
                     tuning::ceil_log2(s.at("s_k").get<int64_t>()));
}

MlaDecodeConfig default_config_of(const json& s) {
  return mla_decode_default_config(*parse_dtype(s.at("dtype").get<std::string>()),
                                   s.at("h").get<int>(), s.at("q_len").get<int>(),
                                   s.at("page").get<int>());
}

json candidate_json(const MlaDecodeConfig& c, int num_splits) {
  json j = json::parse(c.to_json());
  j["num_splits"] = num_splits;
  return j;
}

// schedule × block_n 32 | 64 × stages 2..4 (MlaDecodeConfig::validate drops what does not
// fit: 64-key tiles allow 2 stages only, seesaw runs 64 keys in 2 buffers only) × split
// counts 0 (the heuristic's) and 1..64 in powers of two.
std::vector<json> search_space(const json& shape) {
  std::vector<json> out;
  const MlaDecodeConfig base = default_config_of(shape);
  for (MlaSchedule schedule : {MlaSchedule::kSeesaw, MlaSchedule::kSoftmaxWarpgroup})
    for (int block_n : {32, 64})
      for (int stages : {2, 3, 4})
        for (int splits : {0, 1, 2, 4, 8, 16, 32, 64}) {
          MlaDecodeConfig c = base;
          c.schedule = schedule;
          c.block_n = block_n;
          c.stages = stages;
          out.push_back(candidate_json(c, splits));
        }
  return out;
}

std::string prune(const json& candidate, const json& shape) {
  const int splits = candidate.value("num_splits", 0);
  const int64_t s_k = shape.at("s_k").get<int64_t>();
  const int64_t kv_tiles = (s_k + 63) / 64;  // the kernel splits the KV range in 64-key units
  if (splits < 0 || splits > kMaxSplits)
    return fmt::format("num_splits {} is outside 0..{}", splits, kMaxSplits);
  if (splits > 1 && splits > kv_tiles)
    return fmt::format("num_splits {} exceeds the {} 64-key tiles of s_k = {}", splits, kv_tiles, s_k);
  return {};
}

struct MemoKey {
  int device, dtype, b_log2, q_len, h, page, len_log2;
  friend bool operator==(const MemoKey&, const MemoKey&) = default;
};
std::shared_mutex g_memo_mutex;
std::vector<std::pair<MemoKey, mla_tuning::Choice>> g_memo;
uint64_t g_memo_generation = 0;
std::atomic<bool> g_warned_bad_entry{false};

}  // namespace

namespace mla_tuning {

Choice lookup(DType dtype, int64_t b, int64_t q_len, int64_t h, int64_t page, int64_t max_len) {
  if (b <= 0 || q_len <= 0 || h <= 0 || page <= 0 || max_len <= 0) return {};
  int device = 0;
  try {
    device = static_cast<int>(driver::current_device());
  } catch (const Error&) {
    return {};
  }
  const MemoKey key{device, static_cast<int>(dtype), tuning::ceil_log2(b), static_cast<int>(q_len),
                    static_cast<int>(h), static_cast<int>(page), tuning::ceil_log2(max_len)};
  const uint64_t generation = tuning_db_generation();
  {
    std::shared_lock lock(g_memo_mutex);
    if (g_memo_generation == generation)
      for (const auto& [k, c] : g_memo)
        if (k == key) return c;
  }
  const json shape = shape_json(dtype, b, q_len, h, max_len, page);
  try {
    canonical_shape(shape);
  } catch (const Error&) {
    return {};  // no config can run this shape: the call's own checks say why
  }
  Choice choice;
  try {
    if (auto t = tuned_config("mla_decode", shape)) {
      const int splits = tuning::take_runtime_int(*t, "num_splits", 0, 0, kMaxSplits);
      const MlaDecodeConfig c = MlaDecodeConfig::from_json(t->dump());
      // The bucket pins these; a mismatch means an entry written by hand or by another build.
      if (c.dtype != dtype || c.num_heads != h || c.page_size != page || c.max_q_len < q_len ||
          splits < 0 || splits > kMaxSplits)
        throw Error(ErrorKind::kUnsupportedConfig,
                    fmt::format("config {} with num_splits {} does not fit the shape", c.to_json(), splits));
      choice = Choice{true, c, splits};
    }
  } catch (const Error& e) {
    if (!g_warned_bad_entry.exchange(true))
      tuning::warn_stderr(fmt::format("tuning database {}: unusable mla_decode entry ({}); using "
                                      "the built-in heuristic",
                                      tuning_db_path(), e.what()));
  }
  std::unique_lock lock(g_memo_mutex);
  if (g_memo_generation != generation) {
    g_memo.clear();
    g_memo_generation = generation;
  }
  g_memo.emplace_back(key, choice);
  return choice;
}

}  // namespace mla_tuning

MlaDecodeConfig mla_decode_selected_config(const MlaDecodeShape& s) {
  // Exactly what mla_decode picked before tuning existed, for any shape (even a bad one:
  // the checks that follow report it).
  const MlaDecodeConfig fallback =
      mla_decode_default_config(s.dtype, s.num_heads, s.q_len, s.page_size);
  if (s.batch < 0 || s.q_len < 1 || s.max_pages < 1) return fallback;
  const int64_t max_len = s.max_len > 0 ? s.max_len : int64_t{s.max_pages} * s.page_size;
  const mla_tuning::Choice t =
      mla_tuning::lookup(s.dtype, s.batch, s.q_len, s.num_heads, s.page_size, max_len);
  return t.found ? t.config : fallback;
}

namespace ops {

TuningSpec mla_decode_tuning_spec() {
  TuningSpec t;
  t.shape_keys = kShapeKeys;
  t.canonical_shape = canonical_shape;
  t.bucket = bucket;
  t.default_candidate = [](const json& shape) { return candidate_json(default_config_of(shape), 0); };
  t.search_space = search_space;
  t.prune = prune;
  t.runtime_fields = {"num_splits"};
  t.variants = [](const json& config) {
    const MlaDecodeConfig c = MlaDecodeConfig::from_json(config.dump());
    return std::vector<KernelVariant>{
        {&find_op("mla_decode"), config},
        {&find_op("mla_decode_combine"),
         {{"dtype", std::string(to_string(c.dtype))}, {"num_heads", c.num_heads}}}};
  };
  // `attnjit bench mla_decode`'s fixed-length shapes (the varlen one has no single bucket).
  for (auto [b, q_len, h, s_k] : std::vector<std::array<int, 4>>{{128, 1, 16, 4096},
                                                                 {128, 2, 16, 8192},
                                                                 {128, 1, 64, 8192},
                                                                 {128, 1, 128, 4096},
                                                                 {128, 2, 128, 4096},
                                                                 {8, 1, 128, 32768}})
    t.bench_shapes.push_back(shape_json(DType::kBF16, b, q_len, h, s_k, 64));
  return t;
}

}  // namespace ops
}  // namespace attnjit
