// Checked mode (ATTNJIT_CHECK=1 / set_check_mode): mla_decode validates the GPU-resident
// ragged q offsets, lengths and block-table entries before launching and names the first
// bad one.
#include <vector>

#include "attnjit/ops/mla_decode.hpp"
#include "attnjit/runtime.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/gpu.hpp"

using namespace attnjit;
using test::DeviceBuffer;


TEST_CASE("mla_decode checked mode names the first bad offset, length or table entry",
          "[gpu][mla_decode][check]") {
  if (!test::gpu_or_skip()) return;
  const int b = 2, h = 16, pages = 4, page = 64, max_pages = 4;
  std::vector<uint16_t> q(static_cast<size_t>(b) * h * kMlaHeadDim);
  std::vector<uint16_t> cache(static_cast<size_t>(pages) * page * kMlaHeadDim);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& x : q) x = test::float_to_bf16(dist(test::rng()));
  for (auto& x : cache) x = test::float_to_bf16(dist(test::rng()));
  DeviceBuffer q_d(q.size() * 2), cache_d(cache.size() * 2), out_d(static_cast<size_t>(b) * h * 512 * 2);
  DeviceBuffer table_d(static_cast<size_t>(b) * max_pages * 4), lens_d(static_cast<size_t>(b) * 4);
  q_d.upload(q);
  cache_d.upload(cache);
  MlaDecodeArgs a;
  a.q = TensorView::contiguous(q_d.data(), DType::kBF16, {b, 1, h, kMlaHeadDim});
  a.kv_cache = TensorView::contiguous(cache_d.data(), DType::kBF16, {pages, page, kMlaHeadDim});
  a.block_table = TensorView::contiguous(table_d.data(), DType::kI32, {b, max_pages});
  a.cache_lens = TensorView::contiguous(lens_d.data(), DType::kI32, {b});
  a.out = TensorView::contiguous(out_d.data(), DType::kBF16, {b, 1, h, 512});
  a.softmax_scale = 0.0722f;
  const test::CheckModeScope scope(true);

  // Sequence 1 uses 3 pages (L = 150); its slot 2 holds 99, not a page of the 4-page pool.
  // Slot 3 is past its length, so garbage there is fine.
  table_d.upload(std::vector<int32_t>{0, 1, 2, 3, 3, 2, 99, -7});
  lens_d.upload(std::vector<int32_t>{200, 150});
  REQUIRE_ERROR(mla_decode(a, nullptr), ErrorKind::kBadArgument, "block_table[1][2] = 99",
                "cache_lens[1] = 150");

  // A length past the table's capacity (4 pages × 64) is reported before table entries.
  lens_d.upload(std::vector<int32_t>{300, 150});
  REQUIRE_ERROR(mla_decode(a, nullptr), ErrorKind::kBadArgument, "cache_lens[0] = 300");
  lens_d.upload(std::vector<int32_t>{-1, 150});
  REQUIRE_ERROR(mla_decode(a, nullptr), ErrorKind::kBadArgument, "cache_lens[0] = -1");

  // Valid values pass the check and the call runs.
  table_d.upload(std::vector<int32_t>{0, 1, 2, 3, 3, 2, 1, -7});
  lens_d.upload(std::vector<int32_t>{200, 150});
  REQUIRE_NOTHROW(mla_decode(a, nullptr));
  test::synchronize();

  // Ragged form over the same q rows: q [2, h, 576] with offsets, bound max_q_len = 1.
  DeviceBuffer off_d(3 * 4);
  MlaDecodeArgs r = a;
  r.q = TensorView::contiguous(q_d.data(), DType::kBF16, {b, h, kMlaHeadDim});
  r.q_offsets = TensorView::contiguous(off_d.data(), DType::kI32, {b + 1});
  r.max_q_len = 1;
  r.out = TensorView::contiguous(out_d.data(), DType::kBF16, {b, h, 512});
  off_d.upload(std::vector<int32_t>{0, 2, 2});  // sequence 0 has 2 tokens, over the bound 1
  REQUIRE_ERROR(mla_decode(r, nullptr), ErrorKind::kBadArgument, "q_offsets[0..1] = 0, 2",
                "max_q_len = 1");
  off_d.upload(std::vector<int32_t>{0, 1, 3});  // ends past total_q = 2
  REQUIRE_ERROR(mla_decode(r, nullptr), ErrorKind::kBadArgument, "q_offsets[1..2] = 1, 3",
                "total_q = 2");
  off_d.upload(std::vector<int32_t>{1, 0, 1});  // decreasing
  REQUIRE_ERROR(mla_decode(r, nullptr), ErrorKind::kBadArgument, "q_offsets[0..1] = 1, 0");
  // Offsets are reported before the same sequence's length.
  lens_d.upload(std::vector<int32_t>{-5, 150});
  off_d.upload(std::vector<int32_t>{0, 2, 2});
  REQUIRE_ERROR(mla_decode(r, nullptr), ErrorKind::kBadArgument, "q_offsets[0..1]");
  lens_d.upload(std::vector<int32_t>{200, 150});
  off_d.upload(std::vector<int32_t>{0, 1, 2});
  REQUIRE_NOTHROW(mla_decode(r, nullptr));
  test::synchronize();
}
