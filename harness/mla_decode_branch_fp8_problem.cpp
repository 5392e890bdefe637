// mla_decode_branch_fp8 as a problem: `attnjit bench mla_decode_branch_fp8`'s rows (issue
// 22's table: the whole branch, and each stage launched alone) and their test-scale twins.
//
// A case's inputs: q, kv_input, gamma drawn as bf16; W_UK and W_UV drawn as floats and
// quantized to e4m3 with 128 × 128 block scales (harness::mla_branch_quantize_weight);
// freqs_cis of DeepSeek's interleaved RoPE (base 10000); one period of kChunkRows cache rows
// (bf16, or quantized on the GPU by mla_fp8_quantize for the 640-byte cache) repeated
// through a shuffled page pool, as mla_decode's problems do. Weights come in enough copies
// to be out of L2 on every call (each layer of a model has its own).
//
// The check (harness/mla_branch_reference.hpp): the output against the unfused branch in
// float64 (cosine and rel-L2 limits from the fp8 error model), every new cache row against
// its reference, and every other byte of the pool (and σ) against what it held before.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>

#include "attnjit/error.hpp"
#include "attnjit/ops/mla_decode_branch_fp8.hpp"
#include "driver/driver.hpp"
#include "harness/device.hpp"
#include "harness/mla_branch_reference.hpp"
#include "harness/mla_decode_branch_fp8_cases.hpp"
#include "harness/mla_reference.hpp"
#include "harness/problem.hpp"
#include "ops/registry.hpp"

