// mha_fwd's runtime selection with a tuning database of this GPU: mha_fwd_selected_config
// takes the winner's tile for the bucket and keeps the shape's features, and mha_fwd_plan
// the winner's split count on a decode-like bucket when the shape leaves it to the op. No
// kernel runs: the device's identity is needed, and the plans load their kernels.
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

}  // namespace

TEST_CASE("tune gpu: mha_fwd_selected_config and mha_fwd_plan use this GPU's DB entry",
          "[gpu][tune]") {
  if (!test::gpu_or_skip()) return;
  test::ScratchDir dir;
  const std::string path = (dir.path / "tuning.json").string();
  const driver::DeviceInfo& info = driver::cached_device_info(driver::current_device());

  MhaFwdConfig prefill = mha_fwd_default_config({.mask = MaskKind::kCausal});
  prefill.block_n = 128;
  prefill.stages = 3;
  MhaFwdConfig decode = mha_fwd_default_config({.mask = MaskKind::kCausal});
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

  // Prefill, 6000 tokens (bucket s=2^13): the tile, with the shape's sink kept.
  const MhaFwdShape a{.features = {.mask = MaskKind::kCausal, .sink = true},
                      .batch = 4,
                      .max_seqlen_q = 6000,
                      .max_seqlen_k = 6000,
                      .total_q = 4 * 6000,
                      .h_q = 16,
                      .h_kv = 16};
  const MhaFwdConfig base = mha_fwd_default_config(a.features);
  CHECK(base.sink);
  MhaFwdConfig want = base;
  want.block_n = 128;
  want.stages = 3;
  CHECK(mha_fwd_selected_config(a) == want);
  MhaFwdShape window = a;
  window.features.mask = MaskKind::kWindow;
  CHECK(mha_fwd_selected_config(window) == mha_fwd_default_config(window.features));  // other masks: never the DB's
  MhaFwdShape plain = a;
  plain.features.mask = MaskKind::kNone;
  CHECK(mha_fwd_selected_config(plain) == mha_fwd_default_config(plain.features));  // another bucket (causal=0): none

  // Decode, b 64 (bucket b=2^6): tile and split count; a forced count wins; b 200: none.
  MhaFwdShape q{.features = {.mask = MaskKind::kCausal, .group = 8},
                .batch = 64,
                .max_seqlen_q = 1,
                .max_seqlen_k = 20000,
                .total_q = 64,
                .h_q = 16,
                .h_kv = 2};
  const MhaFwdConfig dbase = mha_fwd_default_config(q.features);
  CHECK_FALSE(dbase.persistent);  // packed groups run the grid launch
  const MhaFwdConfig picked = mha_fwd_selected_config(q);
  CHECK(picked.block_n == 64);
  CHECK(picked.stages == 2);
  CHECK(picked.group == 8);
  CHECK(mha_fwd_plan(q).num_splits == 4);
  CHECK(mha_fwd_plan(q, &dbase).num_splits == 4);  // the bucket's count, whatever the tile
  q.num_splits = 3;
  CHECK(mha_fwd_plan(q, &picked).num_splits == 3);
  q.num_splits = 0;
  q.batch = q.total_q = 200;
  CHECK(mha_fwd_selected_config(q) == dbase);
  CHECK(mha_fwd_plan(q, &dbase).num_splits != 4);  // 200 × 2 CTAs fill the GPU: the heuristic's 1

  // Without the database: the default config and the heuristic's splits.
  test::ScopedEnv off("ATTNJIT_TUNING_DB", "off");
  reload_tuning_db();
  CHECK(mha_fwd_selected_config(a) == base);
  reload_tuning_db();
}
