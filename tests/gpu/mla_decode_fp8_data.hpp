#pragma once
// The mla_decode_fp8 GPU tests' inputs: random bf16 rows of a chosen magnitude quantized by
// the shipped device quantizer (checked bit for bit against its host reference), then
// poisoned where no sequence reads (NaN codes, NaN rope, NaN or Inf σ), uploaded in the 640-byte
// and the three-tensor form; the float64 reference is mla_decode's on the dequantized rows.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attnjit/ops/mla_decode_fp8.hpp"
#include "harness/mla_fp8_reference.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"
#include "support/values.hpp"

namespace attnjit::test::mla_fp8 {

inline constexpr double kDeepSeekScale = 0.07216878364870323;  // 1/sqrt(192)

struct Fp8Case {
  int q_len = 1;
  int heads = 16;
  int page_size = 64;
  std::vector<int> lens;
  float magnitude = 1.0f;   // the bf16 data's standard deviation before quantization
  bool per_head_q = false;  // σ_Q per token and head (else per token)
  int spare_pages = 2;
  bool per_tensor = false;  // the per-tensor form: 576-byte rows, one σ_Q, one σ_KV
  int row_bytes() const { return per_tensor ? 576 : 640; }
  int batch() const { return static_cast<int>(lens.size()); }
  std::string describe() const {
    return fmt::format("b{} q_len{} h{} page{} mag {} {} lens [{}]", batch(), q_len, heads, page_size,
                       magnitude, per_tensor ? "per-tensor 576B" : per_head_q ? "σ_Q/head" : "σ_Q/token",
                       lens.size() <= 8 ? fmt::format("{}", fmt::join(lens, ",")) : fmt::format("{}…", lens[0]));
  }
};

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

class Fp8Data {
 public:
  explicit Fp8Data(const Fp8Case& c) : c_(c) {
    const int max_len = std::max(1, *std::max_element(c.lens.begin(), c.lens.end()));
    max_pages_ = ceil_div(max_len, c.page_size) + 1;
    int used = 0;
    for (int l : c.lens) used += ceil_div(l, c.page_size);
    num_pages_ = used + c.spare_pages;
    const int64_t qrows = int64_t{c.batch()} * c.q_len * c.heads, krows = int64_t{num_pages_} * c.page_size;
    q_in_ = DeviceBuffer(static_cast<size_t>(qrows) * 1152);
    kv_in_ = DeviceBuffer(static_cast<size_t>(krows) * 1152);
    q_d_ = DeviceBuffer(static_cast<size_t>(qrows) * 640);
    qs_d_ = DeviceBuffer(static_cast<size_t>(qrows) * 4);
    kv_d_ = DeviceBuffer(static_cast<size_t>(krows) * 640);  // 576-byte rows fit too
    kv3_d_ = DeviceBuffer(static_cast<size_t>(krows) * 512);
    rope_d_ = DeviceBuffer(static_cast<size_t>(krows) * 128);
    ks_d_ = DeviceBuffer(static_cast<size_t>(krows) * 4);
    table_d_ = DeviceBuffer(static_cast<size_t>(c.batch() * max_pages_) * 4);
    lens_d_ = DeviceBuffer(static_cast<size_t>(c.batch()) * 4);
    out_d_ = DeviceBuffer(static_cast<size_t>(qrows) * 1024);
    lse_d_ = DeviceBuffer(static_cast<size_t>(qrows) * 4);
    refill(c.lens);
  }

