// mla_decode on the GPU against the float64 reference (harness/mla_reference.hpp).
// Every case uses fresh random inputs (never zeros), poisons out/lse/workspace with 0xFF
// (NaN) before each run, fills cache rows past each length and the pool's unused pages
// with NaN, and hands the kernel a permuted block table whose entries past the used pages
// are garbage (-1, INT32_MAX, the pool size, ...). A kernel that reads a row it must not
// read, leaves an element unwritten or merges splits wrongly shows NaN or O(1) errors;
// bf16 rounding alone gives a relative L2 error of about 3e-3.
//
// Cost: the reference is the slow part, so shapes with more than ~4M (query, key) pairs
// check a random sample of rows plus every edge row. Variants are compiled up front on
// several threads (each compile is single-threaded NVRTC).
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

using namespace attnjit;
using test::DeviceBuffer;
using test::MlaComparison;
using test::MlaProblem;
using test::MlaReference;

namespace {

constexpr double kDeepSeekScale = 0.07216878364870323;  // 1/sqrt(192)
constexpr int64_t kFullReferencePairs = 4'000'000;      // above: sample rows
constexpr int kMaxSampledRows = 256;

// Irwin–Hall(4) rescaled to mean 0, variance 1: N(0,1)-ish, cheap enough for 100M values.
class FastNormal {
 public:
  explicit FastNormal(uint64_t seed) : state_(seed) {}
  float operator()() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float sum =
        static_cast<float>((z & 0xFFFF) + ((z >> 16) & 0xFFFF) + ((z >> 32) & 0xFFFF) + (z >> 48));
    return (sum / 65535.0f - 2.0f) * 1.7320508f;
  }

 private:
  uint64_t state_;
};

uint16_t to_bits(float x, DType dtype) {
  return dtype == DType::kBF16 ? test::float_to_bf16(x) : test::float_to_f16(x);
}
float from_bits(uint16_t b, DType dtype) {
  return dtype == DType::kBF16 ? test::bf16_to_float(b) : test::f16_to_float(b);
}

// Uploads floats (already representable in `dtype`) as 16-bit values, in chunks so that a
// long cache never needs a second full-size host copy.
void upload_rounded(const DeviceBuffer& dst, const std::vector<float>& src, DType dtype) {
  constexpr size_t kChunk = size_t{1} << 22;
  std::vector<uint16_t> bits(std::min(kChunk, src.size()));
  for (size_t off = 0; off < src.size(); off += kChunk) {
    const size_t n = std::min(kChunk, src.size() - off);
    for (size_t i = 0; i < n; ++i) bits[i] = to_bits(src[off + i], dtype);
    ATTNJIT_CU(cuMemcpyHtoD, dst.ptr() + off * 2, bits.data(), n * 2);
  }
}

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

int ceil_div(int a, int b) { return (a + b - 1) / b; }

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
MlaDecodePlan plan_mla(const MlaDecodeArgs& a, const RunOptions& o) {
  MlaDecodeShape shape = mla_decode_shape(a);
  shape.num_splits = o.num_splits;
  shape.max_len = o.max_len_hint;
  return mla_decode_plan(shape, o.config);
}

// One synchronous plan + schedule + run on the default stream with poisoned outputs and
// workspace.
RunResult run_mla(MlaData& d, const RunOptions& o) {
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
                                                                   plan.config.invariant_tiles)
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

int64_t pair_count(const MlaCase& c, const std::vector<int32_t>& lens) {
  int64_t pairs = 0;
  for (int l : lens)
    for (int t = 0; t < c.q_len; ++t)
      pairs += int64_t{c.heads} * test::mla_visible_keys(l, c.q_len, t);
  return pairs;
}