namespace attnjit::harness {
namespace {

using nlohmann::json;

constexpr float kScale = 0.07216878f;  // 1/sqrt(192)
constexpr float kEpsilon = 1e-6f;
constexpr int kChunkRows = kBranchPoolPeriod;
constexpr int kMaxWeightCopies = 64;  // h 16: 2 MiB of weights per copy
constexpr int kExtraRows = 512;       // the sparse extra cache's rows

// The whole branch is judged against the reference's quantized twin (the projections'
// activations quantized as the kernels do), whose distance to the ideal float64 branch is
// the fp8 error model evaluated on the case's own inputs: ~0.04–0.06 on random data, more
// where the softmax is sharp (a score error moves p by the same relative amount). What the
// twin leaves out: bf16 P in the attention and the accumulation order, ~2^-8 relative per
// value, and the quantization codes those shift by one e4m3 step (a few % of the values,
// 2^-4 each: ~0.01; measured 0.006–0.014 on the bench rows, H200, session 33). On the
// 640-byte cache also σ_Q's quantization of the absorbed q (one more e4m3 step, the
// size of the twin's own) and the narrow kernel's e4m3 P′ (~0.01): measured 0.048–0.054.
// The 656-byte cache's old rows are decoded exactly by the reference; its new rows' codes
// are one key among thousands.
constexpr double kTwinLimit = 0.025, kTwinLimitFp8 = 0.075;

std::vector<uint16_t> draw_bf16(size_t n, float mean, float sd, std::mt19937_64& gen) {
  std::normal_distribution<float> d(mean, sd);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(d(gen));
  return v;
}

std::vector<float> as_floats(const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = bf16_to_float(bits[i]);
  return v;
}

struct Weight {
  MlaBranchWeightFp8 host;
  std::vector<DeviceBuffer> codes, scale;  // one per copy
};

Weight make_weight(int h, int n, int k, int copies, std::mt19937_64& gen) {
  std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(static_cast<float>(k)));
  std::vector<float> w(static_cast<size_t>(h) * n * k);
  for (auto& x : w) x = d(gen);
  Weight out;
  out.host = mla_branch_quantize_weight(w, h, n, k);
  for (int i = 0; i < copies; ++i) {
    out.codes.emplace_back(out.host.codes.size());
    out.codes.back().upload(out.host.codes);
    out.scale.emplace_back(out.host.scale.size() * 4);
    out.scale.back().upload(out.host.scale);
  }
  return out;
}

class BranchProblem final : public Problem {
 public:
  BranchProblem(const BranchCase& c, uint64_t seed, size_t l2_bytes) : c_(c) {
    std::mt19937_64 gen(seed);
    // New tokens per sequence and the lengths around the step.
    std::uniform_int_distribution<int> nq(0, c.q_len);
    offsets_.push_back(0);
    for (int b = 0; b < c.b; ++b) {
      const int n = c.varq ? nq(gen) : c.q_len;
      offsets_.push_back(offsets_.back() + n);
      before_.push_back(c.s_k - n);
      after_.push_back(c.s_k);
    }
    tokens_ = offsets_.back();
    const MlaPageTable pt = mla_random_page_table(after_, c.s_k, c.page, kChunkRows / c.page, gen);
    max_pages_ = pt.max_pages;
    num_pages_ = std::max(1, pt.num_pages);
    table_ = pt.table;
    ref_table_ = pt.ref_table;

    // Activations, norm weight, RoPE table.
    q_bits_ = draw_bf16(static_cast<size_t>(tokens_) * c.h * 192, 0.0f, 1.0f, gen);
    kv_bits_ = draw_bf16(static_cast<size_t>(tokens_) * 576, 0.0f, 1.0f, gen);
    gamma_bits_ = draw_bf16(512, 1.0f, 0.1f, gen);
    max_pos_ = c.s_k + 1;
    freqs_.resize(static_cast<size_t>(max_pos_) * 64);
    for (int p = 0; p < max_pos_; ++p)
      for (int j = 0; j < 32; ++j) {
        const double theta = p * std::pow(10000.0, -2.0 * j / 64.0);
        freqs_[static_cast<size_t>(p) * 64 + 2 * j] = static_cast<float>(std::cos(theta));
        freqs_[static_cast<size_t>(p) * 64 + 2 * j + 1] = static_cast<float>(std::sin(theta));
      }
    const size_t weight_bytes = size_t{2} * c.h * 512 * 128;
    copies_ = copies_out_of_l2(weight_bytes, l2_bytes, kMaxWeightCopies);
    w_uk_ = make_weight(c.h, 512, 128, copies_, gen);
    w_uv_ = make_weight(c.h, 128, 512, copies_, gen);

    // The cache's period, then the pool (the period repeated) and, fp8, σ per row.
    const std::vector<uint16_t> period = draw_bf16(size_t{kChunkRows} * 576, 0.0f, 1.0f, gen);
    row_bytes_ = c.fp8 ? kMlaFp8RowBytes : c.block ? kMlaSparseFp8RowBytes : 1152;
    if (c.block) {  // the host quantizer, bit-exact with the device's
      chunk_.resize(size_t{kChunkRows} * row_bytes_);
      for (int r = 0; r < kChunkRows; ++r) {
        const std::vector<uint8_t> row =
            mla_branch_encode_cache_row(MlaBranchCacheLayout::kFp8Block, &period[size_t(r) * 576], nullptr);
        std::memcpy(&chunk_[size_t(r) * row_bytes_], row.data(), row.size());
      }
    } else if (c.fp8) {
      DeviceBuffer in(period.size() * 2), rows(size_t{kChunkRows} * 640), sigma(size_t{kChunkRows} * 4);
      in.upload(period);
      MlaFp8QuantizeArgs qa;
      qa.in = TensorView::contiguous(in.data(), DType::kBF16, {kChunkRows, 576});
      qa.out = TensorView::contiguous(rows.data(), DType::kU8, {kChunkRows, 640});
      qa.scale = TensorView::contiguous(sigma.data(), DType::kF32, {kChunkRows});
      mla_fp8_quantize(qa, nullptr);
      synchronize();
      chunk_ = rows.download_as<uint8_t>(rows.bytes());
      chunk_scale_ = sigma.download_as<float>(kChunkRows);
    } else {
      chunk_.resize(period.size() * 2);
      std::memcpy(chunk_.data(), period.data(), chunk_.size());
    }
    const size_t pool_rows = static_cast<size_t>(num_pages_) * c.page;
    pool_ = DeviceBuffer(pool_rows * row_bytes_);
    if (c.fp8) pool_scale_ = DeviceBuffer(pool_rows * 4);
    for (size_t r = 0; r < pool_rows; r += kChunkRows) {
      const size_t n = std::min<size_t>(kChunkRows, pool_rows - r);
      ATTNJIT_CU(cuMemcpyHtoD, pool_.ptr() + r * row_bytes_, chunk_.data(), n * row_bytes_);
      if (c.fp8) ATTNJIT_CU(cuMemcpyHtoD, pool_scale_.ptr() + r * 4, chunk_scale_.data(), n * 4);
    }
    // The physical rows this step writes (the untouched-bytes check skips them).
    for (int b = 0; b < c.b; ++b)
      for (int i = 0; i < offsets_[b + 1] - offsets_[b]; ++i) new_rows_.push_back(physical_row(b, before_[b] + i));
    if (c.topk > 0) make_sparse(gen, static_cast<int64_t>(pool_rows));

    auto upload = [](const auto& v) {
      DeviceBuffer d(std::max<size_t>(1, v.size() * sizeof(v[0])));
      if (!v.empty()) d.upload(v);
      return d;
    };
    q_ = upload(q_bits_);
    kv_in_ = upload(kv_bits_);
    gamma_ = upload(gamma_bits_);
    freqs_d_ = upload(freqs_);
    offsets_d_ = upload(offsets_);
    before_d_ = upload(before_);
    table_d_ = upload(table_);
    indices_d_ = upload(indices_);
    extra_d_ = upload(extra_host_);
    extra_indices_d_ = upload(extra_indices_);
    extra_lens_d_ = upload(extra_lens_);
    lens_d_ = upload(lens_);
    sink_d_ = upload(sink_);
    out_ = DeviceBuffer(std::max<size_t>(1, static_cast<size_t>(tokens_) * c.h * 128 * 2));
  }

