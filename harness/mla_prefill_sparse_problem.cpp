// mla_prefill_sparse as a problem: `attnjit bench mla_prefill_sparse`'s rows (issue 21's
// table: 4096 tokens, h 128 / 64, topk 512 / 2048 / 8192, pools of 32768 / 131072 rows)
// and their test-scale twins, which carry every hostile input of the correctness
// list.
//
// A case's inputs: q ~ N(0, 1) bf16; pool rows ~ N(0, 1) bf16 (hostile: 5 % of rows
// × 1e-3 and 5 % × 1e3, so scores span a wide range). A pool of at most kPeriod rows is
// held whole, and in hostile cases every row no token reads (within its clamped length) is
// NaN; a larger (bench) pool repeats one period of rows. Indices are uniform over the pool;
// hostile cases add -1 padding, other negatives, values past the pool, duplicates, and the
// twins also a token stride above topk, lengths from -2 to topk + 5, a sink.
//
// q and the pool rows come from a counter-based generator (value i of a stream is a hash
// of i), so they are drawn on all cores, and check() regenerates the q rows of the tokens
// it judges instead of holding the whole q on the host: a bench row's q is 600 MB of bf16,
// the 70001-token test's 1.3 GB.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/ops/mla_prefill_sparse.hpp"
#include "driver/driver.hpp"
#include "harness/device.hpp"
#include "harness/mla_prefill_sparse_problem.hpp"
#include "harness/mla_sparse_reference.hpp"
#include "harness/problem.hpp"
#include "ops/registry.hpp"

namespace attnjit::harness {
namespace {

using nlohmann::json;

constexpr float kScale = 0.07216878f;  // 1/sqrt(192)
constexpr int64_t kPeriod = 1 << 16;   // rows drawn; a larger pool repeats them
constexpr int kRowBytes = 1152;        // 576 bf16

struct PrefillCase {
  int64_t tokens = 4096;
  int h = 128, topk = 2048;
  int64_t pool = 32768;       // physical rows
  int page_size = 64;         // 0: the plain [pool, 576] view
  int pad = -1;               // extra i32 between token rows; -1: 3 when hostile, else 0
  std::string sink = "none";  // none, finite, -inf, +inf
  std::string lens = "none";  // none, token (-2 .. topk + 5), zero (every token reads nothing)
  bool hostile = false, lse = true, max_logit = true;
  nlohmann::ordered_json to_json() const {
    return {{"tokens", tokens}, {"h", h},           {"topk", topk},        {"pool", pool},
            {"page_size", page_size}, {"pad", pad}, {"sink", sink},        {"lens", lens},
            {"hostile", hostile ? 1 : 0}, {"lse", lse ? 1 : 0}, {"max_logit", max_logit ? 1 : 0}};
  }
};

PrefillCase read_case(const json& s) {
  if (!s.is_object()) fail_arg("mla_prefill_sparse shape", "must be a JSON object");
  PrefillCase c;
  for (const auto& item : s.items()) {
    const std::string& key = item.key();
    const json& v = item.value();
    const std::string where = fmt::format("mla_prefill_sparse shape key '{}'", key);
    auto int_in = [&](int64_t lo, int64_t hi) {
      if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
        fail_arg(where, fmt::format("must be an integer in {}..{}, got {}", lo, hi, v.dump()));
      return v.get<int64_t>();
    };
    auto word = [&](std::initializer_list<const char*> allowed) {
      for (const char* a : allowed)
        if (v == a) return std::string(a);
      fail_arg(where, fmt::format("is not an allowed word, got {}", v.dump()));
    };
    if (key == "tokens") c.tokens = int_in(0, 1 << 22);
    else if (key == "h") c.h = static_cast<int>(int_in(8, 128));
    else if (key == "topk") c.topk = static_cast<int>(int_in(1, 1 << 20));
    else if (key == "pool") c.pool = int_in(1, 1 << 24);
    else if (key == "page_size") c.page_size = static_cast<int>(int_in(0, 1 << 20));
    else if (key == "pad") c.pad = static_cast<int>(int_in(-1, 1 << 10));
    else if (key == "sink") c.sink = word({"none", "finite", "-inf", "+inf"});
    else if (key == "lens") c.lens = word({"none", "token", "zero"});
    else if (key == "hostile") c.hostile = int_in(0, 1) == 1;
    else if (key == "lse") c.lse = int_in(0, 1) == 1;
    else if (key == "max_logit") c.max_logit = int_in(0, 1) == 1;
    else
      fail_arg(where, "is not one of tokens, h, topk, pool, page_size, pad, sink, lens, hostile, lse, "
                      "max_logit");
  }
  if (c.pad < 0) c.pad = c.hostile ? 3 : 0;  // hostile: token rows not back to back
  if (c.page_size > 0 && c.pool % c.page_size != 0)
    fail_arg("mla_prefill_sparse shape key 'page_size'",
             fmt::format("must divide pool = {} (the paged view is [pool / page_size, page_size, 576]), got {}",
                         c.pool, c.page_size));
  return c;
}

// SplitMix64's finalizer: a counter-based generator's value i is mix(stream ^ mix(i)).
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Value i of stream `stream`: N(0, 1) by Box-Muller on the two halves of one hash (32 bits
// each are plenty for a bf16 result).
float normal_at(uint64_t stream, uint64_t i) {
  const uint64_t a = mix(stream ^ mix(i));
  const float u1 = (static_cast<float>(a >> 40) + 1.0f) * 0x1p-24f;  // (0, 1]
  const float u2 = static_cast<float>(a & 0xffffff) * 0x1p-24f;
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
}

// A token's sequential draws (indices): SplitMix64 seeded from (stream, token).
struct Draws {
  uint64_t state;
  uint64_t next() { return mix(state += 0x9e3779b97f4a7c15ull); }
};

// fn(begin, end) over [0, n) in fixed chunks on up to 32 threads; fn writes only its own
// range, so results do not depend on the thread count.
template <class Fn>
void parallel_for(int64_t n, int64_t grain, const Fn& fn) {
  const int64_t chunks = (n + grain - 1) / grain;
  const int64_t threads = std::min<int64_t>({std::max(1u, std::thread::hardware_concurrency()), 32, chunks});
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t c = t; c < chunks; c += threads) fn(c * grain, std::min(n, (c + 1) * grain));
    });
  for (auto& th : pool) th.join();
}

