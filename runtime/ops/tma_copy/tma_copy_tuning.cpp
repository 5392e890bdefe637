// tma_copy's autotuning: shape, bucket, search space (registry TuningSpec) and the
// runtime's choice for calls without a config (tma_copy_selected_config).
#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <utility>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/ops/tma_copy.hpp"
#include "attnjit/tuning.hpp"
#include "driver/driver.hpp"
#include "ops/registry.hpp"
#include "tuning/db.hpp"
#include "tuning/shape.hpp"

namespace attnjit {
namespace {

using nlohmann::json;

constexpr const char* kShapeKeys = "rows, cols, dtype";

json shape_json(int64_t rows, int64_t cols, DType dtype) {
  return {{"rows", rows}, {"cols", cols}, {"dtype", std::string(to_string(dtype))}};
}

json canonical_shape(const json& j) {
  tuning::ShapeReader r(j, "tma_copy", kShapeKeys);
  const int64_t rows = r.get_int("rows", 16384, 1, INT32_MAX);
  const int64_t cols = r.get_int("cols", 8192, 1, INT32_MAX);
  const DType dtype = r.get_dtype("dtype", DType::kBF16);
  r.finish();
  return shape_json(rows, cols, dtype);
}

DType shape_dtype(const json& shape) { return *parse_dtype(shape.at("dtype").get<std::string>()); }

// Copy speed depends on the tile's bytes, the ring depth and the grid, which change
// slowly with the extents: one bucket per power of two of rows and of cols, dtype exact.
std::string bucket(const json& shape) {
  return fmt::format("{} rows=2^{} cols=2^{}", shape.at("dtype").get<std::string>(),
                     tuning::ceil_log2(shape.at("rows").get<int64_t>()),
                     tuning::ceil_log2(shape.at("cols").get<int64_t>()));
}

// Tiles of 64..256 rows × 128 or 256 bytes, unswizzled or 128B, 2..8 stages; the ring
// must fit in shared memory (TmaCopyConfig::validate prunes the rest).
std::vector<json> search_space(const json& shape) {
  const DType dtype = shape_dtype(shape);
  std::vector<json> out;
  for (int block_m : {64, 128, 256})
    for (int row_bytes : {128, 256})
      for (Swizzle s : {Swizzle::kNone, Swizzle::k128B})
        for (int stages : {2, 3, 4, 6, 8}) {
          TmaCopyConfig c;
          c.dtype = dtype;
          c.block_m = block_m;
          c.block_n = row_bytes / dtype_bytes(dtype);
          c.swizzle = s;
          c.stages = stages;
          out.push_back(json::parse(c.to_json()));
        }
  return out;
}

// A tile taller or wider than the whole tensor only adds clipped rows: the smaller tiles
// of the space already cover that shape.
std::string prune(const json& candidate, const json& shape) {
  const int64_t rows = shape.at("rows").get<int64_t>(), cols = shape.at("cols").get<int64_t>();
  const int block_m = candidate.at("block_m").get<int>(), block_n = candidate.at("block_n").get<int>();
  if (block_m > 64 && block_m > rows)
    return fmt::format("block_m {} is taller than the tensor's {} rows", block_m, rows);
  if (block_n * dtype_bytes(shape_dtype(shape)) > 128 && block_n > cols)
    return fmt::format("block_n {} is wider than the tensor's {} columns", block_n, cols);
  return {};
}

// Calls without a config look the database up once per (device, dtype, bucket) and
// generation; later calls read the memo under a shared lock.
struct MemoKey {
  int device, dtype, rows_log2, cols_log2;
  friend bool operator==(const MemoKey&, const MemoKey&) = default;
};
std::shared_mutex g_memo_mutex;
std::vector<std::pair<MemoKey, TmaCopyConfig>> g_memo;
uint64_t g_memo_generation = 0;
std::atomic<bool> g_warned_bad_entry{false};

}  // namespace

TmaCopyConfig tma_copy_selected_config(const TmaCopyShape& shape) {
  const auto [dtype, rows, cols] = shape;
  const TmaCopyConfig fallback = tma_copy_default_config(dtype);
  if (rows <= 0 || cols <= 0 || dtype_bytes(dtype) == 0) return fallback;
  int device = 0;
  try {
    device = static_cast<int>(driver::current_device());
  } catch (const Error&) {
    return fallback;  // no GPU or no context: tma_copy reports that itself
  }
  const MemoKey key{device, static_cast<int>(dtype), tuning::ceil_log2(rows), tuning::ceil_log2(cols)};
  const uint64_t generation = tuning_db_generation();
  {
    std::shared_lock lock(g_memo_mutex);
    if (g_memo_generation == generation)
      for (const auto& [k, c] : g_memo)
        if (k == key) return c;
  }
  TmaCopyConfig chosen = fallback;
  try {
    if (const auto t = tuned_config("tma_copy", shape_json(rows, cols, dtype))) {
      const TmaCopyConfig c = TmaCopyConfig::from_json(t->dump());
      if (c.dtype == dtype) chosen = c;
    }
  } catch (const Error& e) {
    // An entry this build cannot use (e.g. a hand-edited file): the heuristic, said once.
    if (!g_warned_bad_entry.exchange(true))
      tuning::warn_stderr(fmt::format("tuning database {}: unusable tma_copy entry ({}); using "
                                      "the built-in heuristic",
                                      tuning_db_path(), e.what()));
  }
  std::unique_lock lock(g_memo_mutex);
  if (g_memo_generation != generation) {
    g_memo.clear();
    g_memo_generation = generation;
  }
  g_memo.emplace_back(key, chosen);
  return chosen;
}

namespace ops {

TuningSpec tma_copy_tuning_spec() {
  TuningSpec t;
  t.shape_keys = kShapeKeys;
  t.canonical_shape = canonical_shape;
  t.bucket = bucket;
  t.default_candidate = [](const json& shape) {
    return json::parse(tma_copy_default_config(shape_dtype(shape)).to_json());
  };
  t.search_space = search_space;
  t.prune = prune;
  t.variants = [](const json& config) {
    return std::vector<KernelVariant>{{&find_op("tma_copy"), config}};
  };
  // tools/gpu_run.sh's tma_copy benchmark shapes.
  t.bench_shapes = {shape_json(16384, 16384, DType::kBF16), shape_json(16384, 16384, DType::kE4M3),
                    shape_json(16384, 8192, DType::kBF16)};
  return t;
}

}  // namespace ops
}  // namespace attnjit