  // Sparse attention's inputs. Token t (sequence b, position p) lists positions uniform in
  // 0 .. p (duplicates by chance) as physical rows through the block table; at test scale
  // the lists also hold -1 padding, other negatives and rows past the pool (all skipped),
  // and the lengths run 0 .. topk + 2 (clamped); at bench scale every index is valid and
  // read. The sink is N(0, 1) per head.
  void make_sparse(std::mt19937_64& gen, int64_t pool_rows) {
    const bool hostile = tokens_ < 64;
    indices_.assign(static_cast<size_t>(tokens_) * c_.topk, -1);
    lens_.assign(static_cast<size_t>(tokens_), c_.topk);
    positions_.assign(static_cast<size_t>(tokens_), {});
    std::uniform_int_distribution<int> kind(0, 19), len(0, c_.topk + 2);
    for (int b = 0; b < c_.b; ++b)
      for (int t = offsets_[b]; t < offsets_[b + 1]; ++t) {
        const int p = before_[b] + (t - offsets_[b]);
        std::uniform_int_distribution<int> pos(0, p);
        if (hostile) lens_[t] = t == offsets_[b] && b == 0 ? 0 : len(gen);
        const int n = std::clamp(lens_[t], 0, c_.topk);
        for (int i = 0; i < c_.topk; ++i) {
          int32_t& x = indices_[static_cast<size_t>(t) * c_.topk + i];
          const int k = hostile ? kind(gen) : 2;
          if (k == 0) x = -1;
          else if (k == 1) x = static_cast<int32_t>(i % 2 ? pool_rows + i : -7 - i);
          else {
            const int at = pos(gen);
            x = static_cast<int32_t>(physical_row(b, at));
            if (i < n) positions_[t].push_back(at);
          }
        }
      }
    std::normal_distribution<float> d(0.0f, 1.0f);
    sink_.resize(static_cast<size_t>(c_.h));
    for (auto& x : sink_) x = d(gen);
    if (c_.extra == 0) return;
    // The extra cache: kExtraRows rows of their own in the main cache's format, each token
    // listing rows uniform over them (test scale: with -1, rows past the pool and lengths
    // 0 .. extra + 2, as above).
    const std::vector<uint16_t> rows = draw_bf16(size_t{kExtraRows} * 576, 0.0f, 1.0f, gen);
    extra_host_.resize(size_t{kExtraRows} * row_bytes_);
    for (int r = 0; r < kExtraRows; ++r) {
      const std::vector<uint8_t> row = mla_branch_encode_cache_row(
          c_.block ? MlaBranchCacheLayout::kFp8Block : MlaBranchCacheLayout::kBf16, &rows[size_t(r) * 576], nullptr);
      std::memcpy(&extra_host_[size_t(r) * row_bytes_], row.data(), row.size());
    }
    extra_indices_.assign(static_cast<size_t>(tokens_) * c_.extra, -1);
    extra_lens_.assign(static_cast<size_t>(tokens_), c_.extra);
    extra_rows_.assign(static_cast<size_t>(tokens_), {});
    std::uniform_int_distribution<int> row(0, kExtraRows - 1), elen(0, c_.extra + 2);
    for (int t = 0; t < tokens_; ++t) {
      if (hostile) extra_lens_[t] = t == 1 ? 0 : elen(gen);
      const int n = std::clamp(extra_lens_[t], 0, c_.extra);
      for (int i = 0; i < c_.extra; ++i) {
        int32_t& x = extra_indices_[static_cast<size_t>(t) * c_.extra + i];
        const int k = hostile ? kind(gen) : 2;
        if (k == 0) x = -1;
        else if (k == 1) x = kExtraRows + i;
        else {
          x = row(gen);
          if (i < n) extra_rows_[t].push_back(x);
        }
      }
    }
  }