class PrefillProblem final : public Problem, public MlaPrefillSparseHooks {
 public:
  PrefillProblem(const PrefillCase& c, uint64_t seed)
      : c_(c), stride_(c.topk + c.pad), q_stream_(mix(seed ^ 0x71)), row_stream_(mix(seed ^ 0x72)) {
    std::mt19937_64 gen(seed);
    upload_q();
    draw_indices(mix(seed ^ 0x73));
    if (c.lens != "none") {
      std::uniform_int_distribution<int> l(-2, c.topk + 5);
      lens_.resize(static_cast<size_t>(c.tokens));
      for (auto& x : lens_) x = c.lens == "zero" ? 0 : l(gen);
      if (c.lens == "token" && c.tokens > 0) lens_[0] = 0;               // a token that reads nothing
      if (c.lens == "token" && c.tokens > 1) lens_.back() = c.topk + 3;  // past topk: the op clamps it
      lens_d_ = DeviceBuffer(std::max<size_t>(4, lens_.size() * 4));
      if (!lens_.empty()) lens_d_.upload(lens_);
    }
    count_keys();
    make_pool(gen);
    if (c.sink != "none") {
      std::uniform_real_distribution<float> u(-2.0f, 4.0f);
      sink_.resize(static_cast<size_t>(c.h));
      for (auto& s : sink_) s = c.sink == "finite" ? u(gen) : (c.sink == "-inf" ? -INFINITY : INFINITY);
      sink_d_ = DeviceBuffer(sink_.size() * 4);
      sink_d_.upload(sink_);
    }
    const size_t rows = static_cast<size_t>(std::max<int64_t>(1, c.tokens)) * c.h;
    out_d_ = DeviceBuffer(rows * 1024);
    lse_d_ = DeviceBuffer(rows * 4);
    max_logit_d_ = DeviceBuffer(rows * 4);
  }

