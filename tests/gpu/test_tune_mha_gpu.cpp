// mha_fwd's runtime selection with a tuning database of this GPU: mha_fwd_selected_config
// takes the winner's tile for the bucket and keeps the caller's features, and
// mha_fwd_num_splits (hence mha_fwd) the winner's split count on a decode-like bucket when
// the call leaves it to the op. No kernel runs: only the device's identity is needed.
#include <filesystem>

#include "attnjit/ops/mha_fwd.hpp"
#include "attnjit/tuning.hpp"
#include "cpu/test_cache_support.hpp"
#include "driver/driver.hpp"
#include "ops/mha_fwd/config.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"
#include "tuning/db.hpp"

using namespace attnjit;
using nlohmann::json;

namespace {

tuning::Entry mha_entry(const std::string& bucket, const json& shape, const MhaFwdConfig& best,
                        int splits) {
  tuning::Entry e;
  e.op = "mha_fwd";
  e.bucket = bucket;
  e.shape = shape;  // the DB refuses an entry without its swept shape (as a corrupt file)
  e.best = json::parse(best.to_json());
  e.best["num_splits"] = splits;
  e.best_us = 1;
  e.default_candidate = e.best;
  e.default_us = 2;
  e.updated = 1;
  return e;
}

// Shapes only: the checks before a launch never read the memory.
void* fake(size_t i) { return reinterpret_cast<void*>(uintptr_t{1} << 20 << i); }

}  // namespace

TEST_CASE("tune gpu: mha_fwd_selected_config and mha_fwd_num_splits use this GPU's DB entry",
          "[gpu][tune]") {
  if (!test::gpu_or_skip()) return;
  test::ScratchDir dir;
  const std::string path = (dir.path / "tuning.json").string();
  const driver::DeviceInfo& info = driver::cached_device_info(driver::current_device());
  const int dev = static_cast<int>(driver::current_device());

  MhaFwdConfig prefill = mha_fwd_default_config(DType::kBF16, 128, 128, MaskKind::kCausal, false,
                                                KvLayout::kContiguous, 0);
  prefill.block_n = 128;
  prefill.stages = 3;
  MhaFwdConfig decode = mha_fwd_default_config(DType::kBF16, 128, 128, MaskKind::kCausal, false,
                                               KvLayout::kContiguous, 0);
  decode.group = 8;
  decode.block_n = 64;
  decode.stages = 2;
  tuning::Db d;
  d.environments.push_back(
      {tuning::fingerprint_of(info),
       {mha_entry("bf16 d=128 dv=128 causal=1 group=0 h=16 h_kv=16 s_q=2^13 s_k=2^13",
                  {{"b", 4}, {"s_q", 8192}, {"s_k", 8192}, {"h", 16}, {"h_kv", 16}, {"d", 128},
                   {"dv", 128}, {"causal", 1}, {"dtype", "bf16"}, {"group", 0}},
                  prefill, 0),
        mha_entry("bf16 d=128 dv=128 causal=1 group=8 h=16 h_kv=2 s_q=2^0 s_k=2^15 b=2^6",
                  {{"b", 64}, {"s_q", 1}, {"s_k", 32768}, {"h", 16}, {"h_kv", 2}, {"d", 128},
                   {"dv", 128}, {"causal", 1}, {"dtype", "bf16"}, {"group", 8}},
                  decode, 4)}});
  tuning::save_merged(path, d);
  test::ScopedEnv env("ATTNJIT_TUNING_DB", path.c_str());
  reload_tuning_db();

  // Prefill, 6000 tokens (bucket s=2^13): the tile, with the caller's sink kept.
  MhaFwdConfig base = mha_fwd_default_config(DType::kBF16, 128, 128, MaskKind::kCausal, false,
                                             KvLayout::kContiguous, 0);
  base.sink = true;
  MhaFwdArgs a;
  a.q = TensorView::contiguous(fake(0), DType::kBF16, {4, 6000, 16, 128}, dev);
  a.k = TensorView::contiguous(fake(1), DType::kBF16, {4, 6000, 16, 128}, dev);
  a.v = TensorView::contiguous(fake(2), DType::kBF16, {4, 6000, 16, 128}, dev);
  a.out = TensorView::contiguous(fake(3), DType::kBF16, {4, 6000, 16, 128}, dev);
  a.sink = TensorView::contiguous(fake(4), DType::kF32, {16}, dev);
  a.softmax_scale = 0.088f;
  MhaFwdConfig want = base;
  want.block_n = 128;
  want.stages = 3;
  CHECK(mha_fwd_selected_config(a, base) == want);
  MhaFwdConfig window = base;
  window.mask = MaskKind::kWindow;
  CHECK(mha_fwd_selected_config(a, window) == window);  // other masks: never the DB's
  MhaFwdConfig plain = base;
  plain.mask = MaskKind::kNone;
  CHECK(mha_fwd_selected_config(a, plain) == plain);  // another bucket (causal=0): none

  // Decode, b 64 (bucket b=2^6): tile and split count; a forced count wins; b 200: none.
  MhaFwdConfig dbase = mha_fwd_default_config(DType::kBF16, 128, 128, MaskKind::kCausal, false,
                                              KvLayout::kContiguous, 0);
  dbase.group = 8;
  dbase = ops::mha_grid_for_packed_groups(dbase);  // packed groups run the grid launch
  MhaFwdArgs q;
  q.q = TensorView::contiguous(fake(0), DType::kBF16, {64, 1, 16, 128}, dev);
  q.k = TensorView::contiguous(fake(1), DType::kBF16, {64, 20000, 2, 128}, dev);
  q.v = TensorView::contiguous(fake(2), DType::kBF16, {64, 20000, 2, 128}, dev);
  q.out = TensorView::contiguous(fake(3), DType::kBF16, {64, 1, 16, 128}, dev);
  q.softmax_scale = 0.088f;
  const MhaFwdConfig picked = mha_fwd_selected_config(q, dbase);
  CHECK(picked.block_n == 64);
  CHECK(picked.stages == 2);
  CHECK(picked.group == 8);
  CHECK(mha_fwd_num_splits(q, picked) == 4);
  CHECK(mha_fwd_num_splits(q, dbase) == 4);  // the bucket's count, whatever the tile
  q.num_splits = 3;
  CHECK(mha_fwd_num_splits(q, picked) == 3);
  q.num_splits = 0;
  for (TensorView* t : {&q.q, &q.out}) t->shape[0] = 200;
  for (TensorView* t : {&q.k, &q.v}) t->shape[0] = 200;
  CHECK(mha_fwd_selected_config(q, dbase) == dbase);
  CHECK(mha_fwd_num_splits(q, dbase) != 4);  // 200 × 2 CTAs fill the GPU: the heuristic's 1

  // Without the database: the caller's config and the heuristic's splits.
  test::ScopedEnv off("ATTNJIT_TUNING_DB", "off");
  reload_tuning_db();
  CHECK(mha_fwd_selected_config(a, base) == base);
  reload_tuning_db();
}