  int64_t physical_row(int b, int pos) const {
    return int64_t{table_[static_cast<size_t>(b) * max_pages_ + pos / c_.page]} * c_.page + pos % c_.page;
  }

  nlohmann::ordered_json case_json() const override { return c_.to_json(); }
  std::string describe() const override {
    return fmt::format("b={} q_len={}{} h={} s_k={} {} cache{}, {}", c_.b, c_.q_len, c_.varq ? " varq" : "", c_.h,
                       c_.s_k, c_.cache_name(), c_.topk ? fmt::format(" topk {}", c_.topk) : "", to_string(c_.stage));
  }
  int copies() const override { return copies_; }

  MlaDecodeBranchFp8Args args(int i) const {
    const int w = i % copies_;
    const int64_t t = tokens_, h = c_.h;
    MlaDecodeBranchFp8Args a;
    a.q = TensorView::contiguous(q_.data(), DType::kBF16, {t, h, 192});
    a.input_row_offsets = TensorView::contiguous(offsets_d_.data(), DType::kI32, {c_.b + 1});
    a.cache_lens_before = TensorView::contiguous(before_d_.data(), DType::kI32, {c_.b});
    a.kv_input = TensorView::contiguous(kv_in_.data(), DType::kBF16, {t, 576});
    a.freqs_cis = TensorView::contiguous(freqs_d_.data(), DType::kF32, {max_pos_, 64});
    a.kv_norm_gamma = TensorView::contiguous(gamma_.data(), DType::kBF16, {512});
    a.epsilon = kEpsilon;
    a.kv_cache = c_.fp8 || c_.block ? TensorView::contiguous(pool_.data(), DType::kU8, {num_pages_, c_.page, row_bytes_})
                                    : TensorView::contiguous(pool_.data(), DType::kBF16, {num_pages_, c_.page, 576});
    if (c_.fp8) a.kv_scale = TensorView::contiguous(pool_scale_.data(), DType::kF32, {num_pages_, c_.page});
    a.block_table = TensorView::contiguous(table_d_.data(), DType::kI32, {c_.b, max_pages_});
    a.w_uk = TensorView::contiguous(w_uk_.codes[w].data(), DType::kE4M3, {h, 512, 128});
    a.w_uk_scale = TensorView::contiguous(w_uk_.scale[w].data(), DType::kF32, {h, 4, 1});
    a.w_uv = TensorView::contiguous(w_uv_.codes[w].data(), DType::kE4M3, {h, 128, 512});
    a.w_uv_scale = TensorView::contiguous(w_uv_.scale[w].data(), DType::kF32, {h, 1, 4});
    a.out = TensorView::contiguous(out_.data(), DType::kBF16, {t, h, 128});
    a.softmax_scale = kScale;
    if (c_.topk > 0) {
      a.indices = TensorView::contiguous(indices_d_.data(), DType::kI32, {t, c_.topk});
      a.topk_lengths = TensorView::contiguous(lens_d_.data(), DType::kI32, {t});
      a.attn_sink = TensorView::contiguous(sink_d_.data(), DType::kF32, {h});
    }
    if (c_.extra > 0) {
      a.extra_kv_cache = c_.block ? TensorView::contiguous(extra_d_.data(), DType::kU8, {kExtraRows, row_bytes_})
                                  : TensorView::contiguous(extra_d_.data(), DType::kBF16, {kExtraRows, 576});
      a.extra_indices = TensorView::contiguous(extra_indices_d_.data(), DType::kI32, {t, c_.extra});
      a.extra_topk_lengths = TensorView::contiguous(extra_lens_d_.data(), DType::kI32, {t});
    }
    return a;
  }

