// mla_decode's balanced schedule: the work list the schedule kernel writes (every KV tile
// of every sequence exactly once, in the form the batch calls for, the layout's bounds kept), the outputs on mixed-length batches against float64 and a static split, and
// the batch-invariant option (invariant_tiles): a request's bits in any batch.
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
#include "support/errors.hpp"
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

// Checks the work list of `lengths` against the rules in mla_decode/layout.cuh and
// balance.cuh: every tile of every sequence once, a sequence's pieces side by side and in
// order, the cut sequences' slots, the bounds; and the form the batch calls for. Pieces
// (one per CTA): listed longest first, within the size bound. Packed (one row tile and
// more pieces than slots): in sequence order, one piece per CTA run a sequence reaches,
// each CTA's tiles within its equal share.
void check_schedule(const std::vector<int32_t>& lengths, int heads, int q_len, int max_pages) {
  const int b = static_cast<int>(lengths.size());
  INFO(fmt::format("b {} h {} q_len {} max_pages {}", b, heads, q_len, max_pages));
  ScheduleCall call(lengths, heads, q_len, max_pages);
  const int slots = call.plan.sm_slots;
  const dev::BalanceBounds bound = dev::balance_bounds(b, slots, 0, (max_pages * 64 + 63) / 64);
  const dev::BalancedWorkspace w = dev::balanced_workspace(b, int64_t{q_len} * heads, bound);
  const dev::WorkCounts counts = call.read<dev::WorkCounts>(w.counts, 1)[0];
  const auto items = call.read<dev::WorkItem>(w.items, static_cast<size_t>(std::max(counts.items, 0)));
  const auto cuts = call.read<dev::SplitSeq>(w.split_seqs, static_cast<size_t>(std::max(counts.split_seqs, 0)));
  const auto cta_first = call.read<int32_t>(w.cta_first, static_cast<size_t>(bound.ctas) + 1);

  std::vector<int> tiles(static_cast<size_t>(b));
  int64_t total = 0, cost = 0, lpt_items = 0;
  for (int i = 0; i < b; ++i) {
    const int len = std::clamp(lengths[static_cast<size_t>(i)], 0, max_pages * 64);
    tiles[static_cast<size_t>(i)] = (len + 63) / 64;
    total += tiles[static_cast<size_t>(i)];
    cost += tiles[static_cast<size_t>(i)] + dev::kSeqCostTiles;
  }
  const int cap = std::max<int>(dev::kMinPieceTiles, static_cast<int>(std::ceil(1.1 * total / slots)));
  for (int t : tiles) lpt_items += std::max(1, (t + cap - 1) / cap);
  CHECK(counts.items >= b);
  CHECK(counts.items < slots + b);
  CHECK(counts.split_seqs < slots);

  // CTA runs: from item 0 to the last, never decreasing.
  REQUIRE(cta_first.front() == 0);
  REQUIRE(cta_first.back() == counts.items);
  bool one_each = true;  // the pieces form: CTA k runs item k
  for (int k = 0; k < bound.ctas; ++k) {
    REQUIRE(cta_first[k] <= cta_first[k + 1]);
    one_each = one_each && cta_first[k] == std::min(k, counts.items);
  }
  const bool one_row_tile = int64_t{q_len} * heads <= 64;
  // The float bound may round the size by a tile: the form is judged away from the edge.
  if (!one_row_tile || lpt_items < slots - 2) CHECK(one_each);
  if (one_row_tile && lpt_items > slots + 2) CHECK(!one_each);
  const bool packed = !one_each;
  const int64_t share = (cost + slots - 1) / slots;
  std::vector<int> cta_of(items.size(), -1);
  for (int k = 0; k < bound.ctas; ++k) {
    INFO("CTA " << k << ": items [" << cta_first[k] << ", " << cta_first[k + 1] << ")");
    if (packed) CHECK((k < slots || cta_first[k] == cta_first[k + 1]));
    int64_t run = 0;
    for (int it = cta_first[k]; it < cta_first[k + 1]; ++it) {
      cta_of[static_cast<size_t>(it)] = k;
      run += items[static_cast<size_t>(it)].tile_end - items[static_cast<size_t>(it)].tile_begin;
    }
    if (packed) CHECK(run <= share);
  }

  // Every tile of every sequence once, its pieces side by side in order.
  std::vector<int> next(static_cast<size_t>(b), 0), pieces(static_cast<size_t>(b), 0);
  std::vector<int> first_slot(static_cast<size_t>(b), -2);
  int last_key = INT32_MAX;
  for (size_t k = 0; k < items.size(); ++k) {
    const dev::WorkItem& it = items[k];
    INFO(fmt::format("item {} (CTA {}): batch {} tiles [{}, {}) slot {}", k, cta_of[k], it.batch,
                     it.tile_begin, it.tile_end, it.slot));
    REQUIRE((it.batch >= 0 && it.batch < b));
    const size_t i = static_cast<size_t>(it.batch);
    CHECK(it.tile_begin == next[i]);
    CHECK(it.tile_end >= it.tile_begin);
    next[i] = it.tile_end;
    if (packed && k > 0) CHECK(items[k - 1].batch <= it.batch);  // sequence order
    if (!packed) CHECK(it.tile_end - it.tile_begin <= cap + 1);
    if (pieces[i] == 0) {
      first_slot[i] = it.slot;
      if (!packed) {  // the first piece is the sequence's largest: longest first
        const int key = it.tile_end - it.tile_begin;
        CHECK(key <= last_key);
        last_key = key;
      }
    } else {
      CHECK(items[k - 1].batch == it.batch);  // a sequence's pieces are side by side
      CHECK(it.slot == first_slot[i] + pieces[i]);
      if (packed) {
        CHECK(cta_of[k] == cta_of[k - 1] + 1);  // one piece per CTA run it reaches
        CHECK(it.tile_end > it.tile_begin);     // a cut never leaves an empty piece
      }
    }
    ++pieces[i];
  }
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
  check_schedule(uniform_lens(128, 2048, 8192), 16, 2, 128);  // one row tile: packed
  check_schedule(std::vector<int32_t>(128, 4096), 64, 1, 64);   // one wave of pieces
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
// static split of one partition to rounding; two balanced runs agree bit for bit; the
// batch-invariant pieces against float64 too.
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
    // Runs `prepared` on poisoned output and checks it against float64.
    auto run_checked = [&p](const harness::Prepared& prepared, const char* label) {
      p->poison_output();
      prepared.run(0);
      const harness::Verdict v = p->check(64);
      fmt::print("mla_decode {} [{}]: {}\n", label, p->describe(), v.summary);
      INFO(v.summary);
      CHECK(v.passed);
    };
    const harness::Prepared balanced = p->prepare(nullptr);
    CHECK(balanced.num_splits == 0);  // no tuning database in the tests: balanced
    run_checked(balanced, "balanced");
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

    // Batch-invariant pieces of 4 tiles: float64 again (every sequence of 256+ keys is cut).
    const json invariant = {{"invariant_tiles", 4}};
    const harness::Prepared fixed = p->prepare(&invariant);
    CHECK(fixed.num_splits == 0);
    run_checked(fixed, "invariant_tiles 4");
  }
}

