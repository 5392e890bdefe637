// mha_fwd on the GPU against the float64 reference (harness/mha_reference.hpp).
// Every case uses fresh random inputs (never zeros), poisons out/lse/workspace with 0xFF
// (NaN) before each run, and fills every K/V row no sequence owns with NaN: in the paged
// pool the rows past each length and the unused pages (reached only through garbage table
// entries -1, INT32_MAX, the pool size, a spare page...), in ragged K/V a tail of rows past
// the last sequence. A kernel that reads a row it must not read, leaves an element
// unwritten or merges splits wrongly shows NaN or O(1) errors; bf16 rounding alone gives a
// relative L2 error of about 3e-3, f16 about 4e-4.
//
// Cost: the reference is the slow part, so shapes whose reference would take more than
// ~kFullReferenceWork multiply-adds check a random sample of rows plus every edge row.
// Variants are compiled up front on several threads (each compile is one NVRTC thread).
//
// This file: numerics over head dims, dtypes, masks, score mods, sinks, GQA and paged KV.
// Launch forms (block_m 192, persistent, splits, lse, long rows, CUDA graphs):
// test_mha_fwd_launch.cpp.
#include <functional>
#include <vector>

#include "gpu/mha_fwd_cases.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"

using namespace attnjit;
using namespace attnjit::test::mha_gpu;
using test::DeviceBuffer;
using test::MhaComparison;
using test::MhaProblem;
using test::MhaReference;

TEST_CASE("mha_fwd matches float64 for every head dim and dtype, s_q vs s_k both ways",
          "[gpu][mha_fwd]") {
  if (!test::gpu_or_skip()) return;
  std::vector<MhaCase> cases;
  for (auto [d, dv] : {std::pair{64, 64}, {128, 128}, {256, 256}, {192, 128}})
    for (DType dtype : {DType::kBF16, DType::kF16})
      for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal}) {
        // Equal odd lengths, more queries than keys (leading causal rows see nothing), and
        // fewer queries than keys (a prefill continuing a cache).
        const int s = odd_in(129, 400), big = odd_in(300, 500), small = odd_in(1, 90);
        for (auto [s_q, s_k] : {std::pair{s, s}, {big, odd_in(50, 200)}, {small, odd_in(300, 700)}}) {
          MhaCase c = padded_case(2, s_q, s_k);
          c.dtype = dtype;
          c.d = d;
          c.dv = dv;
          c.h_q = 4;
          c.h_kv = 2;
          c.mask = mask;
          cases.push_back(c);
        }
      }
  prepare_cases(cases);
  for (const auto& c : cases) check_case(c);
}

TEST_CASE("mha_fwd every mask with random parameters over ragged edge lengths", "[gpu][mha_fwd]") {
  if (!test::gpu_or_skip()) return;
  std::vector<MhaCase> cases;
  for (const int head_dim : {128, 64})
    for (int draw = 0; draw < 3; ++draw) {
      const auto lens = edge_lens();
      auto add = [&](MaskKind mask, int left, int right, int chunk) {
        MhaCase c = ragged_case(lens.first, lens.second);
        c.d = c.dv = head_dim;
        c.h_q = 6;
        c.h_kv = 3;
        c.mask = mask;
        c.window_left = left;
        c.window_right = right;
        c.chunk = chunk;
        cases.push_back(c);
      };
      add(MaskKind::kNone, -1, -1, 0);
      add(MaskKind::kCausal, -1, -1, 0);
      // Windows: small, tile-sized, one side unbounded, and the diagonal alone (0, 0).
      const int lefts[] = {rand_in(0, 40), rand_in(100, 300), -1};
      const int rights[] = {rand_in(0, 40), -1, rand_in(100, 300)};
      add(MaskKind::kWindow, lefts[draw], rights[draw], 0);
      if (draw == 0) add(MaskKind::kWindow, 0, 0, 0);
      add(MaskKind::kCausalWindow, draw == 2 ? -1 : lefts[draw], -1, 0);
      const int chunks[] = {rand_in(1, 20), 128, rand_in(129, 400)};
      add(MaskKind::kChunked, -1, -1, chunks[draw]);
    }
  prepare_cases(cases);
  for (const auto& c : cases) check_case(c);
}

