// merge_states on the GPU. Its float64 checks on random states with every edge row (one
// side empty with NaN values, both empty, weights 120 apart) run as the harness's test rows
// (test_problems.cpp). Here: cascade attention end to end — mla_decode over a prefix and
// over a suffix of each sequence's keys, merged, against float64 attention over all of
// them, with empty prefixes and suffixes and the op's own strided views of mla_decode's
// out and lse; in place against out of place bit for bit; a CUDA-graph replay with new
// states; argument errors before any launch.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attnjit/ops/merge_states.hpp"
#include "attnjit/ops/mla_decode.hpp"
#include "driver/driver.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/gpu.hpp"

using namespace attnjit;
using test::DeviceBuffer;

namespace {

constexpr float kScale = 0.07216878364870323f;  // 1/sqrt(192)

std::vector<float> random_floats(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(test::rng());
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = test::float_to_bf16(v[i]);
  return out;
}

std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = test::bf16_to_float(v[i]);
  return out;
}

// The run of mla_decode over keys [begin_i, begin_i + lens_i) of each sequence: the table
// starts begin_i / page pages in (begin_i is page-aligned), so its out [b, 1, h, 512] and
// lse [b, h, 1] are attention over exactly those keys.
struct Part {
  DeviceBuffer table, lens, out, lse;
};

Part run_part(const DeviceBuffer& q, const DeviceBuffer& cache, int pages, int page, int h,
              const std::vector<int32_t>& table, int max_pages, const std::vector<int>& begin,
              const std::vector<int>& lens) {
  const int b = static_cast<int>(lens.size());
  std::vector<int32_t> shifted(table.size(), 0);
  for (int i = 0; i < b; ++i)
    for (int j = 0; j + begin[i] / page < max_pages; ++j)
      shifted[static_cast<size_t>(i * max_pages + j)] = table[static_cast<size_t>(i * max_pages + j + begin[i] / page)];
  Part p{DeviceBuffer(shifted.size() * 4), DeviceBuffer(lens.size() * 4),
         DeviceBuffer(static_cast<size_t>(b) * h * 512 * 2), DeviceBuffer(static_cast<size_t>(b) * h * 4)};
  p.table.upload(shifted);
  p.lens.upload(lens);
  p.out.fill_byte(0xFF);
  p.lse.fill_byte(0xFF);
  MlaDecodeArgs a{.q = TensorView::contiguous(q.data(), DType::kBF16, {b, 1, h, 576}),
                  .kv_cache = TensorView::contiguous(cache.data(), DType::kBF16, {pages, page, 576}),
                  .block_table = TensorView::contiguous(p.table.data(), DType::kI32, {b, max_pages}),
                  .cache_lens = TensorView::contiguous(p.lens.data(), DType::kI32, {b}),
                  .out = TensorView::contiguous(p.out.data(), DType::kBF16, {b, 1, h, 512}),
                  .lse = TensorView::contiguous(p.lse.data(), DType::kF32, {b, h, 1}),
                  .softmax_scale = kScale};
  mla_decode(a, nullptr);
  return p;
}

// mla_decode's out [b, 1, h, 512] and lse [b, h, q_len = 1] as merge_states views
// [b, 1, h, 512] and [b, 1, h] (lse strides h·q_len, 1, q_len).
TensorView out_view(const DeviceBuffer& out, int b, int h) {
  return TensorView::contiguous(out.data(), DType::kBF16, {b, 1, h, 512});
}
TensorView lse_view(const DeviceBuffer& lse, int b, int h) {
  return TensorView::strided(lse.data(), DType::kF32, {b, 1, h}, {h, 1, 1});
}

}  // namespace