namespace {

// Requests that share one page pool, each with its own pages and queries, so the same
// request can be put in different batches (other requests, positions and table widths).
struct RequestPool {
  static constexpr int kPage = 64, kHeads = 16, kQLen = 2;
  std::vector<int32_t> lens;
  std::vector<std::vector<int32_t>> pages;  // per request
  std::vector<uint16_t> q;                  // [requests, q_len, h, 576] bf16 bits
  test::DeviceBuffer pool;

  explicit RequestPool(std::vector<int32_t> lengths) : lens(std::move(lengths)) {
    int next = 0;
    for (int32_t len : lens) {
      std::vector<int32_t> p(static_cast<size_t>(std::max(1, (len + kPage - 1) / kPage)));
      for (auto& x : p) x = next++;
      pages.push_back(std::move(p));
    }
    std::normal_distribution<float> n(0.f, 1.f);
    // Rows past a request's length hold NaN: they must not reach any output.
    std::vector<uint16_t> rows(static_cast<size_t>(next) * kPage * kMlaHeadDim, 0xFFFF);
    for (size_t r = 0; r < lens.size(); ++r)
      for (int t = 0; t < lens[r]; ++t) {
        const size_t row = static_cast<size_t>(pages[r][static_cast<size_t>(t / kPage)]) * kPage + t % kPage;
        for (int d = 0; d < kMlaHeadDim; ++d) rows[row * kMlaHeadDim + d] = test::float_to_bf16(n(test::rng()));
      }
    pool = test::DeviceBuffer(rows.size() * 2);
    pool.upload(rows);
    q.resize(lens.size() * kQLen * kHeads * kMlaHeadDim);
    for (auto& x : q) x = test::float_to_bf16(n(test::rng()));
  }

