// Drill 10 of the reliability issue, unchecked half: GPU-resident values that break every
// rule (lengths past the table's capacity or negative, table entries outside the pool,
// offsets that decrease, run past the rows or go negative) with checked mode off. The
// kernels must finish (no hang), stay in bounds (tools/gpu_sanitize.sh runs these cases
// under memcheck) and leave the sequences whose own values are valid as they were: their
// rows are compared with a run on valid values, bit for bit where the schedule promises
// it (a forced split count, invariant_tiles), to rounding otherwise. What the hostile
// sequences' own rows hold is undefined. Checked mode's half (naming the first bad value)
// is test_mla_decode_check.cpp and test_mha_fwd_check.cpp.
#include <climits>
#include <cmath>
#include <vector>

#include "attnjit/runtime.hpp"
#include "driver/driver.hpp"
#include "gpu/mha_fwd_cases.hpp"
#include "gpu/mla_decode_cases.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"

using namespace attnjit;
using test::DeviceBuffer;

namespace {

struct UncheckedScope {
  bool was = check_mode();
  UncheckedScope() { set_check_mode(false); }
  ~UncheckedScope() { set_check_mode(was); }
};

// Overwrites a device int32 tensor (a view's memory) with host values.
void poke(const TensorView& v, const std::vector<int32_t>& host) {
  REQUIRE(v.data != nullptr);
  ATTNJIT_CU(cuMemcpyHtoD, reinterpret_cast<CUdeviceptr>(v.data), host.data(),
             host.size() * sizeof(int32_t));
}
// Points every slot of block-table row `row` ([rows, width] int32) outside a pool of
// `pool` pages, both ways; the other rows stay as they are.
void table_row_outside(const TensorView& table, int row, int32_t pool) {
  const int32_t outside[] = {pool, -1, INT32_MIN, INT32_MAX, pool + 4096};
  std::vector<int32_t> host(static_cast<size_t>(table.shape[1]));
  for (size_t p = 0; p < host.size(); ++p) host[p] = outside[p % std::size(outside)];
  ATTNJIT_CU(cuMemcpyHtoD,
             reinterpret_cast<CUdeviceptr>(table.data) + static_cast<size_t>(row) * host.size() * 4,
             host.data(), host.size() * sizeof(int32_t));
}

// Elements [begin, end) of `got` against `want`: finite, and bit-equal or within `tol`.
void same_rows(const std::vector<float>& want, const std::vector<float>& got, size_t begin,
               size_t end, bool bitwise, const std::string& label) {
  INFO(label << (bitwise ? " (bit for bit)" : " (to rounding)"));
  REQUIRE(end <= want.size());
  REQUIRE(got.size() == want.size());
  size_t nonfinite = 0, differ = 0;
  double worst = 0;
  for (size_t i = begin; i < end; ++i) {
    if (!std::isfinite(got[i])) ++nonfinite;
    const double d = std::fabs(double(got[i]) - want[i]);
    worst = std::max(worst, d);
    if (bitwise ? got[i] != want[i] : d > 1e-2 * std::max(1.0, std::fabs(double(want[i])))) ++differ;
  }
  fmt::print("hostile [{}]: {} valid elements, {} differ (worst {:.3g}), {} not finite\n", label,
             end - begin, differ, worst, nonfinite);
  CHECK(nonfinite == 0);
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("mla_decode unchecked: hostile lengths, table entries and offsets stay in bounds",
          "[gpu][mla_decode][hostile]") {
  if (!test::gpu_or_skip()) return;
  using namespace attnjit::test::mla_gpu;
  const UncheckedScope unchecked;
  const int heads = GENERATE(16, 128);
  // Sequence 0 keeps valid values; 1..4 get hostile ones below.
  MlaCase c{.q_len = 2, .heads = heads, .page_size = 64, .lens = {300, 150, 70, 129, 65}};
  MlaDecodeConfig invariant = config_for(c);
  invariant.invariant_tiles = 2;
  struct Schedule {
    const char* name;
    const MlaDecodeConfig* config;
    int num_splits;
    bool bitwise;
  } schedules[] = {{"balanced", nullptr, 0, false},
                   {"invariant_tiles 2", &invariant, 0, true},
                   {"3 splits", nullptr, 3, true}};
  for (const Schedule& s : schedules) {
    MlaData d(c);
    RunOptions o;
    o.config = s.config;
    o.num_splits = s.num_splits;
    const RunResult good = run_mla(d, o);
    judge(d, reference_for(d), good, std::string("valid values, ") + s.name);

    const MlaDecodeArgs a = d.args(true);
    const int capacity = d.max_pages() * c.page_size;
    table_row_outside(a.block_table, 3, d.num_pages());  // 3: every slot outside the pool
    // 1: past the capacity (its table's garbage slots come into reach); 2: negative;
    // 4: one past the capacity.
    poke(a.cache_lens, {300, INT32_MAX, -5, 129, capacity + 1});
    const RunResult bad = run_mla(d, o);
    const size_t row = static_cast<size_t>(c.q_len) * heads * test::kMlaVDim;  // one sequence
    same_rows(good.out, bad.out, 0, row, s.bitwise,
              fmt::format("mla_decode h{} {}: sequence 0 beside hostile lengths and table", heads,
                          s.name));
  }

  {  // ragged offsets: q [b·q_len, h, 576] over the padded data;
    // sequence 0 owns rows [0, q_len).
    MlaData d(c);
    const int b = c.batch(), total_q = b * c.q_len;
    MlaDecodeArgs a = d.args(false);
    a.q = TensorView::contiguous(a.q.data, c.dtype, {total_q, heads, test::kMlaQkDim});
    a.out = TensorView::contiguous(a.out.data, c.dtype, {total_q, heads, test::kMlaVDim});
    DeviceBuffer off_d((static_cast<size_t>(b) + 1) * 4);
    a.q_offsets = TensorView::contiguous(off_d.data(), DType::kI32, {b + 1});
    a.max_q_len = c.q_len;
    MlaDecodeShape shape = mla_decode_shape(a);
    const MlaDecodePlan plan = mla_decode_plan(shape, nullptr);
    DeviceBuffer ws_d(plan.workspace_bytes);
    const Workspace ws{plan.workspace_bytes ? ws_d.data() : nullptr, plan.workspace_bytes};
    auto run = [&](const std::vector<int32_t>& offsets) {
      off_d.upload(offsets);
      d.poison_outputs();
      ws_d.fill_byte(0xFF);
      mla_decode_schedule(plan, a, ws, nullptr);
      mla_decode(a, plan, ws, nullptr);
      test::synchronize();
      return d.download_out();
    };
    std::vector<int32_t> valid(static_cast<size_t>(b) + 1);
    for (int i = 0; i <= b; ++i) valid[static_cast<size_t>(i)] = i * c.q_len;
    const std::vector<float> good = run(valid);
    // 1 longer than max_q_len and past total_q; 2 decreasing; 3 decreasing to a negative
    // end; 4 negative both ends (clamped to an empty sequence at row 0). None reaches
    // sequence 0's rows once clamped.
    const std::vector<float> bad = run({0, c.q_len, INT32_MAX, 5, -7, -1});
    same_rows(good, bad, 0, static_cast<size_t>(c.q_len) * heads * test::kMlaVDim, false,
              fmt::format("mla_decode h{} ragged: sequence 0 beside hostile offsets", heads));
  }
}

TEST_CASE("mha_fwd unchecked: hostile lengths, table entries and offsets stay in bounds",
          "[gpu][mha_fwd][hostile]") {
  if (!test::gpu_or_skip()) return;
  using namespace attnjit::test::mha_gpu;
  const UncheckedScope unchecked;
  const int splits = GENERATE(1, 3);
  const size_t dv = 128, h = 4;

  SECTION("paged lengths and table entries") {
    MhaCase c = paged_case(false, 16, {8, 8, 8, 8}, {70, 33, 50, 17});
    c.mask = MaskKind::kCausal;
    const MhaFwdConfig cfg = config_for(c);
    MhaData d(c);
    const RunResult good = run_mha(d, cfg, {.num_splits = splits});
    judge(d, reference_for(d.problem()), good, "valid values");
    const MhaFwdArgs a = d.args(true);
    table_row_outside(a.block_table, 2, static_cast<int32_t>(a.k.shape[0]));
    poke(a.kv_lens, {70, INT32_MAX, 50, -3});
    const RunResult bad = run_mha(d, cfg, {.num_splits = splits});
    same_rows(good.out, bad.out, 0, 8 * h * dv, true,
              fmt::format("mha_fwd paged, {} splits: sequence 0 beside hostile lengths and table",
                          splits));
  }

  SECTION("ragged offsets") {
    MhaCase c = ragged_case({9, 20, 5, 12}, {40, 31, 64, 7});
    c.mask = MaskKind::kCausal;
    const MhaFwdConfig cfg = config_for(c);
    MhaData d(c);
    const RunResult good = run_mha(d, cfg, {.num_splits = splits});
    judge(d, reference_for(d.problem()), good, "valid values");
    const MhaFwdArgs a = d.args(true);
    const int32_t total_q = 46, total_k = 142;
    // Sequence 0 keeps rows [0, 9) and keys [0, 40); 1..3 run past the ends, decrease or
    // go negative (clamped, none reaches sequence 0's rows).
    poke(a.q_offsets, {0, 9, INT32_MAX, 20, total_q + 7});
    poke(a.k_offsets, {0, 40, -9, INT32_MIN, total_k * 2});
    const RunResult bad = run_mha(d, cfg, {.num_splits = splits});
    same_rows(good.out, bad.out, 0, 9 * h * dv, true,
              fmt::format("mha_fwd ragged, {} splits: sequence 0 beside hostile offsets", splits));
  }
}