  // New lengths, table and values in the same buffers (a graph replay reads them).
  void refill(const std::vector<int>& lens) {
    REQUIRE(lens.size() == c_.lens.size());
    lens_ = lens;
    auto& gen = test::rng();
    FastNormal normal(gen());
    const int64_t qrows = int64_t{c_.batch()} * c_.q_len * c_.heads, krows = int64_t{num_pages_} * c_.page_size;
    std::vector<uint16_t> qb(static_cast<size_t>(qrows) * 576), kb(static_cast<size_t>(krows) * 576);
    for (auto& x : qb) x = harness::float_to_bf16(normal() * c_.magnitude);
    for (auto& x : kb) x = harness::float_to_bf16(normal() * c_.magnitude);
    q_in_.upload(qb);
    kv_in_.upload(kb);
    // The shipped quantizer; its host reference must agree bit for bit.
    const int64_t rb = c_.row_bytes();
    const MlaFp8Group qgroup = c_.per_tensor ? MlaFp8Group::kTensor : c_.per_head_q ? MlaFp8Group::kRow : MlaFp8Group::kToken;
    const int64_t q_per_group = c_.per_tensor ? qrows : c_.per_head_q ? 1 : c_.heads;
    MlaFp8QuantizeArgs qa;
    qa.in = TensorView::contiguous(q_in_.data(), DType::kBF16, {qrows, 576});
    qa.group = qgroup;
    qa.rows_per_group = static_cast<int>(c_.per_tensor ? 1 : q_per_group);
    qa.out = TensorView::contiguous(q_d_.data(), DType::kU8, {qrows, rb});
    qa.scale = TensorView::contiguous(qs_d_.data(), DType::kF32, {qrows / q_per_group});
    mla_fp8_quantize(qa, nullptr);
    MlaFp8QuantizeArgs ka;
    ka.in = TensorView::contiguous(kv_in_.data(), DType::kBF16, {krows, 576});
    ka.group = c_.per_tensor ? MlaFp8Group::kTensor : MlaFp8Group::kRow;
    ka.out = TensorView::contiguous(kv_d_.data(), DType::kU8, {krows, rb});
    ka.scale = TensorView::contiguous(ks_d_.data(), DType::kF32, {c_.per_tensor ? 1 : krows});
    mla_fp8_quantize(ka, nullptr);
    test::synchronize();
    q_ = q_d_.download_as<uint8_t>(static_cast<size_t>(qrows * rb));
    qs_ = qs_d_.download_as<float>(static_cast<size_t>(qrows / q_per_group));
    kv_ = kv_d_.download_as<uint8_t>(static_cast<size_t>(krows * rb));
    ks_ = ks_d_.download_as<float>(static_cast<size_t>(c_.per_tensor ? 1 : krows));
    {
      std::vector<uint8_t> hq(q_.size()), hk(kv_.size());
      std::vector<float> hqs(qs_.size()), hks(ks_.size());
      mla_fp8_quantize_host(qb.data(), qrows, q_per_group, hq.data(), hqs.data(), static_cast<int>(rb));
      mla_fp8_quantize_host(kb.data(), krows, c_.per_tensor ? krows : 1, hk.data(), hks.data(), static_cast<int>(rb));
      CHECK(hq == q_);
      CHECK(hqs == qs_);
      CHECK(hk == kv_);
      CHECK(hks == ks_);
    }
    // Pages in random order, garbage table entries past the used pages, and every row no
    // sequence reads poisoned: NaN codes, NaN rope, NaN or Inf σ.
    std::vector<int32_t> pages(static_cast<size_t>(num_pages_));
    for (int i = 0; i < num_pages_; ++i) pages[static_cast<size_t>(i)] = i;
    std::shuffle(pages.begin(), pages.end(), gen);
    const int32_t garbage[] = {-1, INT32_MAX, pages.back(), num_pages_, INT32_MIN};
    std::vector<char> live(static_cast<size_t>(krows), 0);
    table_.assign(static_cast<size_t>(c_.batch() * max_pages_), 0);
    size_t next = 0;
    for (int b = 0; b < c_.batch(); ++b) {
      const int len = lens[static_cast<size_t>(b)], used = ceil_div(len, c_.page_size);
      for (int p = 0; p < max_pages_; ++p) {
        int32_t& e = table_[static_cast<size_t>(b * max_pages_ + p)];
        if (p >= used) {
          e = garbage[(b + p) % 5];
          continue;
        }
        e = pages[next++];
        for (int r = 0; r < std::min(c_.page_size, len - p * c_.page_size); ++r)
          live[static_cast<size_t>(e) * c_.page_size + r] = 1;
      }
    }
    for (int64_t r = 0; r < krows; ++r) {
      if (live[static_cast<size_t>(r)]) continue;
      std::fill_n(kv_.begin() + r * rb, rb, uint8_t{0x7f});  // e4m3 NaN codes
      if (!c_.per_tensor) {  // NaN rope (bf16) and NaN σ; a per-tensor σ is shared
        std::fill_n(kv_.begin() + r * rb + 512, 128, uint8_t{0xff});
        ks_[static_cast<size_t>(r)] = r % 2 ? std::numeric_limits<float>::quiet_NaN()
                                            : std::numeric_limits<float>::infinity();
      }
    }
    kv_d_.upload(kv_);
    ks_d_.upload(ks_);
    if (!c_.per_tensor) {
      std::vector<uint8_t> content(static_cast<size_t>(krows) * 512), rope(static_cast<size_t>(krows) * 128);
      for (int64_t r = 0; r < krows; ++r) {
        std::memcpy(&content[static_cast<size_t>(r) * 512], &kv_[static_cast<size_t>(r) * 640], 512);
        std::memcpy(&rope[static_cast<size_t>(r) * 128], &kv_[static_cast<size_t>(r) * 640 + 512], 128);
      }
      kv3_d_.upload(content);
      rope_d_.upload(rope);
    }
    table_d_.upload(table_);
    lens_d_.upload(lens_);
    qd_ = harness::mla_fp8_dequantize(q_, qs_, q_per_group, static_cast<int>(rb));
    kd_ = harness::mla_fp8_dequantize(kv_, ks_, c_.per_tensor ? krows : 1, static_cast<int>(rb));
  }