  // One batch of `members` (request indices), block tables `max_pages` wide; each
  // member's out [q_len, h, 512] bf16 then lse [h, q_len] f32, as bytes.
  std::vector<std::vector<uint8_t>> run(const std::vector<int>& members, int max_pages,
                                        int invariant_tiles) const {
    const int b = static_cast<int>(members.size());
    const size_t q_row = size_t{kQLen} * kHeads * kMlaHeadDim, out_row = size_t{kQLen} * kHeads * kMlaValueDim,
                 lse_row = size_t{kQLen} * kHeads;
    std::vector<uint16_t> qb;
    std::vector<int32_t> table(static_cast<size_t>(b) * max_pages, 0), blens;
    for (int i = 0; i < b; ++i) {
      const size_t r = static_cast<size_t>(members[static_cast<size_t>(i)]);
      qb.insert(qb.end(), q.begin() + static_cast<std::ptrdiff_t>(r * q_row),
                q.begin() + static_cast<std::ptrdiff_t>((r + 1) * q_row));
      REQUIRE(pages[r].size() <= static_cast<size_t>(max_pages));
      std::copy(pages[r].begin(), pages[r].end(), table.begin() + static_cast<std::ptrdiff_t>(i) * max_pages);
      blens.push_back(lens[r]);
    }
    test::DeviceBuffer qd(qb.size() * 2), td(table.size() * 4), ld(blens.size() * 4),
        od(b * out_row * 2), sd(b * lse_row * 4);
    qd.upload(qb);
    td.upload(table);
    ld.upload(blens);
    od.fill_byte(0xFF);
    sd.fill_byte(0xFF);
    MlaDecodeArgs a;
    a.q = TensorView::contiguous(qd.data(), DType::kBF16, {b, kQLen, kHeads, kMlaHeadDim});
    const int pool_pages = static_cast<int>(pool.bytes() / (2 * kPage * kMlaHeadDim));
    a.kv_cache = TensorView::contiguous(pool.data(), DType::kBF16, {pool_pages, kPage, kMlaHeadDim});
    a.block_table = TensorView::contiguous(td.data(), DType::kI32, {b, max_pages});
    a.cache_lens = TensorView::contiguous(ld.data(), DType::kI32, {b});
    a.out = TensorView::contiguous(od.data(), DType::kBF16, {b, kQLen, kHeads, kMlaValueDim});
    a.lse = TensorView::contiguous(sd.data(), DType::kF32, {b, kHeads, kQLen});
    a.softmax_scale = 0.0721f;
    const MlaDecodeShape shape = mla_decode_shape(a);
    MlaDecodeConfig config = mla_decode_selected_config(shape);
    config.invariant_tiles = invariant_tiles;
    const MlaDecodePlan plan = mla_decode_plan(shape, &config);
    REQUIRE(plan.balanced);
    test::DeviceBuffer ws(std::max<size_t>(plan.workspace_bytes, 1));
    ws.fill_byte(0xFF);
    const Workspace w{ws.data(), plan.workspace_bytes};
    mla_decode_schedule(plan, a, w, nullptr);
    mla_decode(a, plan, w, nullptr);
    test::synchronize();
    const auto out = od.download_as<uint8_t>(od.bytes());
    const auto lse = sd.download_as<uint8_t>(sd.bytes());
    std::vector<std::vector<uint8_t>> per(static_cast<size_t>(b));
    for (size_t i = 0; i < per.size(); ++i) {
      per[i].assign(out.begin() + static_cast<std::ptrdiff_t>(i * out_row * 2),
                    out.begin() + static_cast<std::ptrdiff_t>((i + 1) * out_row * 2));
      per[i].insert(per[i].end(), lse.begin() + static_cast<std::ptrdiff_t>(i * lse_row * 4),
                    lse.begin() + static_cast<std::ptrdiff_t>((i + 1) * lse_row * 4));
      for (size_t k = 0; k + 1 < out_row * 2; k += 2)  // written, and no NaN leaked
        if (per[i][k + 1] == 0xFF && per[i][k] == 0xFF) FAIL("request row left poisoned or NaN");
    }
    return per;
  }
};

}  // namespace

