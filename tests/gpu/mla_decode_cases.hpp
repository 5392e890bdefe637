#pragma once
// The mla_decode GPU tests' cases and their machinery (test_mla_decode.cpp,
// test_mla_decode_ragged.cpp): MlaCase, MlaData (host mirror and device buffers, NaN
// past every length, a permuted block table with garbage past the used pages), one
// plan + schedule + run with poisoned outputs, the float64 reference (sampled rows
// above kFullReferencePairs), and parallel compilation of the configs a test needs.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/ops/mla_decode.hpp"
#include "driver/driver.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"
#include "support/values.hpp"

namespace attnjit::test::mla_gpu {

// The shared value helpers (support/values.hpp, harness/device.hpp), for the test files
// that use this namespace.
using test::FastNormal;
using test::from_bits;
using test::to_bits;
using test::upload_rounded;

inline constexpr double kDeepSeekScale = 0.07216878364870323;  // 1/sqrt(192)
inline constexpr int64_t kFullReferencePairs = 4'000'000;      // above: sample rows
inline constexpr int kMaxSampledRows = 256;

struct MlaCase {
  DType dtype = DType::kBF16;
  int q_len = 1;
  int heads = 64;
  int page_size = 64;
  std::vector<int> lens;  // [b]; the batch size is lens.size()
  int max_pages = 0;      // block table width; 0: enough for max(lens) plus 2 garbage entries
  int spare_pages = 3;    // pool pages no sequence uses (NaN-filled)
  double scale = kDeepSeekScale;

  int batch() const { return static_cast<int>(lens.size()); }
  std::string describe() const {
    std::string l = lens.size() <= 12 ? fmt::format("{}", fmt::join(lens, ","))
                                      : fmt::format("{} lengths, max {}", lens.size(),
                                                    *std::max_element(lens.begin(), lens.end()));
    return fmt::format("{} b{} q_len{} h{} page{} scale {:.4f} lens [{}]", to_string(dtype),
                       batch(), q_len, heads, page_size, scale, l);
  }
};

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Host mirror and device copies of one problem. The capacity (pool pages, table width)
// is fixed at construction; refill() draws new lengths, table and values within it, as a
// CUDA-graph replay needs.
class MlaData {
 public:
  explicit MlaData(const MlaCase& c) : c_(c) {
    const int max_len = std::max(1, *std::max_element(c.lens.begin(), c.lens.end()));
    max_pages_ = c.max_pages > 0 ? c.max_pages : ceil_div(max_len, c.page_size) + 2;
    int used = 0;
    for (int l : c.lens) used += ceil_div(l, c.page_size);
    num_pages_ = used + c.spare_pages;
    const size_t b = static_cast<size_t>(c.batch()), ql = static_cast<size_t>(c.q_len),
                 h = static_cast<size_t>(c.heads);
    q_ = std::vector<float>(b * ql * h * test::kMlaQkDim);
    cache_ = std::vector<float>(static_cast<size_t>(num_pages_) * c.page_size * test::kMlaQkDim);
    table_ = std::vector<int32_t>(b * static_cast<size_t>(max_pages_));
    q_d_ = DeviceBuffer(q_.size() * 2);
    cache_d_ = DeviceBuffer(cache_.size() * 2);
    table_d_ = DeviceBuffer(table_.size() * 4);
    lens_d_ = DeviceBuffer(b * 4);
    out_d_ = DeviceBuffer(b * ql * h * test::kMlaVDim * 2);
    lse_d_ = DeviceBuffer(b * ql * h * 4);
    refill(c.lens);
  }