  nlohmann::ordered_json case_json() const override { return c_.to_json(); }
  std::string describe() const override {
    return fmt::format("tokens={} h={} topk={} pool={} {} sink={} lens={}{}{}{}", c_.tokens, c_.h, c_.topk, c_.pool,
                       c_.page_size ? fmt::format("page={}", c_.page_size) : "flat", c_.sink, c_.lens,
                       c_.pad ? fmt::format(" pad={}", c_.pad) : "", c_.hostile ? " hostile" : "",
                       c_.lse && c_.max_logit ? "" : fmt::format(" lse={} max_logit={}", c_.lse, c_.max_logit));
  }
  int copies() const override { return 1; }

  MlaPrefillSparseArgs args() const override {
    MlaPrefillSparseArgs a;
    const int64_t t = c_.tokens, h = c_.h;
    a.q = TensorView::contiguous(q_d_.data(), DType::kBF16, {t, h, 576});
    a.kv_cache = c_.page_size == 0
                     ? TensorView::contiguous(pool_d_.data(), DType::kBF16, {c_.pool, 576})
                     : TensorView::contiguous(pool_d_.data(), DType::kBF16,
                                              {c_.pool / c_.page_size, c_.page_size, 576});
    a.indices = TensorView::strided(indices_d_.data(), DType::kI32, {t, c_.topk}, {stride_, 1});
    if (c_.lens != "none") a.topk_lengths = TensorView::contiguous(lens_d_.data(), DType::kI32, {t});
    if (!sink_.empty()) a.attn_sink = TensorView::contiguous(sink_d_.data(), DType::kF32, {h});
    a.out = TensorView::contiguous(out_d_.data(), DType::kBF16, {t, h, 512});
    if (c_.lse) a.lse = TensorView::contiguous(lse_d_.data(), DType::kF32, {t, h});
    if (c_.max_logit) a.max_logit = TensorView::contiguous(max_logit_d_.data(), DType::kF32, {t, h});
    a.softmax_scale = kScale;
    return a;
  }

  Prepared prepare(const json* overrides) override {
    const MlaPrefillSparseShape shape = mla_prefill_sparse_shape(args());
    const json heuristic = json::parse(mla_prefill_sparse_default_config(c_.h).to_json());
    MlaPrefillSparseConfig given;
    if (overrides) {
      json runtime;  // the op has no run-time fields: none are moved out
      given = MlaPrefillSparseConfig::from_json(merge_config(heuristic, *overrides, {}, runtime).dump());
    }
    // Never split, no workspace, no schedule: prepared_run's form does not fit, so by hand.
    const MlaPrefillSparsePlan plan = mla_prefill_sparse_plan(shape, overrides ? &given : nullptr);
    Prepared p;
    p.config = json::parse(plan.config.to_json());
    p.config_source = config_source(overrides, p.config, heuristic);
    p.enqueue = [this, plan](int, CUstream stream) { mla_prefill_sparse(args(), plan, stream); };
    return p;
  }

  void poison_output() override {
    out_d_.fill_byte(0xFF);
    lse_d_.fill_byte(0xFF);
    max_logit_d_.fill_byte(0xFF);
  }
  std::vector<uint8_t> output_bytes() const override {
    synchronize();
    if (c_.tokens == 0) return {};
    return out_d_.download_as<uint8_t>(static_cast<size_t>(c_.tokens) * c_.h * 1024);
  }