// With invariant_tiles set, a request's pieces depend on its own length only, so its output
// bits are the same alone, in one batch and in another (other requests beside it, another
// order, a wider block table). Without it the balanced shares follow the batch's total, and
// the same comparison shows different bits: the test can tell the two apart.
TEST_CASE("mla_decode with invariant_tiles gives a request the same bits in any batch",
          "[gpu][mla_decode][balanced]") {
  if (!test::gpu_or_skip()) return;
  // Requests 0..8 are compared; 9..12 only change the batch around them.
  const RequestPool pool({0, 1, 2, 63, 65, 700, 4097, 20000, 9000, 60000, 3000, 3000, 31000});
  const int compared = 9;
  std::vector<int> batch_a(static_cast<size_t>(compared));
  std::iota(batch_a.begin(), batch_a.end(), 0);
  const std::vector<int> batch_b = {12, 8, 9, 7, 6, 10, 5, 4, 3, 11, 2, 1, 0};
  auto position = [](const std::vector<int>& batch, int r) {
    return static_cast<size_t>(std::find(batch.begin(), batch.end(), r) - batch.begin());
  };
  for (int tiles : {8, 32}) {
    INFO("invariant_tiles " << tiles);
    const auto a = pool.run(batch_a, 320, tiles);
    const auto b = pool.run(batch_b, 1000, tiles);
    for (int r = 0; r < compared; ++r) {
      INFO("request " << r << " of length " << pool.lens[static_cast<size_t>(r)]);
      CHECK(a[position(batch_a, r)] == b[position(batch_b, r)]);
      const int own_pages = static_cast<int>(pool.pages[static_cast<size_t>(r)].size());
      CHECK(pool.run({r}, own_pages, tiles)[0] == a[position(batch_a, r)]);
    }
  }
  // The plan refuses a piece size that cuts the table's capacity into more pieces than the
  // combine merges, and a forced static split beside it.
  {
    test::DeviceBuffer q(size_t{2} * 16 * kMlaHeadDim * 2), table(size_t{2} * 1024 * 4), lens(8),
        out(size_t{2} * 16 * kMlaValueDim * 2);
    MlaDecodeArgs c;
    c.q = TensorView::contiguous(q.data(), DType::kBF16, {2, 1, 16, kMlaHeadDim});
    c.kv_cache = TensorView::contiguous(pool.pool.data(), DType::kBF16, {1, 64, kMlaHeadDim});
    c.block_table = TensorView::contiguous(table.data(), DType::kI32, {2, 1024});
    c.cache_lens = TensorView::contiguous(lens.data(), DType::kI32, {2});
    c.out = TensorView::contiguous(out.data(), DType::kBF16, {2, 1, 16, kMlaValueDim});
    c.softmax_scale = 0.1f;
    MlaDecodeShape shape = mla_decode_shape(c);
    MlaDecodeConfig config = mla_decode_selected_config(shape);
    config.invariant_tiles = 1;  // 1024 pieces per sequence
    REQUIRE_ERROR(mla_decode_plan(shape, &config), ErrorKind::kUnsupportedConfig,
                  "mla_decode.invariant_tiles", "1024 pieces per sequence", "at most 512");
    config.invariant_tiles = 2;  // 512: the most the combine merges
    CHECK(mla_decode_plan(shape, &config).balanced);
    shape.num_splits = 4;
    REQUIRE_ERROR(mla_decode_plan(shape, &config), ErrorKind::kBadArgument, "shape.num_splits",
                  "must be 0 with a batch-invariant config");
  }
  // The balanced shares (invariant_tiles 0): request 7 (20000 keys) is cut by the batch's
  // total, so its bits differ between the two batches.
  const auto a = pool.run(batch_a, 320, 0);
  const auto b = pool.run(batch_b, 1000, 0);
  CHECK(a[position(batch_a, 7)] != b[position(batch_b, 7)]);
}