  // overrides: {"absorb": {...}, "output": {...}} laid over the built-in projection configs;
  // "attention" (as a Prepared's config names it) must be the config the attention plan
  // picks: the branch plans its attention itself.
  Prepared prepare(const json* overrides) override {
    MlaDecodeBranchFp8Shape shape = mla_decode_branch_fp8_shape(args(0), c_.q_len);
    shape.max_len = c_.s_k;
    // The op's own choices (the plan's, which also pick the output projection's e4m3
    // activations where the attention writes them), the overrides laid over them.
    const MlaDecodeBranchFp8Plan own = mla_decode_branch_fp8_plan(shape);
    MlaBranchProjConfig absorb = own.absorb;
    MlaBranchProjConfig output = own.output;
    const json heuristic = {{"absorb", json::parse(absorb.to_json())}, {"output", json::parse(output.to_json())}};
    if (overrides) {
      for (const auto& item : overrides->items())
        if (item.key() != "absorb" && item.key() != "output" && item.key() != "attention")
          fail_arg(fmt::format("--config key '{}'", item.key()),
                   "must be \"absorb\" or \"output\" (a projection config), or \"attention\"");
      json runtime;
      if (overrides->contains("absorb"))
        absorb = MlaBranchProjConfig::from_json(merge_config(heuristic["absorb"], (*overrides)["absorb"], {}, runtime).dump());
      if (overrides->contains("output"))
        output = MlaBranchProjConfig::from_json(merge_config(heuristic["output"], (*overrides)["output"], {}, runtime).dump());
    }
    auto plan = std::make_shared<MlaDecodeBranchFp8Plan>(mla_decode_branch_fp8_plan(shape, &absorb, &output));
    raw_e4m3_ = plan->output.a_e4m3;
    auto workspace = std::make_shared<DeviceBuffer>(std::max<size_t>(1, plan->workspace_bytes));
    const Workspace ws{workspace->data(), plan->workspace_bytes};
    mla_decode_branch_fp8_schedule(*plan, args(0), ws, nullptr);
    Prepared p;
    p.config = {{"absorb", json::parse(plan->absorb.to_json())},
                {"output", json::parse(plan->output.to_json())},
                {"attention", json::parse(c_.topk > 0 ? plan->attention_sparse.config.to_json()
                                          : c_.fp8    ? plan->attention_fp8.config.to_json()
                                                      : plan->attention.config.to_json())}};
    if (overrides && overrides->contains("attention") && (*overrides)["attention"] != p.config["attention"])
      fail_arg("--config key 'attention'",
               fmt::format("must be the config the attention plan picks, {}: the branch plans its "
                           "attention itself, got {}",
                           p.config["attention"].dump(), (*overrides)["attention"].dump()));
    p.config_source = overrides ? "given" : "heuristic";
    // A stage alone reads what the stages before it left in the workspace: the whole
    // branch runs once first, and check() runs it again before judging.
    full_run_ = [this, plan, ws, workspace] { mla_decode_branch_fp8(args(0), *plan, ws, nullptr); };
    if (c_.stage != MlaBranchStage::kAll) full_run_();
    const MlaBranchStage stage = c_.stage;
    p.enqueue = [this, plan, ws, workspace, stage](int i, CUstream stream) {
      mla_decode_branch_fp8_stage(args(i), *plan, ws, stream, stage);
    };
    p.schedule = [this, plan, ws, workspace] { mla_decode_branch_fp8_schedule(*plan, args(0), ws, nullptr); };
    return p;
  }

  void poison_output() override { out_.fill_byte(0xFF); }
  std::vector<uint8_t> output_bytes() const override {
    synchronize();
    return out_.download_as<uint8_t>(out_.bytes());
  }

  Verdict check(int sampled_rows) const override;

  std::string compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const override {
    return compare_16bit(ref, got, false, 1e-2);
  }

  double bytes() const override;
  double flops() const override;
  json target() const override {
    // Issue 22: the projections at ≤ 16 tokens read their weights at >= 2.0 TB/s.
    const bool proj = c_.stage == MlaBranchStage::kAbsorb || c_.stage == MlaBranchStage::kOutput;
    if (proj && tokens_ <= 16) return {{"metric", "gbps"}, {"h100", 2000}};
    return nullptr;
  }

