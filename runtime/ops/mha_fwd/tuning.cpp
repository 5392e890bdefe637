// mha_fwd's autotuning: shape, bucket, search space (registry TuningSpec; the split count
// is a run-time field of decode-like shapes' candidates) and the runtime's choice
// (mha_fwd_selected_config, and the split count of calls with num_splits = 0).
#include "ops/mha_fwd/internal.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <shared_mutex>
#include <utility>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/tuning.hpp"
#include "driver/driver.hpp"
#include "ops/mha_fwd/config.hpp"
#include "ops/registry.hpp"
#include "tuning/db.hpp"
#include "tuning/shape.hpp"

namespace attnjit {
namespace {

using nlohmann::json;

constexpr const char* kShapeKeys = "b, s_q, s_k, h, h_kv, d, dv, causal, dtype, group";
using mha_detail::kMaxGridYZ;
using mha_detail::kMaxSplits;  // mha_fwd's own bound on num_splits
constexpr int kDecodeRows = 128;    // one CTA's query rows (block_m)

// Few CTAs per (batch, head): s_q · g query rows fit one 128-row tile. Only these shapes
// search the split count, and only their bucket holds the batch (the split decision
// depends on how many CTAs the batch gives).
bool decode_like(int64_t s_q, int64_t group) { return s_q * std::max<int64_t>(group, 1) <= kDecodeRows; }

json shape_json(DType dtype, int d, int dv, bool causal, int group, const mha_tuning::CallSizes& z) {
  return {{"b", z.b},  {"s_q", z.s_q}, {"s_k", z.s_k},           {"h", z.h},
          {"h_kv", z.h_kv}, {"d", d},  {"dv", dv},               {"causal", causal ? 1 : 0},
          {"dtype", std::string(to_string(dtype))},              {"group", group}};
}

// `attnjit bench mha_fwd`'s keys and defaults (b=8, seq 4096, h=16, d=128). A shape no
// config can run is an error here, not an empty search space.
json canonical_shape(const json& j) {
  tuning::ShapeReader r(j, "mha_fwd", kShapeKeys);
  mha_tuning::CallSizes z;
  z.b = r.get_int("b", 8, 1, 1 << 20);
  z.s_q = r.get_int("s_q", 4096, 1, INT32_MAX);
  z.s_k = r.get_int("s_k", 4096, 1, INT32_MAX);
  z.h = r.get_int("h", 16, 1, kMaxGridYZ);
  z.h_kv = r.get_int("h_kv", z.h, 1, kMaxGridYZ);
  const int d = static_cast<int>(r.get_int("d", 128, 1, 1024));
  const int dv = static_cast<int>(r.get_int("dv", d == 192 ? 128 : d, 1, 1024));
  const bool causal = r.get_int("causal", 0, 0, 1) != 0;
  const DType dtype = r.get_dtype("dtype", DType::kBF16);
  const int group = static_cast<int>(r.get_int("group", 0, 0, 16));
  r.finish();
  if (d != 64 && d != 128 && d != 192 && d != 256)
    fail_arg(r.where("d"), fmt::format("must be 64, 128, 192 or 256, got {}", d));
  if (!(dv == d && d != 192) && !(d == 192 && dv == 128))
    fail_arg(r.where("dv"), fmt::format("must equal d (64, 128, 256), or be 128 with d = 192; got "
                                        "d = {}, dv = {}",
                                        d, dv));
  if (dtype != DType::kBF16 && dtype != DType::kF16)
    fail_arg(r.where("dtype"), fmt::format("must be bf16 or f16, got {}", to_string(dtype)));
  if (z.h % z.h_kv != 0)
    fail_arg(r.where("h_kv"), fmt::format("must divide h = {}, got {}", z.h, z.h_kv));
  if (group != 0 && group != 2 && group != 4 && group != 8 && group != 16)
    fail_arg(r.where("group"), fmt::format("must be 0, 2, 4, 8 or 16, got {}", group));
  if (group > 0 && z.h != int64_t{group} * z.h_kv)
    fail_arg(r.where("group"), fmt::format("packs {} query heads per KV head, but h / h_kv = {} / {}",
                                           group, z.h, z.h_kv));
  if (z.b * z.s_q > INT32_MAX || z.b * z.s_k > INT32_MAX)
    fail_arg(r.where("b"), fmt::format("b × s_q and b × s_k must stay below 2^31, got {} × {} and "
                                       "{} × {}",
                                       z.b, z.s_q, z.b, z.s_k));
  return shape_json(dtype, d, dv, causal, group, z);
}

// Head dims, dtype, causal and group are compiled into the kernel: exact; h and h_kv set
// the grid: exact. s_q and s_k: one bucket per power of two each. Decode-like shapes (the
// split count is tuned) also carry the batch's power of two.
std::string bucket(const json& s) {
  const int64_t s_q = s.at("s_q").get<int64_t>(), group = s.at("group").get<int64_t>();
  std::string out = fmt::format("{} d={} dv={} causal={} group={} h={} h_kv={} s_q=2^{} s_k=2^{}",
                                s.at("dtype").get<std::string>(), s.at("d").get<int>(),
                                s.at("dv").get<int>(), s.at("causal").get<int>(), group,
                                s.at("h").get<int64_t>(), s.at("h_kv").get<int64_t>(),
                                tuning::ceil_log2(s_q), tuning::ceil_log2(s.at("s_k").get<int64_t>()));
  if (decode_like(s_q, group)) out += fmt::format(" b=2^{}", tuning::ceil_log2(s.at("b").get<int64_t>()));
  return out;
}

MhaFwdConfig default_config_of(const json& s) {
  return mha_fwd_default_config(
      {.dtype = *parse_dtype(s.at("dtype").get<std::string>()),
       .head_dim = s.at("d").get<int>(),
       .head_dim_v = s.at("dv").get<int>(),
       .mask = s.at("causal").get<int>() != 0 ? MaskKind::kCausal : MaskKind::kNone,
       .group = s.at("group").get<int>()});
}

json candidate_json(const MhaFwdConfig& c, int num_splits) {
  json j = json::parse(c.to_json());
  j["num_splits"] = num_splits;
  return j;
}

// block_n 64..256 in steps of 16 × stages 2, 3 (MhaFwdConfig::validate drops what breaks
// the shared-memory fit or the register rule) × split counts 0 (the heuristic's), 1, 2, 4, 8
// for decode-like shapes only (elsewhere the grid fills the GPU without splitting).
std::vector<json> search_space(const json& shape) {
  std::vector<json> out;
  const MhaFwdConfig base = default_config_of(shape);
  const bool splits = decode_like(shape.at("s_q").get<int64_t>(), shape.at("group").get<int64_t>());
  for (int block_n = 64; block_n <= 256; block_n += 16)
    for (int stages : {2, 3})
      for (int num_splits : {0, 1, 2, 4, 8}) {
        if (!splits && num_splits != 0) continue;
        MhaFwdConfig c = base;
        c.block_n = block_n;
        c.stages = stages;
        out.push_back(candidate_json(c, num_splits));
      }
  return out;
}

std::string prune(const json& candidate, const json& shape) {
  const int splits = candidate.value("num_splits", 0);
  const int block_n = candidate.value("block_n", 128);
  const int64_t s_q = shape.at("s_q").get<int64_t>(), s_k = shape.at("s_k").get<int64_t>();
  const int64_t group = shape.at("group").get<int64_t>();
  if (splits < 0 || splits > kMaxSplits)
    return fmt::format("num_splits {} is outside 0..{}", splits, kMaxSplits);
  if (splits != 0 && !decode_like(s_q, group))
    return fmt::format("num_splits {}: the split count is searched only for decode-like shapes "
                       "(s_q · max(group, 1) ≤ {}), here {}",
                       splits, kDecodeRows, s_q * std::max<int64_t>(group, 1));
  const int64_t kv_tiles = (s_k + block_n - 1) / block_n;
  if (splits > 1 && splits > kv_tiles)
    return fmt::format("num_splits {} exceeds the {} {}-key tiles of s_k = {}", splits, kv_tiles,
                       block_n, s_k);
  if (block_n - 16 >= s_k)
    return fmt::format("a {}-key tile is wider than s_k = {} (a narrower one covers it)", block_n, s_k);
  return {};
}

struct MemoKey {
  int device, dtype, d, dv, causal, group;
  int64_t h, h_kv;
  int sq_log2, sk_log2, b_log2;
  friend bool operator==(const MemoKey&, const MemoKey&) = default;
};
std::shared_mutex g_memo_mutex;
std::vector<std::pair<MemoKey, mha_tuning::Choice>> g_memo;
uint64_t g_memo_generation = 0;
std::atomic<bool> g_warned_bad_entry{false};

}  // namespace

namespace mha_tuning {

Choice lookup(const MhaFwdConfig& f, const CallSizes& z) {
  // The tuned shapes are plain or causal attention; other masks see other key ranges.
  if (f.mask != MaskKind::kNone && f.mask != MaskKind::kCausal) return {};
  if (z.b <= 0 || z.s_q <= 0 || z.s_k <= 0 || z.h <= 0 || z.h_kv <= 0) return {};
  int device = 0;
  try {
    device = static_cast<int>(driver::current_device());
  } catch (const Error&) {
    return {};
  }
  const bool decode = decode_like(z.s_q, f.group);
  const MemoKey key{device,  static_cast<int>(f.dtype), f.head_dim, f.head_dim_v,
                    f.mask == MaskKind::kCausal, f.group, z.h, z.h_kv, tuning::ceil_log2(z.s_q),
                    tuning::ceil_log2(z.s_k), decode ? tuning::ceil_log2(z.b) : -1};
  const uint64_t generation = tuning_db_generation();
  {
    std::shared_lock lock(g_memo_mutex);
    if (g_memo_generation == generation)
      for (const auto& [k, c] : g_memo)
        if (k == key) return c;
  }
  Choice choice;
  const json shape = shape_json(f.dtype, f.head_dim, f.head_dim_v, f.mask == MaskKind::kCausal,
                                f.group, z);
  bool runnable = true;
  try {
    canonical_shape(shape);
  } catch (const Error&) {
    runnable = false;  // no tuned shape looks like this call: the heuristic
  }
  try {
    if (auto t = runnable ? tuned_config("mha_fwd", shape) : std::nullopt) {
      const int splits = tuning::take_runtime_int(*t, "num_splits", 0, 0, kMaxSplits);
      const MhaFwdConfig c = MhaFwdConfig::from_json(t->dump());
      // The bucket pins these; a mismatch means an entry written by hand or by another build.
      if (c.dtype != f.dtype || c.head_dim != f.head_dim || c.head_dim_v != f.head_dim_v ||
          c.group != f.group || splits < 0 || splits > kMaxSplits)
        throw Error(ErrorKind::kUnsupportedConfig,
                    fmt::format("config {} with num_splits {} does not fit the shape", c.to_json(), splits));
      choice = Choice{true, c.block_n, c.stages, decode ? splits : 0};
    }
  } catch (const Error& e) {
    if (!g_warned_bad_entry.exchange(true))
      tuning::warn_stderr(fmt::format("tuning database {}: unusable mha_fwd entry ({}); using "
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

std::optional<MhaFwdConfig> apply(const MhaFwdConfig& base, int block_n, int stages) {
  MhaFwdConfig c = base;
  c.block_n = block_n;
  c.stages = stages;
  try {
    c.validate();
  } catch (const Error&) {
    return std::nullopt;
  }
  return c;
}

int tuned_splits(const MhaFwdConfig& config, const CallSizes& sizes) {
  const Choice t = lookup(config, sizes);
  // b × num_splits stays within a grid dimension (65535), as the heuristic's choice does.
  if (!t.found || t.num_splits <= 0 || sizes.b * t.num_splits > kMaxGridYZ) return 0;
  return t.num_splits;
}

}  // namespace mha_tuning

MhaFwdConfig mha_fwd_selected_config(const MhaFwdShape& shape) {
  const MhaFwdConfig base = mha_fwd_default_config(shape.features);
  // The bucket's sizes are the launcher's bounds.
  const mha_tuning::CallSizes sizes{shape.batch, shape.max_seqlen_q, shape.max_seqlen_k,
                                    shape.h_q, shape.h_kv};
  const mha_tuning::Choice t = mha_tuning::lookup(base, sizes);
  if (t.found) return mha_tuning::apply(base, t.block_n, t.stages).value_or(base);
  // No tuned entry: short calls take a smaller key tile where it pays.
  if (const int n = ops::mha_short_call_block_n(base, shape.max_seqlen_k); n > 0)
    return mha_tuning::apply(base, n, base.stages).value_or(base);
  return base;
}

namespace ops {

TuningSpec mha_fwd_tuning_spec() {
  TuningSpec t;
  t.shape_keys = kShapeKeys;
  t.canonical_shape = canonical_shape;
  t.bucket = bucket;
  // The default candidate is what a call without a tuned entry runs: the op's default config,
  // with mha_fwd_selected_config's smaller tile for short calls.
  t.default_candidate = [](const json& shape) {
    MhaFwdConfig c = default_config_of(shape);
    if (const int n = ops::mha_short_call_block_n(c, shape.at("s_k").get<int64_t>()); n > 0)
      c.block_n = n;
    return candidate_json(c, 0);
  };
  t.search_space = search_space;
  t.prune = prune;
  t.runtime_fields = {"num_splits"};
  // The main kernel, and the combine kernel: a call leaving the split count to the op
  // splits any config's KV range when its grid underfills the GPU.
  t.variants = [](const json& config) {
    const MhaFwdConfig c = MhaFwdConfig::from_json(config.dump());
    return std::vector<KernelVariant>{
        {&find_op("mha_fwd"), config},
        {&find_op("mha_fwd_combine"),
         mha_combine_json({c.dtype, c.head_dim_v, c.ragged, c.sink})}};
  };
  // `attnjit bench mha_fwd`'s 8k rows (b = 4, h = 2048 / dv; d 64, 128, 256 and (192, 128),
  // causal or not) and its decode row (b 64, s_q 1, s_k 32k, GQA 8 packed).
  for (auto [d, dv] : std::vector<std::pair<int, int>>{{64, 64}, {128, 128}, {256, 256}, {192, 128}})
    for (bool causal : {false, true})
      t.bench_shapes.push_back(
          shape_json(DType::kBF16, d, dv, causal, 0, {4, 8192, 8192, 2048 / dv, 2048 / dv}));
  t.bench_shapes.push_back(shape_json(DType::kBF16, 128, 128, true, 8, {64, 1, 32768, 16, 2}));
  return t;
}

}  // namespace ops
}  // namespace attnjit