TEST_CASE("mha_fwd softcap, ALiBi and sinks (±inf included)", "[gpu][mha_fwd]") {
  if (!test::gpu_or_skip()) return;
  std::vector<MhaCase> cases;
  for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow})
    for (bool ragged : {false, true}) {
      auto [ql, kl] = edge_lens();
      MhaCase base = ragged ? ragged_case(ql, kl) : padded_case(3, odd_in(100, 300), odd_in(100, 400));
      base.h_q = 8;
      base.h_kv = 2;
      base.mask = mask;
      base.window_left = rand_in(10, 200);
      base.window_right = rand_in(0, 50);
      MhaCase softcap = base;
      softcap.mod = ScoreMod::kSoftcap;
      softcap.softcap = std::uniform_real_distribution<float>(1.0f, 6.0f)(test::rng());  // bites
      softcap.scale = 0.3;  // peaked scores: the cap changes them a lot
      cases.push_back(softcap);
      MhaCase alibi = base;
      alibi.mod = ScoreMod::kAlibi;
      cases.push_back(alibi);
      MhaCase sink = base;
      sink.sink = SinkKind::kSpecial;
      cases.push_back(sink);
      MhaCase all = base;  // a mod and a sink together
      all.mod = ragged ? ScoreMod::kAlibi : ScoreMod::kSoftcap;
      all.softcap = 20.0f;
      all.sink = SinkKind::kRandom;
      cases.push_back(all);
    }
  prepare_cases(cases);
  for (const auto& c : cases) check_case(c);
}

TEST_CASE("mha_fwd GQA ratios 1..16, with and without packed groups", "[gpu][mha_fwd]") {
  if (!test::gpu_or_skip()) return;
  std::vector<MhaCase> cases;
  for (int ratio : {1, 2, 4, 8, 16})
    for (int group : {0, ratio}) {
      if (group == 1) continue;  // ratio 1: only the unpacked form exists
      // Decode-like (s_q 1 and 4, paged, causal: MTP) and a short prefill (s_q 70).
      for (int s_q : {1, 4, 70}) {
        MhaCase c = paged_case(false, 64, std::vector<int>(5, s_q),
                               {rand_in(s_q, 900), 0, s_q > 1 ? s_q - 1 : 1, 64, rand_in(1000, 2000)});
        c.h_kv = 2;
        c.h_q = 2 * ratio;
        c.group = group;
        c.mask = MaskKind::kCausal;
        cases.push_back(c);
      }
      MhaCase r = ragged_case({1, 0, 3, 130}, {700, 5, 0, 300});  // ragged q with contiguous K/V
      r.h_kv = 1;
      r.h_q = ratio;
      r.group = group;
      cases.push_back(r);
    }
  prepare_cases(cases);
  for (const auto& c : cases) check_case(c);
}

TEST_CASE("mha_fwd paged KV with page sizes 16, 64 and 256", "[gpu][mha_fwd]") {
  if (!test::gpu_or_skip()) return;
  std::vector<MhaCase> cases;
  for (int page : {16, 64, 256})
    for (bool ragged_q : {false, true}) {
      const std::vector<int> kl = {0, 1, page - 1, page + 1, 3 * page + 5, rand_in(1000, 2500)};
      const std::vector<int> ql =
          ragged_q ? std::vector<int>{2, 0, odd_in(1, 300), 1, 129, rand_in(1, 400)} : std::vector<int>(6, 3);
      MhaCase c = paged_case(ragged_q, page, ql, kl);
      c.h_q = 8;
      c.h_kv = 4;
      c.mask = ragged_q ? MaskKind::kCausal : MaskKind::kNone;
      c.extra_table = 3;
      cases.push_back(c);
    }
  {
    // Ragged q over tiny pages: a query with no key, a sequence with keys but no query.
    MhaCase none = paged_case(true, 16, {1, 0, 2}, {0, 3, 2});
    none.mask = MaskKind::kCausalWindow;
    none.window_left = 1;
    cases.push_back(none);
    MhaCase nokeys = paged_case(false, 64, {5, 5}, {0, 0});  // every row sees nothing
    nokeys.spare_pages = 2;
    cases.push_back(nokeys);
  }
  prepare_cases(cases);
  for (const auto& c : cases) {
    check_case(c);
    RunOptions o;
    o.num_splits = 3;  // split edges need not fall on page or tile edges
    check_case(c, o);
  }
  // Ragged contiguous K/V where every sequence is empty: only the NaN tail rows exist.
  MhaCase tail = ragged_case({3, 4}, {0, 0});
  prepare_cases({tail});
  check_case(tail);
}