TEST_CASE("merge_states: cascade attention from a prefix and a suffix matches float64",
          "[gpu][merge_states]") {
  if (!test::gpu_or_skip()) return;
  constexpr int h = 16, page = 16;
  // Each sequence split at a page boundary: a long prefix, no prefix (lse −inf on the
  // prefix side), no suffix, a one-key suffix, a one-key sequence.
  const std::vector<int> lens = {1000, 4097, 64, 337, 1, 2048};
  const std::vector<int> split = {512, 0, 64, 336, 0, 2032};
  const int b = static_cast<int>(lens.size());
  const int max_pages = (*std::max_element(lens.begin(), lens.end()) + page - 1) / page;
  const int pages = b * max_pages + 1;
  // Rows past each sequence's length and the spare page hold NaN: nothing may read them.
  std::vector<float> cache = random_floats(static_cast<size_t>(pages) * page * 576, -1.0f, 1.0f);
  std::vector<int32_t> table(static_cast<size_t>(b * max_pages));
  for (int i = 0; i < b; ++i)
    for (int j = 0; j < max_pages; ++j) {
      table[static_cast<size_t>(i * max_pages + j)] = (i * max_pages + j * 7 % max_pages) % (pages - 1);
      for (int r = 0; r < page; ++r)
        if (j * page + r >= lens[i])
          for (int k = 0; k < 576; ++k)
            cache[(static_cast<size_t>(table[static_cast<size_t>(i * max_pages + j)]) * page + r) * 576 + k] =
                std::nanf("");
    }
  for (int r = 0; r < page * 576; ++r) cache[static_cast<size_t>(pages - 1) * page * 576 + r] = std::nanf("");
  const std::vector<float> q = random_floats(static_cast<size_t>(b) * h * 576, -1.0f, 1.0f);
  const std::vector<uint16_t> cache_bits = to_bf16(cache), q_bits = to_bf16(q);
  DeviceBuffer cache_d(cache_bits.size() * 2), q_d(q_bits.size() * 2);
  cache_d.upload(cache_bits);
  q_d.upload(q_bits);

  std::vector<int> prefix_len(b), suffix_begin(b), suffix_len(b), zero(b, 0);
  for (int i = 0; i < b; ++i) prefix_len[i] = split[i], suffix_begin[i] = split[i], suffix_len[i] = lens[i] - split[i];
  const Part prefix = run_part(q_d, cache_d, pages, page, h, table, max_pages, zero, prefix_len);
  const Part suffix = run_part(q_d, cache_d, pages, page, h, table, max_pages, suffix_begin, suffix_len);
  DeviceBuffer out(static_cast<size_t>(b) * h * 512 * 2), lse(static_cast<size_t>(b) * h * 4);
  out.fill_byte(0xFF);
  lse.fill_byte(0xFF);
  merge_states({out_view(prefix.out, b, h), lse_view(prefix.lse, b, h), out_view(suffix.out, b, h),
                lse_view(suffix.lse, b, h), out_view(out, b, h), lse_view(lse, b, h)},
               nullptr);
  test::synchronize();

  // float64 attention over every key, as the full mla_decode would compute it.
  const std::vector<float> cache_r = from_bf16(cache_bits), q_r = from_bf16(q_bits);
  const test::MlaProblem p{.batch = b, .q_len = 1, .num_heads = h, .page_size = page, .num_pages = pages,
                           .max_pages = max_pages, .q = q_r, .kv_cache = cache_r, .block_table = table,
                           .cache_lens = std::span<const int32_t>(lens.data(), lens.size()),
                           .softmax_scale = kScale};
  const test::MlaReference ref = test::mla_reference(p);
  const std::vector<float> got = from_bf16(out.download_as<uint16_t>(static_cast<size_t>(b) * h * 512));
  const std::vector<float> got_lse = lse.download_as<float>(static_cast<size_t>(b) * h);
  // Two bf16 roundings (each part's out, then the merge): twice mla_decode's own limit.
  const test::MlaComparison c = test::mla_compare(p, ref, got, got_lse, {.rel_l2 = 2e-2, .row_max_err = 8e-2});
  INFO(c.summary());
  CHECK(c.passed);
  CHECK(c.checked_rows == b * h);
}

TEST_CASE("merge_states in place equals out of place bit for bit", "[gpu][merge_states]") {
  if (!test::gpu_or_skip()) return;
  constexpr int n = 333, h = 8, d = 192;
  const size_t rows = static_cast<size_t>(n) * h;
  const std::vector<uint16_t> va = to_bf16(random_floats(rows * d, -1, 1)), vb = to_bf16(random_floats(rows * d, -1, 1));
  std::vector<float> la = random_floats(rows, -6, 6), lb = random_floats(rows, -6, 6);
  la[5] = -std::numeric_limits<float>::infinity();
  lb[9] = lb[5] = -std::numeric_limits<float>::infinity();
  DeviceBuffer va_d(rows * d * 2), vb_d(rows * d * 2), la_d(rows * 4), lb_d(rows * 4), out_d(rows * d * 2),
      lse_d(rows * 4);
  va_d.upload(va), vb_d.upload(vb), la_d.upload(la), lb_d.upload(lb);
  auto v = [&](const DeviceBuffer& buf) { return TensorView::contiguous(buf.data(), DType::kBF16, {n, h, d}); };
  auto l = [&](const DeviceBuffer& buf) { return TensorView::contiguous(buf.data(), DType::kF32, {n, h}); };
  merge_states({v(va_d), l(la_d), v(vb_d), l(lb_d), v(out_d), l(lse_d)}, nullptr);
  // Into b's own buffers this time (v_out = v_b, lse_out = lse_b).
  merge_states({v(va_d), l(la_d), v(vb_d), l(lb_d), v(vb_d), l(lb_d)}, nullptr);
  test::synchronize();
  CHECK(vb_d.download_as<uint16_t>(rows * d) == out_d.download_as<uint16_t>(rows * d));
  const std::vector<float> lse_in_place = lb_d.download_as<float>(rows), lse = lse_d.download_as<float>(rows);
  CHECK(std::memcmp(lse_in_place.data(), lse.data(), rows * 4) == 0);
  CHECK(lse[5] == -std::numeric_limits<float>::infinity());
}