  void redraw_indices(uint64_t seed) override {
    std::vector<int32_t> used;
    for (size_t r = 0; r < referenced_.size(); ++r)
      if (referenced_[r]) used.push_back(static_cast<int32_t>(r));  // held row r is pool row r
    const uint64_t stream = mix(seed);
    parallel_for(c_.tokens, 256, [&](int64_t begin, int64_t end) {
      for (int64_t g = begin; g < end; ++g) {
        Draws d{stream ^ mix(static_cast<uint64_t>(g))};
        for (int j = 0; j < c_.topk; ++j) {
          const int roll = static_cast<int>(d.next() % 100);
          indices_[static_cast<size_t>(g * stride_ + j)] =
              used.empty() || roll < 10 ? -1
              : roll < 13               ? static_cast<int32_t>(c_.pool + roll)
                                        : used[d.next() % used.size()];
        }
      }
    });
    indices_d_.upload(indices_);
    count_keys();
  }

  Verdict check(int sampled_rows) const override;

  std::string compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const override {
    return compare_16bit(ref, got, false, 1e-2);
  }

  // Rows gathered (every valid index, duplicates included), the index rows, q, out, lse and
  // max logit.
  double bytes() const override {
    const double per_token = static_cast<double>(c_.topk) * 4 + static_cast<double>(c_.h) * (1152 + 1024 + 8);
    return static_cast<double>(valid_keys_) * kRowBytes + static_cast<double>(c_.tokens) * per_token;
  }
  double flops() const override { return 2.0 * static_cast<double>(valid_keys_) * c_.h * (576 + 512); }
  json target() const override {  // issue 21's target
    if (c_.tokens == 4096 && c_.h == 128 && c_.topk == 2048 && c_.pool == 131072)
      return {{"metric", "tflops"}, {"h100", 600}};
    return nullptr;
  }