// Every row when that is cheap; else about kFullReferencePairs pairs' worth of random
// rows (24..256 of them) plus the edge rows.
MlaReference reference_for(const MlaData& d) {
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
void judge(const MlaProblem& p, const MlaReference& ref, const RunResult& r,
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

void judge(const MlaData& d, const MlaReference& ref, const RunResult& r,
           const std::string& label) {
  judge(d.problem(), ref, r, label);
}

// Default config for the case; kUnsupportedConfig here is a failure (every page size and
// head count the issue lists is meant to be supported), not a skip.
MlaDecodeConfig config_for(const MlaCase& c) {
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
MlaDecodePlan plan_for_config(const MlaDecodeConfig& c) {
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
void prepare_all(const std::vector<MlaDecodeConfig>& configs) {
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
void check_case(const MlaCase& c, int num_splits = 0, int max_len_hint = 0,
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

std::vector<int> random_lens(int n, int lo, int hi) {
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int> v(static_cast<size_t>(n));
  for (int& x : v) x = dist(test::rng());
  return v;
}

int rand_in(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(test::rng()); }

}  // namespace

TEST_CASE("mla_decode matches float64 for every head count and q_len, with edge lengths",
          "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  std::vector<MlaCase> cases;
  // 8, 12, 24: a rank's heads under tensor parallelism (q_len·h rows packed into 64-row
  // tiles, a token's heads straddling two tiles); 1 and 5: any count, off every power of 2.
  for (int h : {1, 5, 8, 12, 16, 24, 32, 64, 128})
    for (int q_len : {1, 2, 4, 8}) {
      MlaCase c;
      c.heads = h;
      c.q_len = q_len;
      // 0 (no key at all), 1, L < q_len (leading queries see nothing), one whole page,
      // a partial last page, and a few pages of random length.
      c.lens = {0, 1, q_len > 1 ? q_len - 1 : 2, 64, 130, rand_in(300, 1000)};
      cases.push_back(c);
    }
  std::vector<MlaDecodeConfig> configs;
  for (const auto& c : cases) configs.push_back(config_for(c));
  prepare_all(configs);
  for (const auto& c : cases) check_case(c);
}

TEST_CASE("mla_decode with a few thousand keys and large batches", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  MlaCase a;  // the compute-bound family: many heads
  a.heads = 128;
  a.q_len = 2;
  a.lens = random_lens(32, 1500, 5000);
  a.lens[3] = 4096;  // exactly whole pages
  check_case(a);
  MlaCase b;  // the memory-bound family: few heads, bigger batch
  b.heads = 16;
  b.q_len = 1;
  b.lens = random_lens(96, 2000, 6000);
  b.lens[0] = 0;
  b.lens[1] = 6000;
  check_case(b, 0, 6000);  // with a tight length hint (the table holds 6144 rows)
}

TEST_CASE("mla_decode on a 128k-long sequence (sampled rows)", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  MlaCase c;
  c.heads = 128;
  c.q_len = 1;
  c.lens = {131069, 20011};  // neither a multiple of the page
  check_case(c);             // heuristic split count from the table's capacity
  MlaCase m;
  m.heads = 64;
  m.q_len = 2;
  m.lens = {65536 + 37, 1, 40000};
  check_case(m, 0, 65600);  // a hint between the longest length and the table's capacity
}

TEST_CASE("mla_decode supports page sizes 16, 32, 64, 128 and 256", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  std::vector<MlaCase> cases;
  for (int page : {16, 32, 64, 128, 256}) {
    MlaCase c;
    c.page_size = page;
    c.heads = 64;
    c.q_len = 2;
    c.lens = {0, 1, page - 1, page + 1, 3 * page + 5, rand_in(1000, 2500)};
    cases.push_back(c);
  }
  std::vector<MlaDecodeConfig> configs;
  for (const auto& c : cases) configs.push_back(config_for(c));  // unsupported: FAIL
  prepare_all(configs);
  for (const auto& c : cases) {
    check_case(c);
    check_case(c, 3);  // a forced split: partition edges need not fall on page edges
  }
}

TEST_CASE("mla_decode in f16", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  std::vector<MlaCase> cases;
  for (int h : {16, 128})
    for (int q_len : {1, 2}) {
      MlaCase c;
      c.dtype = DType::kF16;
      c.heads = h;
      c.q_len = q_len;
      c.lens = {0, 1, 129, rand_in(500, 3000), rand_in(2000, 4000)};
      cases.push_back(c);
    }
  std::vector<MlaDecodeConfig> configs;
  for (const auto& c : cases) configs.push_back(config_for(c));
  prepare_all(configs);
  for (const auto& c : cases) check_case(c);
}

TEST_CASE("mla_decode gives the same answer for every split count", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  for (double scale : {kDeepSeekScale, 0.35}) {  // 0.35: very peaked softmax across splits
    MlaCase c;
    c.heads = 64;
    c.q_len = 2;
    c.lens = {0, 1, 777, 3000};
    c.scale = scale;
    INFO(c.describe());
    const MlaDecodeConfig cfg = config_for(c);
    MlaData d(c);
    const MlaReference ref = test::mla_reference(d.problem());
    const int tiles = ceil_div(d.max_pages() * c.page_size, 64);  // KV tiles of the capacity
    for (int splits : {1, 2, 3, 7, 64, tiles + 9, 0}) {
      RunOptions o;
      o.config = &cfg;
      o.num_splits = splits;
      judge(d, ref, run_mla(d, o),
            fmt::format("{} num_splits {}", c.describe(),
                        splits == 0 ? "balanced" : std::to_string(splits)));
    }
  }
}

TEST_CASE("mla_decode heuristic split count and the runtime's own config", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  struct Shape {
    int heads, q_len;
    std::vector<int> lens;
    int hint, max_pages;
  };
  const std::vector<Shape> shapes = {
      {128, 1, {20000}, 0, 0},                     // one long sequence: must split to fill the GPU
      {128, 2, {7000, 0, 3}, 8192, 128},           // small batch, hint above the lengths
      {16, 1, random_lens(200, 100, 1200), 0, 0},  // many short sequences
  };
  for (const Shape& s : shapes) {
    MlaCase c;
    c.heads = s.heads;
    c.q_len = s.q_len;
    c.lens = s.lens;
    c.max_pages = s.max_pages;
    INFO(c.describe());
    MlaData d(c);
    const MlaReference ref = reference_for(d);
    // The plan is a function of host-visible shapes only: planned twice, same answer. With
    // no forced count it is the balanced schedule, which cuts a lone long sequence on the GPU.
    RunOptions probe;
    probe.max_len_hint = s.hint;
    const MlaDecodePlan p1 = plan_mla(d.args(true), probe), p2 = plan_mla(d.args(true), probe);
    CHECK(p1.balanced);
    CHECK(p1.sm_slots >= 1);
    CHECK((p2.balanced == p1.balanced && p2.sm_slots == p1.sm_slots &&
           p2.workspace_bytes == p1.workspace_bytes));
    RunOptions o;  // config = nullptr: whatever the runtime picks
    o.max_len_hint = s.hint;
    const RunResult r = run_mla(d, o);
    judge(d, ref, r, c.describe() + " heuristic, auto config");
  }
}

TEST_CASE("mla_decode lse is optional and does not change out", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  MlaCase c;
  c.heads = 32;
  c.q_len = 4;
  c.lens = {0, 2, 1500, 64};
  const MlaDecodeConfig cfg = config_for(c);
  MlaData d(c);
  const MlaReference ref = test::mla_reference(d.problem());
  for (int splits : {1, 5}) {
    RunOptions o;
    o.config = &cfg;
    o.num_splits = splits;
    const RunResult with = run_mla(d, o);
    o.want_lse = false;
    const RunResult without = run_mla(d, o);
    judge(d, ref, with, c.describe() + " with lse");
    judge(d, ref, without, c.describe() + " without lse");
    CHECK(std::memcmp(with.out.data(), without.out.data(), with.out.size() * sizeof(float)) == 0);
    // Not requested: the poisoned lse buffer must be left exactly as it was.
    const std::vector<float> lse_after = d.download_lse();
    const std::vector<uint8_t> poison(lse_after.size() * sizeof(float), 0xFF);
    CHECK(std::memcmp(lse_after.data(), poison.data(), poison.size()) == 0);
  }
}

TEST_CASE("mla_decode runs q_len below the config's max_q_len", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  for (int q_len : {1, 3, 5}) {
    MlaCase c;
    c.heads = 32;
    c.q_len = q_len;
    c.lens = {0, 2, 4, 700};
    INFO(c.describe());
    MlaDecodeConfig cfg = mla_decode_default_config(c.dtype, c.heads, 8, c.page_size);
    cfg.max_q_len = 8;  // one variant compiled for MTP up to 8 serves every shorter q_len
    MlaData d(c);
    const MlaReference ref = test::mla_reference(d.problem());
    RunOptions o;
    o.config = &cfg;
    judge(d, ref, run_mla(d, o), c.describe() + " on a max_q_len 8 variant");
  }
}

TEST_CASE("mla_decode replays from a CUDA graph with new lengths and values",
          "[gpu][mla_decode][graph]") {
  if (!test::gpu_or_skip()) return;
  const driver::Api& api = driver::api();
  MlaCase c;
  c.heads = 64;
  c.q_len = 2;
  c.lens = {2500, 2500, 2500, 2500};  // capacity; every replay draws lengths within it
  c.spare_pages = 8;
  const MlaDecodeConfig cfg = config_for(c);
  MlaData d(c);
  const MlaDecodeArgs a = d.args(true);
  // Planned before the capture (nothing may compile, load or allocate inside it); the
  // heuristic reads the capacity, so the grid is fixed whatever lengths a replay brings.
  const MlaDecodePlan plan = mla_decode_plan(mla_decode_shape(a), &cfg);
  const int splits = plan.num_splits;
  DeviceBuffer workspace(plan.workspace_bytes);
  const Workspace ws{plan.workspace_bytes ? workspace.data() : nullptr, plan.workspace_bytes};

  CUstream stream;
  ATTNJIT_CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  ATTNJIT_CU(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  mla_decode_schedule(plan, a, ws, stream);
  mla_decode(a, plan, ws, stream);
  CUgraph graph;
  ATTNJIT_CU(cuStreamEndCapture, stream, &graph);
  CUgraphExec exec;
  ATTNJIT_CU(cuGraphInstantiate, &exec, graph, 0);

  const std::vector<std::vector<int>> rounds = {
      {2500, 0, 1, 1999},
      {64, 2437, 3, 1000},
      {rand_in(0, 2500), rand_in(0, 2500), rand_in(0, 2500), 2500},
  };
  for (size_t round = 0; round < rounds.size(); ++round) {
    // New lengths, table and values in the same device buffers: the graph holds pointers.
    d.refill(rounds[round]);
    d.poison_outputs();
    workspace.fill_byte(0xFF);
    ATTNJIT_CU(cuGraphLaunch, exec, stream);
    ATTNJIT_CU(cuStreamSynchronize, stream);
    RunResult r;
    r.out = d.download_out();
    r.lse = d.download_lse();
    r.splits = splits;
    judge(d, test::mla_reference(d.problem()), r,
          fmt::format("graph replay {} lens [{}]", round, fmt::join(rounds[round], ",")));
  }
  // Only the lengths change on the device before this replay (values and table stay,
  // every new length within the old one so its pages are all in the table): the graph
  // must follow the new lengths, not remember the old ones.
  const std::vector<int>& last = rounds.back();
  const std::vector<int32_t> shorter = {last[0] / 3, last[1], 0, std::min(7, last[3])};
  ATTNJIT_CU(cuMemcpyHtoD, d.lens_buffer().ptr(), shorter.data(), shorter.size() * 4);
  d.poison_outputs();
  ATTNJIT_CU(cuGraphLaunch, exec, stream);
  ATTNJIT_CU(cuStreamSynchronize, stream);
  {
    MlaProblem p = d.problem();
    // The rows past the new lengths hold values, not NaN: that is fine, they must simply
    // not count. The reference reads only the new visible rows.
    p.cache_lens = shorter;
    RunResult r;
    r.out = d.download_out();
    r.lse = d.download_lse();
    r.splits = splits;
    const MlaReference ref = test::mla_reference(p);
    const MlaComparison cmp = test::mla_compare(p, ref, r.out, r.lse);
    fmt::print("mla_decode [graph replay, lengths changed on the device]: {}\n", cmp.summary());
    INFO(cmp.summary());
    CHECK(cmp.passed);
  }
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
  api.cuStreamDestroy(stream);
}

TEST_CASE("mla_decode with the softmax-warpgroup schedule", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  // The other schedule (one softmax warpgroup feeding two P·V warpgroups) over the edges of
  // the default test: every head count and q_len, empty, L < q_len, partial pages, splits.
  std::vector<MlaCase> cases;
  std::vector<MlaDecodeConfig> configs;
  for (int h : {8, 12, 16, 32, 64, 128})
    for (int q_len : {1, 2, 8}) {
      MlaCase c;
      c.heads = h;
      c.q_len = q_len;
      c.lens = {0, 1, q_len > 1 ? q_len - 1 : 2, 64, 130, rand_in(300, 1000)};
      cases.push_back(c);
      MlaDecodeConfig cfg = config_for(c);
      cfg.schedule = MlaSchedule::kSoftmaxWarpgroup;
      configs.push_back(cfg);
    }
  prepare_all(configs);
  for (size_t i = 0; i < cases.size(); ++i) {
    check_case(cases[i], 0, 0, &configs[i]);
    check_case(cases[i], 3, 0, &configs[i]);
  }
}

TEST_CASE("mla_decode with 32-key tiles and a 4-stage ring", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  // The other tile shape the config space allows (softmax_wg schedule): half the keys per
  // tile, twice the stages in the same shared memory. Same edges: empty, L < q_len,
  // partial tiles and pages.
  for (int h : {16, 128})
    for (int q_len : {1, 2, 8})
      for (int page : {16, 64}) {
        MlaCase c;
        c.heads = h;
        c.q_len = q_len;
        c.page_size = page;
        c.lens = {0, 1, q_len > 1 ? q_len - 1 : 2, 31, 33, 64, rand_in(300, 2000)};
        MlaDecodeConfig cfg = config_for(c);
        cfg.schedule = MlaSchedule::kSoftmaxWarpgroup;
        cfg.block_n = 32;
        cfg.stages = 4;
        check_case(c, 0, 0, &cfg);
        check_case(c, 3, 0, &cfg);  // split edges off the tile grid
      }
}

namespace {

// A ragged call over padded data whose q_len is the bound: sequence i keeps its first
// q_lens[i] tokens (0 allowed), packed back to back into q [total_q, h, 576]; the rows after
// the last sequence belong to none. Each sequence is judged against the float64 reference
// of that sequence alone (its own q_len sets its causal rule); out and lse rows of no
// sequence must keep their poison. The device buffers are fixed at construction, so one
// call can be captured in a CUDA graph and replayed after set() packs new offsets.
class RaggedCall {
 public:
  RaggedCall(const MlaData& d, int total_q, int num_splits, const MlaDecodeConfig& cfg)
      : d_(d), total_q_(total_q) {
    const MlaCase& c = d.spec();
    const int b = c.batch(), h = c.heads;
    q_d_ = DeviceBuffer(static_cast<size_t>(total_q) * q_row() * 2);
    off_d_ = DeviceBuffer((static_cast<size_t>(b) + 1) * 4);
    out_d_ = DeviceBuffer(static_cast<size_t>(total_q) * o_row() * 2);
    lse_d_ = DeviceBuffer(static_cast<size_t>(h) * total_q * 4);
    a_.q = TensorView::contiguous(q_d_.data(), c.dtype, {total_q, h, test::kMlaQkDim});
    a_.q_offsets = TensorView::contiguous(off_d_.data(), DType::kI32, {b + 1});
    a_.max_q_len = c.q_len;
    a_.kv_cache = TensorView::contiguous(d.cache_buffer().data(), c.dtype,
                                         {d.num_pages(), c.page_size, test::kMlaQkDim});
    a_.block_table = TensorView::contiguous(d.table_buffer().data(), DType::kI32, {b, d.max_pages()});
    a_.cache_lens = TensorView::contiguous(d.lens_buffer().data(), DType::kI32, {b});
    a_.out = TensorView::contiguous(out_d_.data(), c.dtype, {total_q, h, test::kMlaVDim});
    a_.lse = TensorView::contiguous(lse_d_.data(), DType::kF32, {h, total_q});
    a_.softmax_scale = static_cast<float>(c.scale);
    MlaDecodeShape shape = mla_decode_shape(a_);
    shape.num_splits = num_splits;
    plan_ = mla_decode_plan(shape, &cfg);
    splits_ = plan_.num_splits;
    workspace_ = DeviceBuffer(plan_.workspace_bytes);
  }

  // One step: the schedule and the run, on `stream` (capturable: no compile, load or
  // allocation).
  void run(CUstream stream) const {
    const Workspace ws{workspace_.bytes() ? workspace_.data() : nullptr, workspace_.bytes()};
    mla_decode_schedule(plan_, a_, ws, stream);
    mla_decode(a_, plan_, ws, stream);
  }

  // Packs the first q_lens[i] tokens of each sequence (from the data's current values),
  // uploads q and the offsets, and poisons out, lse and the workspace.
  void set(const std::vector<int>& q_lens) {
    const int b = d_.spec().batch();
    REQUIRE(q_lens.size() == static_cast<size_t>(b));
    q_lens_ = q_lens;
    offsets_.assign(static_cast<size_t>(b) + 1, 0);
    for (int i = 0; i < b; ++i) offsets_[i + 1] = offsets_[i] + q_lens[static_cast<size_t>(i)];
    REQUIRE(offsets_.back() <= total_q_);
    std::vector<uint16_t> q(static_cast<size_t>(total_q_) * q_row(), 0x3C00);  // no sequence's
    for (int i = 0; i < b; ++i)
      for (int t = 0; t < q_lens[static_cast<size_t>(i)]; ++t) {
        const std::vector<uint16_t> bits = d_.token_bits(i, t);
        std::copy(bits.begin(), bits.end(), q.begin() + (offsets_[i] + t) * q_row());
      }
    q_d_.upload(q);
    off_d_.upload(offsets_);
    out_d_.fill_byte(0xFF);
    lse_d_.fill_byte(0xFF);
    if (workspace_.bytes() > 0) workspace_.fill_byte(0xFF);
  }

  const MlaDecodeArgs& args() const { return a_; }
  int splits() const { return splits_; }

  // Judges every sequence of the last set() and the untouched rows past offsets[b].
  void judge_all(const std::string& label) const {
    const MlaCase& c = d_.spec();
    const int h = c.heads;
    INFO(label << " q_lens [" << fmt::format("{}", fmt::join(q_lens_, ",")) << "] splits " << splits_);
    const auto out_bits = out_d_.download_as<uint16_t>(out_d_.bytes() / 2);
    const auto lse_all = lse_d_.download_as<float>(lse_d_.bytes() / 4);
    const auto lse_bits = lse_d_.download_as<uint32_t>(lse_d_.bytes() / 4);
    for (int i = 0; i < c.batch(); ++i) {
      const int ql = q_lens_[static_cast<size_t>(i)];
      if (ql == 0) continue;  // owns no row of q or out
      const MlaProblem p = d_.sequence_problem(i, ql);
      RunResult r;
      r.splits = splits_;
      r.out.resize(static_cast<size_t>(ql) * o_row());
      for (size_t k = 0; k < r.out.size(); ++k)
        r.out[k] = from_bits(out_bits[offsets_[i] * o_row() + k], c.dtype);
      r.lse.resize(static_cast<size_t>(h) * ql);  // [1, h, q_len] from [h, total_q]
      for (int hh = 0; hh < h; ++hh)
        for (int t = 0; t < ql; ++t)
          r.lse[static_cast<size_t>(hh) * ql + t] =
              lse_all[static_cast<size_t>(hh) * total_q_ + offsets_[i] + t];
      const int len = d_.lens()[static_cast<size_t>(i)];
      // L = 0 leaves every row of the sequence empty: only the structural checks apply.
      const bool some_keys = test::mla_visible_keys(len, ql, ql - 1) > 0;
      judge(p, test::mla_reference(p), r,
            fmt::format("{} ragged seq {} of {}: q_len {} L {}", label, i, c.describe(), ql, len),
            some_keys);
    }
    // Rows past offsets[b] belong to no sequence: untouched.
    int64_t touched = 0;
    for (size_t k = static_cast<size_t>(offsets_.back()) * o_row(); k < out_bits.size(); ++k)
      touched += out_bits[k] != 0xFFFF;
    for (int hh = 0; hh < h; ++hh)
      for (int t = offsets_.back(); t < total_q_; ++t)
        touched += lse_bits[static_cast<size_t>(hh) * total_q_ + t] != 0xFFFFFFFFu;
    CHECK(touched == 0);
  }

 private:
  size_t q_row() const { return static_cast<size_t>(d_.spec().heads) * test::kMlaQkDim; }
  size_t o_row() const { return static_cast<size_t>(d_.spec().heads) * test::kMlaVDim; }

  const MlaData& d_;
  int total_q_ = 0, splits_ = 0;
  MlaDecodeArgs a_;
  MlaDecodePlan plan_;
  std::vector<int> q_lens_;
  std::vector<int32_t> offsets_;
  DeviceBuffer q_d_, off_d_, out_d_, lse_d_, workspace_;
};

// One synchronous ragged call with `tail` rows after the last sequence.
void check_ragged(const MlaCase& c, const std::vector<int>& q_lens, int num_splits,
                  const MlaDecodeConfig& cfg, int tail = 2) {
  REQUIRE(q_lens.size() == c.lens.size());
  MlaData d(c);
  int rows = tail;
  for (int ql : q_lens) rows += ql;
  RaggedCall call(d, rows, num_splits, cfg);
  call.set(q_lens);
  call.run(nullptr);
  test::synchronize();
  call.judge_all("sync");
}

}  // namespace

TEST_CASE("mla_decode with ragged q: per-sequence q_len, [total_q, h] rows, [h, total_q] lse",
          "[gpu][mla_decode][ragged]") {
  if (!test::gpu_or_skip()) return;
  struct Shape {
    int heads, bound;
    MlaSchedule schedule;
  };
  const std::vector<Shape> shapes = {{16, 8, MlaSchedule::kSeesaw},  {128, 8, MlaSchedule::kSeesaw},
                                     {64, 2, MlaSchedule::kSeesaw},  {128, 1, MlaSchedule::kSeesaw},
                                     {32, 8, MlaSchedule::kSoftmaxWarpgroup}};
  std::vector<MlaCase> cases;
  std::vector<MlaDecodeConfig> configs;
  for (const Shape& sh : shapes) {
    MlaCase c;
    c.heads = sh.heads;
    c.q_len = sh.bound;
    // Lengths: none, 1, shorter than the longest q_len (leading queries see nothing),
    // partial pages, a longer random one.
    c.lens = {0, 1, 3, 64, 130, rand_in(300, 1500), rand_in(1500, 3000)};
    cases.push_back(c);
    MlaDecodeConfig cfg = config_for(c);
    cfg.schedule = sh.schedule;
    configs.push_back(cfg);
  }
  prepare_all(configs);
  for (size_t k = 0; k < cases.size(); ++k) {
    const MlaCase& c = cases[k];
    const int bound = c.q_len;
    // Per-sequence q_len: the bound, 1, 0 (a sequence with no query this step), and random.
    std::vector<int> q_lens(c.lens.size());
    for (size_t i = 0; i < q_lens.size(); ++i) q_lens[i] = rand_in(0, bound);
    q_lens[0] = bound;
    q_lens[2] = bound;  // L = 3 < q_len for bounds over 3
    q_lens[3] = 0;
    q_lens[4] = 1;
    check_ragged(c, q_lens, 1, configs[k]);
    check_ragged(c, q_lens, 3, configs[k]);  // partials and the combine in the ragged layout
    check_ragged(c, q_lens, 0, configs[k], 0);  // balanced schedule, no tail rows
  }
}

TEST_CASE("mla_decode with ragged q replays from a CUDA graph with new offsets and lengths",
          "[gpu][mla_decode][ragged][graph]") {
  if (!test::gpu_or_skip()) return;
  const driver::Api& api = driver::api();
  MlaCase c;
  c.heads = 64;
  c.q_len = 4;  // the bound
  c.lens = {1500, 1500, 1500, 1500, 1500};  // capacity; replays draw lengths within it
  c.spare_pages = 8;
  const MlaDecodeConfig cfg = config_for(c);
  MlaData d(c);
  // Planned in the constructor, before the capture: nothing may compile, load or allocate
  // inside it. Every q_lens set below fits; heuristic split.
  RaggedCall call(d, c.batch() * c.q_len, 0, cfg);
  call.set({4, 4, 4, 4, 4});

  CUstream stream;
  ATTNJIT_CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  ATTNJIT_CU(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  call.run(stream);
  CUgraph graph;
  ATTNJIT_CU(cuStreamEndCapture, stream, &graph);
  CUgraphExec exec;
  ATTNJIT_CU(cuGraphInstantiate, &exec, graph, 0);

  struct Round {
    std::vector<int> lens, q_lens;
  };
  const std::vector<Round> rounds = {
      {{1500, 3, 700, 1, 64}, {4, 4, 4, 4, 4}},
      {{2, 1500, 0, 999, 130}, {1, 0, 3, 4, 2}},  // fewer rows: the tail must stay untouched
      {{rand_in(0, 1500), rand_in(0, 1500), 1500, 5, rand_in(0, 1500)},
       {rand_in(0, 4), 4, rand_in(0, 4), 1, rand_in(0, 4)}},
  };
  for (size_t k = 0; k < rounds.size(); ++k) {
    d.refill(rounds[k].lens);  // new lengths, table and values in the same device buffers
    call.set(rounds[k].q_lens);
    ATTNJIT_CU(cuGraphLaunch, exec, stream);
    ATTNJIT_CU(cuStreamSynchronize, stream);
    call.judge_all(fmt::format("graph replay {}", k));
  }
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
  api.cuStreamDestroy(stream);
}

