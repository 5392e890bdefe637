// mla_decode's balanced schedule: the work list the schedule kernel writes (every KV tile
// of every sequence exactly once, pieces within the bound, longest first, the layout's
// bounds kept), and the outputs on mixed-length batches against float64 and a static split.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "attnjit/ops/mla_decode.hpp"
#include "harness/problem.hpp"
#include "mla_decode/layout.cuh"
#include "support/catch.hpp"
#include "support/gpu.hpp"

using namespace attnjit;
using nlohmann::json;
namespace dev = attnjit::layout::mla_decode;

namespace {

// Just enough of a call for mla_decode_schedule: the schedule reads only the lengths.
struct ScheduleCall {
  test::DeviceBuffer q, cache, table, lens, out, ws;
  MlaDecodeArgs args;
  MlaDecodePlan plan;

  ScheduleCall(const std::vector<int32_t>& lengths, int heads, int q_len, int max_pages) {
    const int b = static_cast<int>(lengths.size()), page = 64;
    q = test::DeviceBuffer(static_cast<size_t>(b) * q_len * heads * kMlaHeadDim * 2);
    cache = test::DeviceBuffer(static_cast<size_t>(page) * kMlaHeadDim * 2);
    table = test::DeviceBuffer(static_cast<size_t>(b) * max_pages * 4);
    table.fill_byte(0);
    lens = test::DeviceBuffer(lengths.size() * 4);
    lens.upload(lengths);
    out = test::DeviceBuffer(static_cast<size_t>(b) * q_len * heads * kMlaValueDim * 2);
    args.q = TensorView::contiguous(q.data(), DType::kBF16, {b, q_len, heads, kMlaHeadDim});
    args.kv_cache = TensorView::contiguous(cache.data(), DType::kBF16, {1, page, kMlaHeadDim});
    args.block_table = TensorView::contiguous(table.data(), DType::kI32, {b, max_pages});
    args.cache_lens = TensorView::contiguous(lens.data(), DType::kI32, {b});
    args.out = TensorView::contiguous(out.data(), DType::kBF16, {b, q_len, heads, kMlaValueDim});
    args.softmax_scale = 0.1f;
    plan = mla_decode_plan(mla_decode_shape(args));
    REQUIRE(plan.balanced);
    ws = test::DeviceBuffer(plan.workspace_bytes);
    ws.fill_byte(0xFF);
    mla_decode_schedule(plan, args, {ws.data(), plan.workspace_bytes}, nullptr);
    test::synchronize();
    host.resize(plan.workspace_bytes);
    ws.download(host.data(), host.size());
  }

  template <typename T>
  std::vector<T> read(unsigned long long offset, size_t count) const {
    REQUIRE(offset + count * sizeof(T) <= host.size());
    std::vector<T> v(count);
    std::memcpy(v.data(), host.data() + offset, count * sizeof(T));
    return v;
  }

  std::vector<uint8_t> host;  // the workspace after the schedule
};

// Checks the work list of `lengths` against the rules in mla_decode/layout.cuh.
void check_schedule(const std::vector<int32_t>& lengths, int heads, int q_len, int max_pages) {
  const int b = static_cast<int>(lengths.size());
  INFO(fmt::format("b {} h {} q_len {} max_pages {}", b, heads, q_len, max_pages));
  ScheduleCall call(lengths, heads, q_len, max_pages);
  const int slots = call.plan.sm_slots;
  const dev::BalancedWorkspace w =
      dev::balanced_workspace(b, int64_t{q_len} * heads, slots);
  const dev::WorkCounts counts = call.read<dev::WorkCounts>(w.counts, 1)[0];
  const auto items = call.read<dev::WorkItem>(w.items, static_cast<size_t>(std::max(counts.items, 0)));
  const auto cuts = call.read<dev::SplitSeq>(w.split_seqs, static_cast<size_t>(std::max(counts.split_seqs, 0)));

  std::vector<int> tiles(static_cast<size_t>(b));
  int64_t total = 0;
  for (int i = 0; i < b; ++i) {
    const int len = std::clamp(lengths[static_cast<size_t>(i)], 0, max_pages * 64);
    tiles[static_cast<size_t>(i)] = (len + 63) / 64;
    total += tiles[static_cast<size_t>(i)];
  }
  const int cap = std::max<int>(dev::kMinPieceTiles, static_cast<int>(std::ceil(1.1 * total / slots)));
  CHECK(counts.items >= b);
  CHECK(counts.items < slots + b + 1);
  CHECK(counts.split_seqs <= slots);

  // Every tile of every sequence once, its pieces side by side in order; pieces within the
  // bound (one tile of float rounding allowed); listed by piece size, longest first.
  std::vector<int> next(static_cast<size_t>(b), 0), pieces(static_cast<size_t>(b), 0);
  std::vector<int> first_slot(static_cast<size_t>(b), -2);
  int last_key = INT32_MAX, pieces_total = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    const dev::WorkItem& it = items[k];
    INFO(fmt::format("item {}: batch {} tiles [{}, {}) slot {}", k, it.batch, it.tile_begin, it.tile_end, it.slot));
    REQUIRE((it.batch >= 0 && it.batch < b));
    const size_t i = static_cast<size_t>(it.batch);
    CHECK(it.tile_begin == next[i]);
    CHECK(it.tile_end >= it.tile_begin);
    CHECK(it.tile_end - it.tile_begin <= cap + 1);
    next[i] = it.tile_end;
    if (pieces[i] == 0) {
      const int key = it.tile_end - it.tile_begin;  // the first piece is the largest
      CHECK(key <= last_key);
      last_key = key;
      first_slot[i] = it.slot;
    } else {
      CHECK(items[k - 1].batch == it.batch);  // a sequence's pieces are side by side
      CHECK(it.slot == first_slot[i] + pieces[i]);
    }
    ++pieces[i];
    ++pieces_total;
  }
  CHECK(pieces_total == counts.items);
  int slots_used = 0;
  for (int i = 0; i < b; ++i) {
    INFO("sequence " << i << " of " << tiles[static_cast<size_t>(i)] << " tiles");
    CHECK(next[static_cast<size_t>(i)] == tiles[static_cast<size_t>(i)]);
    CHECK(pieces[static_cast<size_t>(i)] >= 1);
    if (pieces[static_cast<size_t>(i)] == 1) CHECK(first_slot[static_cast<size_t>(i)] == -1);
    if (pieces[static_cast<size_t>(i)] > 1) slots_used += pieces[static_cast<size_t>(i)];
  }
  CHECK(slots_used < 2 * slots);
  // The cut sequences, in sequence order, with their slots.
  int cut_index = 0, slot = 0;
  for (int i = 0; i < b; ++i) {
    if (pieces[static_cast<size_t>(i)] <= 1) continue;
    REQUIRE(cut_index < static_cast<int>(cuts.size()));
    const dev::SplitSeq& c = cuts[static_cast<size_t>(cut_index++)];
    CHECK(c.batch == i);
    CHECK(c.first_slot == slot);
    CHECK(c.first_slot == first_slot[static_cast<size_t>(i)]);
    CHECK(c.count == pieces[static_cast<size_t>(i)]);
    slot += c.count;
  }
  CHECK(cut_index == counts.split_seqs);
}