  MlaDecodeFp8Args args(bool three, bool want_lse = true) const {
    const int64_t b = c_.batch(), ql = c_.q_len, h = c_.heads;
    MlaDecodeFp8Args a;
    const int64_t rb = c_.row_bytes();
    a.q = TensorView::contiguous(q_d_.data(), DType::kU8, {b, ql, h, rb});
    a.q_scale = c_.per_tensor   ? TensorView::contiguous(qs_d_.data(), DType::kF32, {1})
                : c_.per_head_q ? TensorView::contiguous(qs_d_.data(), DType::kF32, {b * ql, h})
                                : TensorView::contiguous(qs_d_.data(), DType::kF32, {b * ql});
    if (c_.per_tensor) {
      a.kv_cache = TensorView::contiguous(kv_d_.data(), DType::kU8, {num_pages_, c_.page_size, 576});
    } else if (three) {
      a.kv_cache = TensorView::contiguous(kv3_d_.data(), DType::kU8, {num_pages_, c_.page_size, 512});
      a.kv_rope = TensorView::contiguous(rope_d_.data(), DType::kBF16, {num_pages_, c_.page_size, 64});
    } else {
      a.kv_cache = TensorView::contiguous(kv_d_.data(), DType::kU8, {num_pages_, c_.page_size, 640});
    }
    a.kv_scale = c_.per_tensor ? TensorView::contiguous(ks_d_.data(), DType::kF32, {1})
                               : TensorView::contiguous(ks_d_.data(), DType::kF32, {num_pages_, c_.page_size});
    a.block_table = TensorView::contiguous(table_d_.data(), DType::kI32, {b, max_pages_});
    a.cache_lens = TensorView::contiguous(lens_d_.data(), DType::kI32, {b});
    a.out = TensorView::contiguous(out_d_.data(), DType::kBF16, {b, ql, h, 512});
    if (want_lse) a.lse = TensorView::contiguous(lse_d_.data(), DType::kF32, {b, h, ql});
    a.softmax_scale = static_cast<float>(kDeepSeekScale);
    return a;
  }

  harness::MlaProblem problem() const {
    harness::MlaProblem p;
    p.batch = c_.batch();
    p.q_len = c_.q_len;
    p.num_heads = c_.heads;
    p.page_size = c_.page_size;
    p.num_pages = num_pages_;
    p.max_pages = max_pages_;
    p.q = qd_;
    p.kv_cache = kd_;
    p.block_table = table_;
    p.cache_lens = lens_;
    p.softmax_scale = static_cast<double>(static_cast<float>(kDeepSeekScale));
    return p;
  }

  void poison_outputs() {
    out_d_.fill_byte(0xFF);
    lse_d_.fill_byte(0xFF);
  }
  std::vector<float> out() const {
    const auto bits = out_d_.download_as<uint16_t>(out_d_.bytes() / 2);
    std::vector<float> o(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) o[i] = harness::bf16_to_float(bits[i]);
    return o;
  }
  std::vector<float> lse() const { return lse_d_.download_as<float>(lse_d_.bytes() / 4); }
  std::vector<uint8_t> out_bytes() const { return out_d_.download_as<uint8_t>(out_d_.bytes()); }
  const Fp8Case& spec() const { return c_; }
  const std::vector<int32_t>& lens() const { return lens_; }

 private:
  Fp8Case c_;
  int max_pages_ = 0, num_pages_ = 0;
  std::vector<int32_t> lens_, table_;
  std::vector<uint8_t> q_, kv_;
  std::vector<float> qs_, ks_, qd_, kd_;
  DeviceBuffer q_in_, kv_in_, q_d_, qs_d_, kv_d_, kv3_d_, rope_d_, ks_d_, table_d_, lens_d_, out_d_, lse_d_;
};

}  // namespace attnjit::test::mla_fp8