TEST_CASE("merge_states replays from a CUDA graph with new states", "[gpu][merge_states]") {
  if (!test::gpu_or_skip()) return;
  constexpr int n = 64, h = 32, d = 128;
  const size_t rows = static_cast<size_t>(n) * h;
  DeviceBuffer va_d(rows * d * 4), vb_d(rows * d * 4), la_d(rows * 4), lb_d(rows * 4), out_d(rows * d * 4),
      out_ref(rows * d * 4);
  auto v = [&](const DeviceBuffer& buf) { return TensorView::contiguous(buf.data(), DType::kF32, {n, h, d}); };
  auto l = [&](const DeviceBuffer& buf) { return TensorView::contiguous(buf.data(), DType::kF32, {n, h}); };
  const MergeStatesArgs args{v(va_d), l(la_d), v(vb_d), l(lb_d), v(out_d), {}};
  MergeStatesConfig config = merge_states_default_config(DType::kF32, d);
  config.lse_log2 = true;
  const MergeStatesPlan plan = merge_states_plan(merge_states_shape(args), &config);
  CHECK(plan.workspace_bytes == 0);
  CUstream stream;
  ATTNJIT_CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  CUgraph graph;
  ATTNJIT_CU(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  merge_states_schedule(plan, args, {}, stream);
  merge_states(args, plan, {}, stream);
  ATTNJIT_CU(cuStreamEndCapture, stream, &graph);
  CUgraphExec exec;
  ATTNJIT_CU(cuGraphInstantiate, &exec, graph, 0);
  for (int round = 0; round < 3; ++round) {
    va_d.upload(random_floats(rows * d, -1, 1)), vb_d.upload(random_floats(rows * d, -1, 1));
    la_d.upload(random_floats(rows, -20, 20)), lb_d.upload(random_floats(rows, -20, 20));
    out_d.fill_byte(0xFF);
    ATTNJIT_CU(cuGraphLaunch, exec, stream);
    ATTNJIT_CU(cuStreamSynchronize, stream);
    merge_states({v(va_d), l(la_d), v(vb_d), l(lb_d), v(out_ref), {}}, nullptr, &config);
    test::synchronize();
    CHECK(out_d.download_as<float>(rows * d) == out_ref.download_as<float>(rows * d));
  }
  ATTNJIT_CU(cuGraphExecDestroy, exec);
  ATTNJIT_CU(cuGraphDestroy, graph);
  ATTNJIT_CU(cuStreamDestroy, stream);
}

TEST_CASE("merge_states refuses a call that does not match its plan", "[gpu][merge_states]") {
  if (!test::gpu_or_skip()) return;
  DeviceBuffer v(64 * 8 * 128 * 2), l(64 * 8 * 4), o(64 * 8 * 128 * 2);
  auto vv = [&](int n) { return TensorView::contiguous(v.data(), DType::kBF16, {n, 8, 128}); };
  auto ll = [&](int n) { return TensorView::contiguous(l.data(), DType::kF32, {n, 8}); };
  auto oo = [&](int n) { return TensorView::contiguous(o.data(), DType::kBF16, {n, 8, 128}); };
  const MergeStatesPlan plan = merge_states_plan(merge_states_shape({vv(64), ll(64), vv(64), ll(64), oo(64), {}}));
  REQUIRE_ERROR(merge_states({vv(32), ll(32), vv(32), ll(32), oo(32), {}}, plan, {}, nullptr),
                ErrorKind::kBadArgument, "v_a", "plan");
  MergeStatesConfig wrong = merge_states_default_config(DType::kBF16, 64);
  REQUIRE_ERROR(merge_states_plan(plan.shape, &wrong), ErrorKind::kBadArgument, "config", "d64");
}