 private:
  BranchCase c_;
  std::vector<int32_t> offsets_, before_, after_, table_, ref_table_, indices_, lens_;
  std::vector<std::vector<int>> positions_;  // sparse: the positions token t reads (valid, in order)
  std::vector<int32_t> extra_indices_, extra_lens_;
  std::vector<std::vector<int>> extra_rows_;  // the extra cache's rows token t reads
  std::vector<uint8_t> extra_host_;          // the extra cache [kExtraRows, row bytes]
  std::vector<float> sink_;
  std::vector<int64_t> new_rows_;
  int tokens_ = 0, max_pages_ = 0, num_pages_ = 0, max_pos_ = 0, copies_ = 1, row_bytes_ = 0;
  bool raw_e4m3_ = false;  // the prepared plan's attention writes e4m3 codes and σ (output.a_e4m3)
  std::vector<uint16_t> q_bits_, kv_bits_, gamma_bits_;
  std::vector<float> freqs_, chunk_scale_;
  std::vector<uint8_t> chunk_;
  Weight w_uk_, w_uv_;
  DeviceBuffer q_, kv_in_, gamma_, freqs_d_, offsets_d_, before_d_, table_d_, pool_, pool_scale_, out_,
      indices_d_, lens_d_, sink_d_, extra_d_, extra_indices_d_, extra_lens_d_;
  std::function<void()> full_run_;
};

Verdict BranchProblem::check(int sampled_rows) const {
  if (c_.stage != MlaBranchStage::kAll) full_run_();  // judge the whole branch's output
  synchronize();
  const MlaBranchCacheLayout layout = c_.fp8     ? MlaBranchCacheLayout::kFp8Token
                                      : c_.block ? MlaBranchCacheLayout::kFp8Block
                                                 : MlaBranchCacheLayout::kBf16;

  // 1. Every new cache row (and σ) against its reference.
  MlaBranchRowComparison rows_cmp;
  std::vector<uint8_t> row(static_cast<size_t>(row_bytes_));
  for (int b = 0; b < c_.b; ++b)
    for (int t = offsets_[b]; t < offsets_[b + 1]; ++t) {
      const int pos = before_[b] + (t - offsets_[b]);
      const int64_t r = physical_row(b, pos);
      ATTNJIT_CU(cuMemcpyDtoH, row.data(), pool_.ptr() + r * row_bytes_, row.size());
      float sigma = 0.0f;
      if (c_.fp8) ATTNJIT_CU(cuMemcpyDtoH, &sigma, pool_scale_.ptr() + r * 4, 4);
      const MlaBranchCacheRowRef ref = mla_branch_cache_row_reference(
          &kv_bits_[static_cast<size_t>(t) * 576], &freqs_[static_cast<size_t>(pos) * 64], gamma_bits_.data(), kEpsilon);
      rows_cmp.merge(mla_branch_compare_cache_row(layout, row.data(), sigma, ref), t);
    }

  // 2. Every other byte of the pool (and σ) as it was: the period, repeated.
  const std::set<int64_t> written(new_rows_.begin(), new_rows_.end());
  const size_t pool_rows = static_cast<size_t>(num_pages_) * c_.page;
  int64_t touched = 0;
  std::vector<uint8_t> got(size_t{kChunkRows} * row_bytes_);
  std::vector<float> got_scale(kChunkRows);
  for (size_t r0 = 0; r0 < pool_rows; r0 += kChunkRows) {
    const size_t n = std::min<size_t>(kChunkRows, pool_rows - r0);
    ATTNJIT_CU(cuMemcpyDtoH, got.data(), pool_.ptr() + r0 * row_bytes_, n * row_bytes_);
    if (c_.fp8) ATTNJIT_CU(cuMemcpyDtoH, got_scale.data(), pool_scale_.ptr() + r0 * 4, n * 4);
    for (size_t i = 0; i < n; ++i) {
      if (written.count(static_cast<int64_t>(r0 + i))) continue;
      const bool same = std::memcmp(&got[i * row_bytes_], &chunk_[i * row_bytes_], row_bytes_) == 0 &&
                        (!c_.fp8 || std::memcmp(&got_scale[i], &chunk_scale_[i], 4) == 0);
      touched += same ? 0 : 1;
    }
  }

  // 3. The output against the unfused branch in float64, on sampled (t, h) rows plus the
  // first and last token's first and last head (sampled_rows 0: every row).
  const std::vector<uint16_t> out_bits = out_.download_as<uint16_t>(static_cast<size_t>(tokens_) * c_.h * 128);
  const std::vector<float> out = as_floats(out_bits);
  int64_t nonfinite = 0;
  for (float x : out) nonfinite += std::isfinite(x) ? 0 : 1;
  std::vector<MlaBranchRow> sample;
  if (tokens_ > 0) {
    if (sampled_rows > 0) {
      std::set<std::pair<int, int>> picked{{0, 0}, {0, c_.h - 1}, {tokens_ - 1, 0}, {tokens_ - 1, c_.h - 1}};
      std::mt19937_64 gen(7);
      std::uniform_int_distribution<int> dt(0, tokens_ - 1), dh(0, c_.h - 1);
      while (static_cast<int>(picked.size()) < std::min(sampled_rows + 4, tokens_ * c_.h)) picked.insert({dt(gen), dh(gen)});
      for (const auto& [t, h] : picked) sample.push_back({t, h});
    } else {
      for (int t = 0; t < tokens_; ++t)
        for (int h = 0; h < c_.h; ++h) sample.push_back({t, h});
    }
  }
  const std::vector<float> q = as_floats(q_bits_), kv = as_floats(kv_bits_), gamma = as_floats(gamma_bits_);
  const std::vector<double> w_uk = mla_branch_dequantize_weight(w_uk_.host);
  const std::vector<double> w_uv = mla_branch_dequantize_weight(w_uv_.host);
  MlaBranchProblem p;
  p.tokens = tokens_;
  p.heads = c_.h;
  p.batch = c_.b;
  p.max_pos = max_pos_;
  p.q = q;
  p.kv_input = kv;
  p.freqs_cis = freqs_;
  p.gamma = gamma;
  p.epsilon = kEpsilon;
  p.w_uk = w_uk;
  p.w_uv = w_uv;
  p.old_row = [this, layout](int b, int pos, double* dst) {
    const int64_t r = int64_t{ref_table_[static_cast<size_t>(b) * max_pages_ + pos / c_.page]} * c_.page + pos % c_.page;
    mla_branch_decode_cache_row(layout, &chunk_[static_cast<size_t>(r) * row_bytes_],
                                c_.fp8 ? chunk_scale_[static_cast<size_t>(r)] : 0.0f, dst);
  };
  p.input_row_offsets = offsets_;
  p.cache_lens_before = before_;
  p.softmax_scale = static_cast<double>(kScale);
  if (c_.topk > 0) {
    p.sparse_positions = [this](int t) { return positions_[static_cast<size_t>(t)]; };
    p.sink = sink_;
    if (c_.extra > 0)
      p.sparse_extra_rows = [this, layout](int t, std::vector<double>& rows) {
        for (int r : extra_rows_[static_cast<size_t>(t)]) {
          rows.resize(rows.size() + 576);
          mla_branch_decode_cache_row(layout, &extra_host_[static_cast<size_t>(r) * row_bytes_], 0.0f,
                                      rows.data() + rows.size() - 576);
        }
      };
  }
  const MlaBranchReference ref = mla_branch_reference(p, sample);
  // Against the quantized twin the branch differs only by what the twin leaves out (the
  // kernels' bf16 P and accumulation order, the quantization codes those move by one step
  // and, on the 640-byte cache, q quantized again and e4m3 P′): the twin limit. Against
  // the ideal chain it may differ by the twin's own distance (the fp8 error model on these
  // inputs) plus that, by the triangle inequality.
  const double twin_rel = sample.empty() ? 0.0 : mla_branch_twin_rel_l2(ref);
  const double rel_twin = sample.empty() ? 0.0 : mla_branch_rel_l2(out, ref, MlaBranchChain::kTwin);
  const double cosine = sample.empty() ? 1.0 : mla_branch_cosine(out, ref);
  const double rel_l2 = sample.empty() ? 0.0 : mla_branch_rel_l2(out, ref);
  const double twin_limit = c_.fp8 ? kTwinLimitFp8 : kTwinLimit;
  const double rel_limit = twin_rel + twin_limit;
  const double cos_limit = 1.0 - rel_limit * rel_limit / 2.0;

  Verdict v;
  v.passed = rows_cmp.passed && touched == 0 && nonfinite == 0 && rel_twin <= twin_limit && rel_l2 <= rel_limit &&
             cosine >= cos_limit;
  v.summary = fmt::format("out: rel_l2 {:.4f} to the quantized twin (<= {}), to the ideal branch {:.4f} (<= {:.4f}: "
                          "the twin's own {:.4f} + {}), cosine {:.6f} (>= {:.5f}) over {} rows, {} non-finite; "
                          "new cache rows: {}; other pool rows changed: {}",
                          rel_twin, twin_limit, rel_l2, rel_limit, twin_rel, twin_limit, cosine, cos_limit,
                          sample.size(), nonfinite, rows_cmp.summary(), touched);
  v.numbers = {{"passed", v.passed},       {"cosine", cosine},          {"rel_l2", rel_l2},
               {"rel_l2_twin", rel_twin},  {"twin_rel_l2", twin_rel},
               {"rows_checked", static_cast<int64_t>(sample.size())}, {"nonfinite_out", nonfinite},
               {"cache_rows_passed", rows_cmp.passed}, {"cache_worst_ratio", rows_cmp.worst_ratio},
               {"untouched_rows_changed", touched}};
  return v;
}

// The bytes the timed region must move at least: the whole branch, or the stage alone.
double BranchProblem::bytes() const {
  const double t = tokens_, h = c_.h;
  const double weights = h * 512 * 128 + h * 4 * 4;  // e4m3 codes + scales, per projection
  double cache = 0;  // dense: every row of every sequence once; sparse: every valid index
  if (c_.topk > 0)
    for (size_t t = 0; t < positions_.size(); ++t)
      cache += static_cast<double>(positions_[t].size() + (extra_rows_.empty() ? 0 : extra_rows_[t].size())) * row_bytes_;
  else
    for (int b = 0; b < c_.b; ++b) cache += static_cast<double>(after_[b]) * (row_bytes_ + (c_.fp8 ? 4 : 0));
  const double new_rows = t * (row_bytes_ + (c_.fp8 ? 4 : 0));
  // The attention's output row (h of them a token): bf16, or e4m3 codes and four f32 σ.
  const double raw = raw_e4m3_ ? 512 + 4 * 4 : 512 * 2;
  switch (c_.stage) {
    case MlaBranchStage::kRope: return t * h * 64 * 2 * 2 + t * 576 * 2 + new_rows;
    case MlaBranchStage::kAbsorb: return weights + t * h * (128 + 512) * 2;
    case MlaBranchStage::kAttention: return cache + t * h * (576 * 2 + raw);
    case MlaBranchStage::kOutput: return weights + t * h * (raw + 128 * 2);
    case MlaBranchStage::kAll: break;
  }
  return 2 * weights + t * h * (192 + 128) * 2 + t * 576 * 2 + new_rows + cache;
}

double BranchProblem::flops() const {
  const double proj = 2.0 * tokens_ * c_.h * 512 * 128;
  double pairs = 0;
  if (c_.topk > 0)
    for (size_t t = 0; t < positions_.size(); ++t)
      pairs += static_cast<double>(positions_[t].size() + (extra_rows_.empty() ? 0 : extra_rows_[t].size()));
  else
    for (int b = 0; b < c_.b; ++b)
      for (int i = 0; i < offsets_[b + 1] - offsets_[b]; ++i) pairs += before_[b] + i + 1;
  const double attention = 2.0 * pairs * c_.h * (576 + 512);
  switch (c_.stage) {
    case MlaBranchStage::kRope: return 0;
    case MlaBranchStage::kAbsorb:
    case MlaBranchStage::kOutput: return proj;
    case MlaBranchStage::kAttention: return attention;
    case MlaBranchStage::kAll: break;
  }
  return 2 * proj + attention;
}

}  // namespace