 private:
  // q in slabs of ~8M values, drawn in parallel and uploaded; never held whole.
  void upload_q() {
    const int64_t per_token = int64_t{c_.h} * 576;
    q_d_ = DeviceBuffer(static_cast<size_t>(std::max<int64_t>(1, c_.tokens) * per_token * 2));
    const int64_t slab = std::max<int64_t>(1, (int64_t{1} << 23) / per_token);
    std::vector<uint16_t> buf;
    for (int64_t t0 = 0; t0 < c_.tokens; t0 += slab) {
      const int64_t n = std::min(slab, c_.tokens - t0) * per_token;
      buf.resize(static_cast<size_t>(n));
      parallel_for(n, 1 << 16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          buf[static_cast<size_t>(i)] = float_to_bf16(normal_at(q_stream_, static_cast<uint64_t>(t0 * per_token + i)));
      });
      ATTNJIT_CU(cuMemcpyHtoD, q_d_.ptr() + static_cast<size_t>(t0 * per_token * 2), buf.data(),
                 static_cast<size_t>(n) * 2);
    }
  }

  // Token g's q rows (every head), as the GPU reads them.
  void q_rows(int64_t g, float* dst) const {
    const int64_t per_token = int64_t{c_.h} * 576;
    for (int64_t i = 0; i < per_token; ++i)
      dst[i] = bf16_to_float(float_to_bf16(normal_at(q_stream_, static_cast<uint64_t>(g * per_token + i))));
  }

  void draw_indices(uint64_t stream) {
    indices_.assign(static_cast<size_t>(std::max<int64_t>(1, c_.tokens * stride_)), -7);  // padding: -7
    const int64_t pool = c_.pool;
    parallel_for(c_.tokens, 256, [&](int64_t begin, int64_t end) {
      for (int64_t g = begin; g < end; ++g) {
        Draws d{stream ^ mix(static_cast<uint64_t>(g))};
        int32_t* row = &indices_[static_cast<size_t>(g * stride_)];
        for (int j = 0; j < c_.topk; ++j) {
          const int roll = c_.hostile ? static_cast<int>(d.next() % 100) : 99;
          if (roll < 10) row[j] = -1;
          else if (roll < 13) row[j] = roll == 10 ? std::numeric_limits<int32_t>::min() : -2 - roll;
          else if (roll < 16) row[j] = static_cast<int32_t>(pool + (roll - 13) * 1000);
          else if (roll < 26 && j > 0) row[j] = row[j / 2];  // a duplicate (or a copy of a skip)
          else row[j] = static_cast<int32_t>(d.next() % static_cast<uint64_t>(pool));
        }
      }
    });
    indices_d_ = DeviceBuffer(indices_.size() * 4);
    indices_d_.upload(indices_);
  }

  int read_count(int64_t g) const {
    return lens_.empty() ? c_.topk : std::clamp(lens_[static_cast<size_t>(g)], 0, c_.topk);
  }

  // Each token's valid keys (within its clamped length, inside the pool; duplicates
  // counted): the FLOPs and the empty tokens, from the problem's own host copies.
  void count_keys() {
    keys_.assign(static_cast<size_t>(c_.tokens), 0);
    valid_keys_ = 0;
    for (int64_t g = 0; g < c_.tokens; ++g) {
      const int32_t* row = &indices_[static_cast<size_t>(g * stride_)];
      int n = 0;
      for (int j = 0; j < read_count(g); ++j) n += row[j] >= 0 && row[j] < c_.pool;
      keys_[static_cast<size_t>(g)] = n;
      valid_keys_ += n;
    }
  }

  // The held rows (one period), NaN where no token reads them in hostile cases, then the
  // device pool: the held rows repeated.
  void make_pool(std::mt19937_64& gen) {
    const int64_t held = std::min(c_.pool, kPeriod);
    referenced_.assign(static_cast<size_t>(held), c_.hostile ? 0 : 1);
    for (int64_t g = 0; g < c_.tokens; ++g) {
      const int32_t* row = &indices_[static_cast<size_t>(g * stride_)];
      for (int j = 0; j < read_count(g); ++j)
        if (row[j] >= 0 && row[j] < c_.pool) referenced_[static_cast<size_t>(row[j] % held)] = 1;
    }
    std::vector<float> magnitude(static_cast<size_t>(held), 1.0f);
    std::uniform_int_distribution<int> pct(0, 99);
    if (c_.hostile)
      for (auto& m : magnitude) {
        const int roll = pct(gen);
        m = roll < 5 ? 1e-3f : (roll < 10 ? 1e3f : 1.0f);
      }
    held_.assign(static_cast<size_t>(held) * kRowBytes, 0);
    uint16_t* values = reinterpret_cast<uint16_t*>(held_.data());
    parallel_for(held, 512, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        for (int64_t d = 0; d < 576; ++d)
          values[r * 576 + d] = float_to_bf16(
              referenced_[static_cast<size_t>(r)]
                  ? normal_at(row_stream_, static_cast<uint64_t>(r * 576 + d)) * magnitude[static_cast<size_t>(r)]
                  : NAN);
    });
    pool_d_ = DeviceBuffer(static_cast<size_t>(c_.pool) * kRowBytes);
    for (int64_t r = 0; r < c_.pool; r += held) {
      const int64_t n = std::min(held, c_.pool - r);
      ATTNJIT_CU(cuMemcpyHtoD, pool_d_.ptr() + r * kRowBytes, held_.data(),
                 n * kRowBytes);
    }
  }

  // Rows [g, g + 1) of a [tokens, row_bytes] device buffer for every token of `tokens`
  // (ascending), packed; consecutive tokens come in one copy.
  std::vector<uint8_t> download_tokens(const DeviceBuffer& b, size_t row_bytes,
                                       const std::vector<int64_t>& tokens) const {
    std::vector<uint8_t> host(tokens.size() * row_bytes);
    for (size_t i = 0; i < tokens.size();) {
      size_t j = i + 1;
      while (j < tokens.size() && tokens[j] == tokens[j - 1] + 1) ++j;
      ATTNJIT_CU(cuMemcpyDtoH, host.data() + i * row_bytes, b.ptr() + static_cast<size_t>(tokens[i]) * row_bytes,
                 (j - i) * row_bytes);
      i = j;
    }
    return host;
  }

  // The tokens judged: every one, or about sampled_rows / h random ones plus the edges
  // (the first and last two, and both sides of every multiple of 65536, where a grid
  // dimension of 65535 would wrap).
  std::vector<int64_t> judged_tokens(int sampled_rows) const {
    const int64_t n = c_.tokens;
    std::vector<int64_t> t;
    if (sampled_rows <= 0) {
      for (int64_t g = 0; g < n; ++g) t.push_back(g);
      return t;
    }
    for (int64_t g : {int64_t{0}, int64_t{1}, n - 2, n - 1}) t.push_back(g);
    for (int64_t m = 65536; m <= n; m += 65536)
      for (int64_t g = m - 2; g <= m + 1; ++g) t.push_back(g);
    std::mt19937_64 gen(7);
    std::uniform_int_distribution<int64_t> any(0, std::max<int64_t>(0, n - 1));
    for (int i = 0; i < std::max(1, sampled_rows / c_.h); ++i) t.push_back(any(gen));
    std::erase_if(t, [n](int64_t g) { return g < 0 || g >= n; });
    std::sort(t.begin(), t.end());
    t.erase(std::unique(t.begin(), t.end()), t.end());
    return t;
  }

  PrefillCase c_;
  int64_t stride_ = 0;
  uint64_t q_stream_ = 0, row_stream_ = 0;
  int64_t valid_keys_ = 0;
  std::vector<int32_t> indices_, lens_, keys_;
  std::vector<char> referenced_;  // [held rows]
  std::vector<uint8_t> held_;     // [held rows, 1152]: what the reference reads
  std::vector<float> sink_;
  DeviceBuffer q_d_, pool_d_, indices_d_, lens_d_, sink_d_, out_d_, lse_d_, max_logit_d_;
};