std::vector<int32_t> uniform_lens(int n, int lo, int hi) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(test::rng());
  return v;
}

}  // namespace

TEST_CASE("mla_decode's balanced schedule covers every tile once, within its bounds",
          "[gpu][mla_decode][balanced]") {
  if (!test::gpu_or_skip()) return;
  check_schedule({5000}, 128, 1, 100);                        // one sequence over every SM
  check_schedule({0, 0, 0}, 16, 1, 4);                        // nothing to read
  check_schedule(uniform_lens(128, 2048, 8192), 128, 1, 128); // mixed, no cut needed
  check_schedule(uniform_lens(128, 2048, 8192), 16, 2, 128);
  {
    std::vector<int32_t> tail(64, 1024);  // one long request among short ones
    tail[17] = 65536;
    check_schedule(tail, 16, 1, 1024);
  }
  {
    std::vector<int32_t> half(32, 512);  // half at 32768
    for (size_t i = 0; i < half.size(); i += 2) half[i] = 32768;
    check_schedule(half, 128, 1, 512);
  }
  // Lengths the kernel must clamp (negative, past the table's capacity), and a batch much
  // larger than the SM count.
  check_schedule({-5, 1 << 30, 3, 64, 65}, 8, 4, 16);
  check_schedule(uniform_lens(2000, 0, 3000), 8, 1, 47);
}

// The outputs: float64 on sampled rows (edge rows included), and the same answer as a
// static split of one partition to rounding; two balanced runs agree bit for bit.
TEST_CASE("mla_decode's balanced schedule matches float64 and a static split on mixed lengths",
          "[gpu][mla_decode][balanced]") {
  if (!test::gpu_or_skip()) return;
  const harness::ProblemKind& kind = harness::find_problem("mla_decode");
  const std::vector<json> cases = {
      {{"b", 64}, {"h", 16}, {"s_k", 16384}, {"short", 256}, {"long", 1}},                // long tail
      {{"b", 16}, {"h", 128}, {"q_len", 2}, {"s_k", 8192}, {"short", 128}, {"long", 8}},  // heavy half
      {{"b", 96}, {"h", 64}, {"s_k", 3000}, {"varlen", 1}, {"lse", 1}},
      {{"b", 1}, {"h", 8}, {"q_len", 4}, {"s_k", 20000}, {"lse", 1}},  // one sequence, cut
      {{"b", 200}, {"h", 16}, {"s_k", 700}, {"varlen", 1}},            // more sequences than SMs
  };
  for (const json& c : cases) {
    INFO(c.dump());
    const std::unique_ptr<harness::Problem> p = kind.make(c, test::rng()(), 0);
    const harness::Prepared balanced = p->prepare(nullptr);
    CHECK(balanced.num_splits == 0);  // no tuning database in the tests: balanced
    p->poison_output();
    balanced.run(0);
    const harness::Verdict v = p->check(64);
    fmt::print("mla_decode balanced [{}]: {}\n", p->describe(), v.summary);
    INFO(v.summary);
    CHECK(v.passed);
    const std::vector<uint8_t> first = p->output_bytes();
    p->poison_output();
    balanced.run(0);
    CHECK(p->output_bytes() == first);  // same schedule, same order of sums

    const json one = {{"num_splits", 1}};
    const harness::Prepared whole = p->prepare(&one);
    CHECK(whole.num_splits == 1);
    p->poison_output();
    whole.run(0);
    const std::string diff = p->compare(first, p->output_bytes());
    INFO(diff);
    CHECK(diff.empty());
  }
}
