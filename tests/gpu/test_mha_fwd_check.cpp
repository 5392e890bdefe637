// Checked mode (ATTNJIT_CHECK=1 / set_check_mode): mha_fwd validates the GPU-resident row
// offsets, KV lengths and block-table entries before launching and names the first bad one.
#include <vector>

#include "attnjit/ops/mha_fwd.hpp"
#include "attnjit/runtime.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/gpu.hpp"

using namespace attnjit;
using test::DeviceBuffer;

namespace {

std::vector<uint16_t> random_bf16(size_t n) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = test::float_to_bf16(dist(test::rng()));
  return v;
}

}  // namespace

TEST_CASE("mha_fwd checked mode names the first bad offset, length or table entry",
          "[gpu][mha_fwd][check]") {
  if (!test::gpu_or_skip()) return;
  const test::CheckModeScope scope(true);
  const int b = 2, h = 4, d = 64;

  SECTION("ragged q and k offsets") {
    const int total_q = 40, total_k = 60;
    DeviceBuffer q_d(size_t{total_q} * h * d * 2), k_d(size_t{total_k} * h * d * 2),
        v_d(size_t{total_k} * h * d * 2), out_d(size_t{total_q} * h * d * 2), qo_d(3 * 4), ko_d(3 * 4);
    q_d.upload(random_bf16(size_t{total_q} * h * d));
    k_d.upload(random_bf16(size_t{total_k} * h * d));
    v_d.upload(random_bf16(size_t{total_k} * h * d));
    MhaFwdArgs a;
    a.q = TensorView::contiguous(q_d.data(), DType::kBF16, {total_q, h, d});
    a.k = TensorView::contiguous(k_d.data(), DType::kBF16, {total_k, h, d});
    a.v = TensorView::contiguous(v_d.data(), DType::kBF16, {total_k, h, d});
    a.out = TensorView::contiguous(out_d.data(), DType::kBF16, {total_q, h, d});
    a.q_offsets = TensorView::contiguous(qo_d.data(), DType::kI32, {b + 1});
    a.k_offsets = TensorView::contiguous(ko_d.data(), DType::kI32, {b + 1});
    a.max_seqlen_q = 30;
    a.softmax_scale = 0.125f;
    const MhaFwdConfig c =
        mha_fwd_default_config({.head_dim = d, .head_dim_v = d, .mask = MaskKind::kCausal, .ragged = true});
    // Sequence 1's queries run past total_q.
    qo_d.upload(std::vector<int32_t>{0, 20, 41});
    ko_d.upload(std::vector<int32_t>{0, 30, 60});
    REQUIRE_ERROR(mha_fwd(a, nullptr, c), ErrorKind::kBadArgument, "q_offsets[1] = 20",
                  "q_offsets[2] = 41");
    // Sequence 0's keys decrease.
    qo_d.upload(std::vector<int32_t>{0, 20, 40});
    ko_d.upload(std::vector<int32_t>{5, 3, 60});
    REQUIRE_ERROR(mha_fwd(a, nullptr, c), ErrorKind::kBadArgument, "k_offsets[0] = 5");
    // Valid values pass the check and the call runs.
    ko_d.upload(std::vector<int32_t>{0, 30, 60});
    REQUIRE_NOTHROW(mha_fwd(a, nullptr, c));
    test::synchronize();
  }

  SECTION("paged kv lengths and table entries") {
    const int s_q = 4, pages = 4, page = 16, max_pages = 4;
    DeviceBuffer q_d(size_t{b} * s_q * h * d * 2), k_d(size_t{pages} * page * h * d * 2),
        v_d(size_t{pages} * page * h * d * 2), out_d(size_t{b} * s_q * h * d * 2),
        table_d(size_t{b} * max_pages * 4), lens_d(size_t{b} * 4);
    q_d.upload(random_bf16(size_t{b} * s_q * h * d));
    k_d.upload(random_bf16(size_t{pages} * page * h * d));
    v_d.upload(random_bf16(size_t{pages} * page * h * d));
    MhaFwdArgs a;
    a.q = TensorView::contiguous(q_d.data(), DType::kBF16, {b, s_q, h, d});
    a.k = TensorView::contiguous(k_d.data(), DType::kBF16, {pages, page, h, d});
    a.v = TensorView::contiguous(v_d.data(), DType::kBF16, {pages, page, h, d});
    a.out = TensorView::contiguous(out_d.data(), DType::kBF16, {b, s_q, h, d});
    a.block_table = TensorView::contiguous(table_d.data(), DType::kI32, {b, max_pages});
    a.kv_lens = TensorView::contiguous(lens_d.data(), DType::kI32, {b});
    a.softmax_scale = 0.125f;
    const MhaFwdConfig c = mha_fwd_default_config({.head_dim = d,
                                                   .head_dim_v = d,
                                                   .mask = MaskKind::kCausal,
                                                   .kv_layout = KvLayout::kPaged,
                                                   .page_size = page});
    // Sequence 1 uses 3 pages (40 keys); its slot 2 holds 99. Slot 3 is past its length.
    table_d.upload(std::vector<int32_t>{0, 1, 2, 3, 3, 2, 99, -7});
    lens_d.upload(std::vector<int32_t>{64, 40});
    REQUIRE_ERROR(mha_fwd(a, nullptr, c), ErrorKind::kBadArgument, "block_table[1][2] = 99",
                  "kv_lens[1] = 40");
    // A length past the table's capacity (4 pages × 16) is reported before table entries.
    lens_d.upload(std::vector<int32_t>{65, 40});
    REQUIRE_ERROR(mha_fwd(a, nullptr, c), ErrorKind::kBadArgument, "kv_lens[0] = 65");
    table_d.upload(std::vector<int32_t>{0, 1, 2, 3, 3, 2, 1, -7});
    lens_d.upload(std::vector<int32_t>{64, 40});
    REQUIRE_NOTHROW(mha_fwd(a, nullptr, c));
    test::synchronize();
  }
}