// The judged tokens as their own problem (one-token sequences, q regenerated, indices
// folded into the held rows), judged on out, lse and max logit; and over every token, the
// lse and max logit that must be -inf exactly where a token has no valid key, never NaN
// or +inf (a token whose CTAs never ran keeps the poison).
Verdict PrefillProblem::check(int sampled_rows) const {
  synchronize();
  if (c_.tokens == 0) return {true, "0 tokens: nothing to judge", {{"passed", true}, {"rows_checked", 0}}};
  const int h = c_.h, topk = c_.topk;
  const std::vector<int64_t> tokens = judged_tokens(sampled_rows);
  const size_t n = tokens.size();
  const int64_t held = static_cast<int64_t>(held_.size() / kRowBytes);

  std::vector<float> q(n * h * 576);
  parallel_for(static_cast<int64_t>(n), 4, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) q_rows(tokens[static_cast<size_t>(i)], &q[static_cast<size_t>(i) * h * 576]);
  });
  std::vector<int32_t> indices(n * topk), lens;
  for (size_t i = 0; i < n; ++i) {
    const int32_t* row = &indices_[static_cast<size_t>(tokens[i] * stride_)];
    for (int j = 0; j < topk; ++j)
      indices[i * topk + j] = row[j] >= 0 && row[j] < c_.pool ? static_cast<int32_t>(row[j] % held) : -1;
    if (!lens_.empty()) lens.push_back(lens_[static_cast<size_t>(tokens[i])]);
  }
  MlaSparseProblem p;
  p.batch = static_cast<int>(n);
  p.q_len = 1;
  p.num_heads = h;
  p.fp8 = false;
  p.total_q = static_cast<int>(n);
  p.q = q;
  p.main.pool = held_;
  p.main.rows = held;
  p.main.indices = indices;
  p.main.stride = topk;
  p.main.topk = topk;
  p.main.lens = lens;
  p.main.lens_per_token = true;
  p.sink = sink_;
  p.softmax_scale = static_cast<double>(kScale);
  const MlaSparseReference ref = mla_sparse_reference(p);

  std::vector<float> out(n * h * 512), lse, max_logit;
  const std::vector<uint8_t> out_bytes = download_tokens(out_d_, size_t{1024} * h, tokens);
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t b;
    std::memcpy(&b, &out_bytes[2 * i], 2);
    out[i] = bf16_to_float(b);
  }
  // Every token's lse and max logit ([tokens, h] f32: small), then the judged tokens' rows.
  int64_t wrong_everywhere = 0;
  auto every_token = [&](const DeviceBuffer& b, std::vector<float>& judged) {
    const std::vector<float> all = b.download_as<float>(static_cast<size_t>(c_.tokens) * h);
    for (int64_t g = 0; g < c_.tokens; ++g)
      for (int head = 0; head < h; ++head) {
        const float x = all[static_cast<size_t>(g * h + head)];
        const bool empty = keys_[static_cast<size_t>(g)] == 0;
        wrong_everywhere += std::isnan(x) || x == INFINITY || empty != (x == -INFINITY);
      }
    for (int64_t g : tokens)
      judged.insert(judged.end(), all.begin() + g * h, all.begin() + (g + 1) * h);
  };
  if (c_.lse) every_token(lse_d_, lse);
  if (c_.max_logit) every_token(max_logit_d_, max_logit);

  MlaCompareLimits limits;  // mla_decode_sparse's for bf16 rows: the same kernel
  limits.lse_abs = mla_lse_limit(ref.lse, 4e-6);  // hostile rows × 1e3 give |lse| in the thousands
  MlaComparison oc = mla_sparse_compare(p, ref, out, lse, limits);
  MlaMaxLogitComparison mc;
  mc.passed = true;
  if (c_.max_logit) mc = mla_sparse_compare_max_logit(p, ref, max_logit);
  // The comparisons name rows of the judged set: name the problem's tokens instead.
  if (oc.checked_rows > 0) oc.worst_row.b = oc.worst_row.t = static_cast<int>(tokens[static_cast<size_t>(oc.worst_row.t)]);
  if (mc.checked_rows > 0) mc.worst_row.b = mc.worst_row.t = static_cast<int>(tokens[static_cast<size_t>(mc.worst_row.t)]);

  Verdict v;
  v.passed = oc.passed && mc.passed && wrong_everywhere == 0;
  v.summary = fmt::format("{} of {} tokens judged; out/lse {}; max logit {}; every token's lse/max logit: {} wrong",
                          n, c_.tokens, oc.summary(), c_.max_logit ? mc.summary() : "absent", wrong_everywhere);
  v.numbers = {{"passed", v.passed},
               {"rel_l2", oc.rel_l2},
               {"worst_row_err", oc.worst_row_err},
               {"rows_checked", oc.checked_rows},
               {"lse_max_abs_err", oc.lse_max_abs_err},
               {"max_logit_worst_ratio", mc.worst_ratio},
               {"tokens_checked", n}};
  return v;
}