  void refill(const std::vector<int>& lens) {
    REQUIRE(lens.size() == c_.lens.size());
    lens_ = lens;
    auto& gen = test::rng();
    FastNormal normal(gen());
    // Pages in random order; each sequence takes the next ceil(L / page) of them.
    std::vector<int32_t> pages(static_cast<size_t>(num_pages_));
    for (int i = 0; i < num_pages_; ++i) pages[static_cast<size_t>(i)] = i;
    std::shuffle(pages.begin(), pages.end(), gen);
    // Table entries past a sequence's used pages: out of the pool, or a real page that no
    // sequence uses (NaN-filled, the last of the shuffled order): following one shows.
    REQUIRE(c_.spare_pages >= 1);
    const int32_t garbage[] = {-1, INT32_MAX, pages.back(), num_pages_, INT32_MIN, pages.back()};
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::fill(cache_.begin(), cache_.end(), nan);  // unused pages and rows past L
    size_t next = 0;
    for (int b = 0; b < c_.batch(); ++b) {
      const int len = lens[static_cast<size_t>(b)];
      const int used = ceil_div(len, c_.page_size);
      REQUIRE(used <= max_pages_);
      REQUIRE(next + static_cast<size_t>(used) <= pages.size());
      for (int p = 0; p < max_pages_; ++p) {
        int32_t& entry = table_[static_cast<size_t>(b) * max_pages_ + p];
        if (p >= used) {  // never to be followed by the kernel
          entry = garbage[(b + p) % std::size(garbage)];
          continue;
        }
        entry = pages[next++];
        const int rows = std::min(c_.page_size, len - p * c_.page_size);
        float* dst = cache_.data() + static_cast<size_t>(entry) * c_.page_size * test::kMlaQkDim;
        for (size_t i = 0; i < static_cast<size_t>(rows) * test::kMlaQkDim; ++i)
          dst[i] = rounded(normal());
      }
    }
    for (float& x : q_) x = rounded(normal());
    upload_rounded(q_d_, q_, c_.dtype);
    upload_rounded(cache_d_, cache_, c_.dtype);
    table_d_.upload(table_);
    lens_d_.upload(lens_);
  }

  MlaProblem problem() const {
    MlaProblem p;
    p.batch = c_.batch();
    p.q_len = c_.q_len;
    p.num_heads = c_.heads;
    p.page_size = c_.page_size;
    p.num_pages = num_pages_;
    p.max_pages = max_pages_;
    p.q = q_;
    p.kv_cache = cache_;
    p.block_table = table_;
    p.cache_lens = lens_;
    p.softmax_scale = static_cast<double>(static_cast<float>(c_.scale));  // what the GPU gets
    return p;
  }

  // Views over the device buffers.
  MlaDecodeArgs args(bool want_lse) const {
    const int64_t b = c_.batch(), ql = c_.q_len, h = c_.heads;
    MlaDecodeArgs a;
    a.q = TensorView::contiguous(q_d_.data(), c_.dtype, {b, ql, h, test::kMlaQkDim});
    a.kv_cache = TensorView::contiguous(cache_d_.data(), c_.dtype,
                                        {num_pages_, c_.page_size, test::kMlaQkDim});
    a.block_table = TensorView::contiguous(table_d_.data(), DType::kI32, {b, max_pages_});
    a.cache_lens = TensorView::contiguous(lens_d_.data(), DType::kI32, {b});
    a.out = TensorView::contiguous(out_d_.data(), c_.dtype, {b, ql, h, test::kMlaVDim});
    if (want_lse) a.lse = TensorView::contiguous(lse_d_.data(), DType::kF32, {b, h, ql});
    a.softmax_scale = static_cast<float>(c_.scale);
    return a;
  }

  void poison_outputs() {
    out_d_.fill_byte(0xFF);  // NaN in bf16, f16 and f32
    lse_d_.fill_byte(0xFF);
  }
  std::vector<float> download_out() const {
    const auto bits = out_d_.download_as<uint16_t>(out_d_.bytes() / 2);
    std::vector<float> out(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) out[i] = from_bits(bits[i], c_.dtype);
    return out;
  }
  std::vector<float> download_lse() const { return lse_d_.download_as<float>(lse_d_.bytes() / 4); }

  // Sequence i alone with only its first q_len tokens (batch 1): the reference for that
  // sequence of a ragged call built from this data.
  MlaProblem sequence_problem(int i, int q_len) const {
    MlaProblem p = problem();
    const size_t row = static_cast<size_t>(c_.heads) * test::kMlaQkDim;
    p.batch = 1;
    p.q_len = q_len;
    p.q = std::span<const float>(q_).subspan(static_cast<size_t>(i) * c_.q_len * row,
                                             static_cast<size_t>(q_len) * row);
    p.block_table = std::span<const int32_t>(table_).subspan(static_cast<size_t>(i) * max_pages_,
                                                             static_cast<size_t>(max_pages_));
    p.cache_lens = std::span<const int32_t>(lens_).subspan(static_cast<size_t>(i), 1);
    return p;
  }
  // Query token t of sequence i, as the 16-bit values the GPU reads.
  std::vector<uint16_t> token_bits(int i, int t) const {
    const size_t row = static_cast<size_t>(c_.heads) * test::kMlaQkDim;
    const float* src = q_.data() + (static_cast<size_t>(i) * c_.q_len + t) * row;
    std::vector<uint16_t> bits(row);
    for (size_t k = 0; k < row; ++k) bits[k] = to_bits(src[k], c_.dtype);
    return bits;
  }