ProblemKind mla_decode_branch_fp8_problem() {
  ProblemKind k;
  k.op = "mla_decode_branch_fp8";
  k.bench_cases = [] {
    std::vector<json> v;
    for (const BranchCase& c : bench_cases()) v.push_back(c.to_json());
    return v;
  };
  k.test_cases = [] {  // the whole-branch rows at test scale, plus ragged and MTP batches
    std::vector<json> v;
    for (BranchCase c : bench_cases()) {
      if (c.stage != MlaBranchStage::kAll || c.s_k != 4096) continue;
      c.b = 3;
      c.s_k = 300;
      v.push_back(c.to_json());
    }
    for (bool fp8 : {false, true}) {
      BranchCase c;
      c.b = 6, c.q_len = 8, c.h = 16, c.s_k = 200, c.varq = true, c.fp8 = fp8;
      v.push_back(c.to_json());
    }
    // Sparse attention on both of its caches, hostile index lists (make_sparse), q_len 1
    // and a ragged MTP batch.
    for (bool block : {false, true})
      for (int h : {16, 128}) {
        BranchCase c;
        c.b = 3, c.h = h, c.s_k = 300, c.block = block, c.topk = 72;
        v.push_back(c.to_json());
        c.b = 5, c.q_len = 4, c.varq = true, c.topk = 40, c.extra = 16;
        if (h == 16) v.push_back(c.to_json());
      }
    return v;
  };
  k.make = [](const json& shape, uint64_t seed, size_t l2_bytes) -> std::unique_ptr<Problem> {
    return std::make_unique<BranchProblem>(read_case(shape), seed, l2_bytes);
  };
  return k;
}

}  // namespace attnjit::harness