// The registry's bench rows (issue 21's table; no hostile values).
std::vector<PrefillCase> bench_cases() {
  std::vector<PrefillCase> v;
  for (const json& s : ops::find_op("mla_prefill_sparse").tuning.bench_shapes) v.push_back(read_case(s));
  return v;
}

}  // namespace

ProblemKind mla_prefill_sparse_problem() {
  ProblemKind k;
  k.op = "mla_prefill_sparse";
  k.bench_cases = [] {
    std::vector<json> v;
    for (const PrefillCase& c : bench_cases()) v.push_back(c.to_json());
    return v;
  };
  // The bench rows' features at test scale, hostile values on: 37 tokens, a topk that is no
  // multiple of 32, the small pool flat and the large one in pages of 48; lengths on the
  // topk-2048 rows, a finite sink on the 8192 ones.
  k.test_cases = [] {
    std::vector<json> v;
    for (PrefillCase c : bench_cases()) {
      const int topk = c.topk;
      c.tokens = 37;
      c.topk = topk <= 512 ? 100 : (topk <= 2048 ? 300 : 700);
      c.page_size = c.pool > 32768 ? 48 : 0;
      c.pool = c.pool > 32768 ? 1920 : 1000;
      c.hostile = true;
      c.pad = 3;
      if (topk == 2048) c.lens = "token";
      if (topk == 8192) c.sink = "finite";
      v.push_back(c.to_json());
    }
    return v;
  };
  k.make = [](const json& shape, uint64_t seed, size_t) -> std::unique_ptr<Problem> {
    return std::make_unique<PrefillProblem>(read_case(shape), seed);
  };
  return k;
}

}  // namespace attnjit::harness