  const MlaCase& spec() const { return c_; }
  int max_pages() const { return max_pages_; }
  const std::vector<int32_t>& lens() const { return lens_; }
  const DeviceBuffer& lens_buffer() const { return lens_d_; }
  const DeviceBuffer& cache_buffer() const { return cache_d_; }
  const DeviceBuffer& table_buffer() const { return table_d_; }
  int num_pages() const { return num_pages_; }

 private:
  float rounded(float x) const { return from_bits(to_bits(x, c_.dtype), c_.dtype); }

  MlaCase c_;
  int max_pages_ = 0, num_pages_ = 0;
  std::vector<int32_t> lens_;
  std::vector<float> q_;        // [b, q_len, h, 576]
  std::vector<float> cache_;    // [num_pages, page_size, 576]; NaN outside sequences
  std::vector<int32_t> table_;  // [b, max_pages]
  DeviceBuffer q_d_, cache_d_, table_d_, lens_d_, out_d_, lse_d_;
};

struct RunResult {
  std::vector<float> out;  // [b, q_len, h, 512]
  std::vector<float> lse;  // [b, h, q_len]; empty when not requested
  int splits = 0;
};

struct RunOptions {
  const MlaDecodeConfig* config = nullptr;  // nullptr: the runtime's own choice
  int num_splits = 0;
  bool want_lse = true;
  int max_len_hint = 0;
};

// The plan of a call with these options (shape read from the args, bounds from `o`).
inline MlaDecodePlan plan_mla(const MlaDecodeArgs& a, const RunOptions& o) {
  MlaDecodeShape shape = mla_decode_shape(a);
  shape.num_splits = o.num_splits;
  shape.max_len = o.max_len_hint;
  return mla_decode_plan(shape, o.config);
}

// One synchronous plan + schedule + run on the default stream with poisoned outputs and
// workspace.
inline RunResult run_mla(MlaData& d, const RunOptions& o) {
  const MlaDecodeArgs a = d.args(o.want_lse);
  const MlaDecodePlan plan = plan_mla(a, o);
  RunResult r;
  r.splits = plan.num_splits;  // 0: balanced
  if (o.num_splits > 0) CHECK(r.splits == o.num_splits);
  // No forced count and no tuning database in the tests: the balanced schedule.
  CHECK(plan.balanced == (o.num_splits == 0));
  REQUIRE((plan.balanced ? r.splits == 0 && plan.sm_slots >= 1 : r.splits >= 1));
  const size_t ws = plan.workspace_bytes;
  CHECK(ws == (plan.balanced ? mla_decode_balanced_workspace_bytes(plan.shape, plan.sm_slots,
                                                                   plan.config.invariant_tiles,
                                                                   plan.config.block_n)
                             : mla_decode_workspace_bytes(plan.shape, r.splits)));
  if (!plan.balanced && r.splits == 1) CHECK(ws == 0);
  DeviceBuffer workspace(ws);
  workspace.fill_byte(0xFF);  // partials must be written before they are read
  const Workspace w{ws ? workspace.data() : nullptr, ws};
  d.poison_outputs();
  mla_decode_schedule(plan, a, w, nullptr);
  mla_decode(a, plan, w, nullptr);
  test::synchronize();
  r.out = d.download_out();
  if (o.want_lse) r.lse = d.download_lse();
  return r;
}

inline int64_t pair_count(const MlaCase& c, const std::vector<int32_t>& lens) {
  int64_t pairs = 0;
  for (int l : lens)
    for (int t = 0; t < c.q_len; ++t)
      pairs += int64_t{c.heads} * test::mla_visible_keys(l, c.q_len, t);
  return pairs;
}

// Every row when that is cheap; else about kFullReferencePairs pairs' worth of random
// rows (24..256 of them) plus the edge rows.
inline MlaReference reference_for(const MlaData& d) {
  const MlaProblem p = d.problem();
  const int64_t pairs = pair_count(d.spec(), d.lens());
  if (pairs <= kFullReferencePairs) return test::mla_reference(p);
  const int64_t rows = int64_t{p.batch} * p.q_len * p.num_heads;
  const int64_t keys_per_row = std::max<int64_t>(1, pairs / rows);
  const int count = static_cast<int>(
      std::clamp<int64_t>(kFullReferencePairs / keys_per_row, 24, kMaxSampledRows));
  return test::mla_reference(p, test::mla_sample_rows(p, count, test::rng()));
}

// Judges one run; prints the numbers (the worst row included) so the GPU log shows them.
// some_keys: at least one row sees a key, so the numeric checks cover something.
inline void judge(const MlaProblem& p, const MlaReference& ref, const RunResult& r,
           const std::string& label, bool some_keys = true) {
  const MlaComparison c = test::mla_compare(p, ref, r.out, r.lse);
  const std::string line =
      fmt::format("mla_decode [{}] splits {}: {}", label, r.splits, c.summary());
  fmt::print("{}\n", line);
  INFO(line);
  CHECK(c.nonfinite_out == 0);        // poison left behind, or NaN rows read
  CHECK(c.empty_rows_not_zero == 0);  // a row with no key must be exactly 0
  CHECK(c.rel_l2 <= 1e-2);
  CHECK(c.worst_row_err <= 4e-2);
  if (!r.lse.empty()) {
    CHECK(c.lse_nonfinite == 0);
    CHECK(c.lse_wrong_inf == 0);
    CHECK(c.lse_max_abs_err <= 1e-3);
  }
  if (some_keys) CHECK(c.checked_rows > 0);
}

inline void judge(const MlaData& d, const MlaReference& ref, const RunResult& r,
           const std::string& label) {
  judge(d.problem(), ref, r, label);
}

// Default config for the case; kUnsupportedConfig here is a failure (every page size and
// head count the issue lists is meant to be supported), not a skip.
inline MlaDecodeConfig config_for(const MlaCase& c) {
  try {
    MlaDecodeConfig cfg = mla_decode_default_config(c.dtype, c.heads, c.q_len, c.page_size);
    cfg.validate();
    return cfg;
  } catch (const Error& e) {
    FAIL("no mla_decode config for " << c.describe() << ": " << e.what());
    throw;
  }
}

// A plan of one sequence that loads both of `c`'s kernels (a forced split needs the
// combine): what an engine does before capturing a graph.
inline MlaDecodePlan plan_for_config(const MlaDecodeConfig& c) {
  return mla_decode_plan({.dtype = c.dtype,
                          .batch = 1,
                          .q_len = 1,
                          .num_heads = c.num_heads,
                          .page_size = c.page_size,
                          .max_pages = 1,
                          .num_splits = 2},
                         &c);
}

// Compiles and loads configs on several threads (NVRTC is single-threaded per compile).
inline void prepare_all(const std::vector<MlaDecodeConfig>& configs) {
  std::vector<MlaDecodeConfig> unique;
  for (const auto& c : configs)
    if (std::find(unique.begin(), unique.end(), c) == unique.end()) unique.push_back(c);
  std::mutex m;
  std::vector<std::string> errors;
  size_t next = 0;
  auto worker = [&] {
    try {
      driver::use_device(0);  // a new thread has no current context
    } catch (const std::exception& e) {
      std::lock_guard lock(m);
      errors.push_back(e.what());
      return;
    }
    for (;;) {
      size_t i;
      {
        std::lock_guard lock(m);
        if (next >= unique.size()) return;
        i = next++;
      }
      try {
        plan_for_config(unique[i]);
      } catch (const std::exception& e) {
        std::lock_guard lock(m);
        errors.push_back(fmt::format("{}: {}", unique[i].describe(), e.what()));
      }
    }
  };
  const size_t n =
      std::min<size_t>(unique.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t i = 0; i < n; ++i) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  for (const auto& e : errors) FAIL_CHECK("mla_decode_plan failed: " << e);
  REQUIRE(errors.empty());
}

// One case end to end: data, reference, one run with `cfg` (default: the case's default
// config).
inline void check_case(const MlaCase& c, int num_splits = 0, int max_len_hint = 0,
                const MlaDecodeConfig* config = nullptr) {
  INFO(c.describe());
  const MlaDecodeConfig cfg = config ? *config : config_for(c);
  INFO(cfg.describe());
  MlaData d(c);
  const MlaReference ref = reference_for(d);
  RunOptions o;
  o.config = &cfg;
  o.num_splits = num_splits;
  o.max_len_hint = max_len_hint;
  judge(d, ref, run_mla(d, o), c.describe());
}

inline std::vector<int> random_lens(int n, int lo, int hi) {
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int> v(static_cast<size_t>(n));
  for (int& x : v) x = dist(test::rng());
  return v;
}

inline int rand_in(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(test::rng()); }

}  // namespace attnjit::test::mla_gpu
