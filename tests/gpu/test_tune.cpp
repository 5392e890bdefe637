// `attnjit tune` on the GPU: a sweep over a small tma_copy space completes and the runtime
// then uses its winner for calls without a config; candidates of the test-only tune_probe
// family that compute the wrong answer are rejected, and ones that fault, trap or hang are
// isolated in their worker process (fresh worker after each) without stopping the sweep;
// a worker that cannot start retires its device with a clear error.
#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "attnjit/error.hpp"
#include "attnjit/ops/tma_copy.hpp"
#include "attnjit/tuning.hpp"
#include "cpu/test_cache_support.hpp"
#include "driver/driver.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"
#include "support/tune_probe.hpp"
#include "tune/sweep.hpp"
#include "tuning/db.hpp"

using namespace attnjit;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Points the process's tuning lookup at `path` for the scope, then back.
struct UseDb {
  test::ScopedEnv env;
  explicit UseDb(const std::string& path) : env("ATTNJIT_TUNING_DB", path.c_str()) { reload_tuning_db(); }
  ~UseDb() { reload_tuning_db(); }
};

std::map<std::string, std::string> status_by_change(const tune::ShapeResult& r) {
  std::map<std::string, std::string> out;
  for (const tune::CandidateResult& c : r.results)
    out[tune::describe_change(c.candidate, r.space.default_candidate)] = c.status;
  return out;
}

bool copy_is_exact(int64_t rows, int64_t cols) {
  const size_t bytes = static_cast<size_t>(rows * cols * 2);
  std::vector<uint8_t> host(bytes);
  for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<uint8_t>(i * 131 + 7);
  test::DeviceBuffer src(bytes), dst(bytes);
  src.upload(host.data(), bytes);
  dst.fill_byte(0);
  tma_copy({TensorView::contiguous(dst.data(), DType::kBF16, {rows, cols}),
            TensorView::contiguous(src.data(), DType::kBF16, {rows, cols})},
           nullptr, nullptr);
  test::synchronize();
  std::vector<uint8_t> back(bytes);
  dst.download(back.data(), bytes);
  return back == host;
}

}  // namespace

TEST_CASE("tune gpu: a small tma_copy sweep completes and tma_copy(nullptr) uses its winner",
          "[gpu][tune]") {
  if (!test::gpu_or_skip()) return;
  test::ScratchDir dir;
  const std::string db = (dir.path / "tuning.json").string();
  tune::SweepOptions o;
  o.op = &ops::find_op("tma_copy");
  o.shapes = {{{"rows", 2048}, {"cols", 2048}, {"dtype", "bf16"}}};
  o.space = json{{"block_m", {64, 128}}, {"stages", {2, 4}}, {"swizzle", {"none", "128B"}}};
  o.db_path = db;
  o.cache_dir = dir.root();
  o.iters = 10;
  o.warmup = 2;
  o.jobs = 2;
  o.timeout_s = 60;
  o.progress = false;
  o.worker_argv = {ATTNJIT_CLI_PATH, "tune-worker"};  // the product's worker subcommand
  const tune::SweepResult r = tune::run_sweep(o);
  REQUIRE(r.shapes.size() == 1);
  const tune::ShapeResult& s = r.shapes[0];
  INFO(tune::to_text(r));
  CHECK(s.results.size() == 8);  // the default (block_m 128, stages 4, none) is one of the 8
  for (const tune::CandidateResult& c : s.results) {
    CHECK(c.status == "ok");
    CHECK(c.us > 0);
  }
  REQUIRE(s.best >= 0);
  CHECK(s.default_us() > 0);
  const json best = s.results[static_cast<size_t>(s.best)].candidate;

  // The database holds the entry under this GPU's fingerprint.
  const tuning::Db saved = tuning::read_db(db);
  REQUIRE(saved.environments.size() == 1);
  const driver::DeviceInfo& info = driver::cached_device_info(driver::current_device());
  CHECK(saved.environments[0].fingerprint.gpu == info.name);
  CHECK(saved.environments[0].fingerprint.sm_count == info.sm_count);
  REQUIRE(saved.environments[0].entries.size() == 1);
  CHECK(saved.environments[0].entries[0].bucket == "bf16 rows=2^11 cols=2^11");
  CHECK(saved.environments[0].entries[0].best == best);
  CHECK(saved.environments[0].entries[0].timings.size() == 8);

  UseDb use(db);
  const TmaCopyConfig want = TmaCopyConfig::from_json(best.dump());
  CHECK(tma_copy_selected_config({DType::kBF16, 2048, 2048}) == want);
  CHECK(tma_copy_selected_config({DType::kBF16, 1500, 1100}) == want);  // same bucket
  CHECK(tma_copy_selected_config({DType::kBF16, 4096, 2048}) == tma_copy_default_config(DType::kBF16));
  CHECK(tma_copy_selected_config({DType::kE4M3, 2048, 2048}) == tma_copy_default_config(DType::kE4M3));
  CHECK(copy_is_exact(2048, 2048));
  CHECK(copy_is_exact(1500, 1104));
}

TEST_CASE("tune gpu: the runtime picks a non-default DB winner, and ignores another GPU's", "[gpu][tune]") {
  if (!test::gpu_or_skip()) return;
  test::ScratchDir dir;
  const std::string db = (dir.path / "tuning.json").string();
  const driver::DeviceInfo& info = driver::cached_device_info(driver::current_device());
  TmaCopyConfig winner = tma_copy_default_config(DType::kBF16);
  winner.block_m = 64;
  winner.block_n = 64;
  winner.stages = 3;
  winner.swizzle = Swizzle::k128B;
  tuning::Entry e;
  e.op = "tma_copy";
  e.bucket = "bf16 rows=2^12 cols=2^12";
  e.shape = {{"rows", 4096}, {"cols", 4096}, {"dtype", "bf16"}};
  e.best = json::parse(winner.to_json());
  e.best_us = 1;
  e.default_candidate = json::parse(tma_copy_default_config(DType::kBF16).to_json());
  e.default_us = 2;
  e.updated = 1;
  tuning::Db d;
  d.environments.push_back({tuning::fingerprint_of(info), {e}});
  tuning::save_merged(db, d);
  {
    UseDb use(db);
    CHECK(tma_copy_selected_config({DType::kBF16, 4096, 4096}) == winner);
    CHECK(tma_copy_selected_config({DType::kBF16, 3000, 4000}) == winner);
    CHECK(copy_is_exact(3000, 4000));
  }
  // Tuned on another GPU: the heuristic (and one warning naming the file, on stderr).
  tuning::Db other;
  tuning::Fingerprint f = tuning::fingerprint_of(info);
  f.gpu = "Some Other GPU";
  other.environments.push_back({f, {e}});
  const std::string db2 = (dir.path / "other.json").string();
  tuning::save_merged(db2, other);
  UseDb use(db2);
  CHECK(tma_copy_selected_config({DType::kBF16, 4096, 4096}) == tma_copy_default_config(DType::kBF16));
  CHECK(copy_is_exact(4096, 4096));
}

TEST_CASE("tune gpu: wrong, faulting, trapping and hanging candidates are rejected or isolated",
          "[gpu][tune]") {
  if (!test::gpu_or_skip()) return;
  test::ScratchDir dir;
  tune::SweepOptions o;
  o.op = &test::tune_probe_op();
  o.shapes = {{{"n", 1 << 20}}};
  // A good candidate after each bad one: the sweep must go on with a fresh worker.
  o.space = json::array({json{{"mode", 1}}, json{{"mode", 0}, {"threads", 128}}, json{{"mode", 2}},
                         json{{"mode", 0}, {"threads", 512}}, json{{"mode", 3}},
                         json{{"mode", 0}, {"threads", 1024}}, json{{"mode", 4}},
                         json{{"mode", 0}, {"threads", 64}}});
  o.db_path = (dir.path / "tuning.json").string();
  o.cache_dir = dir.root();
  o.iters = 5;
  o.warmup = 1;
  o.timeout_s = 8;  // the hanging candidate costs this much
  o.progress = false;
  o.worker_argv = {ATTNJIT_TUNE_TEST_WORKER, "tune-worker"};
  const tune::SweepResult r = tune::run_sweep(o);
  REQUIRE(r.shapes.size() == 1);
  INFO(tune::to_text(r));
  const auto st = status_by_change(r.shapes[0]);
  CHECK(st.at("default") == "ok");
  CHECK(st.at("mode=1") == "mismatch");
  CHECK(st.at("mode=2") == "fault");
  CHECK(st.at("mode=3") == "fault");
  CHECK(st.at("mode=4") == "timeout");
  for (int t : {128, 512, 1024, 64}) CHECK(st.at(fmt::format("threads={}", t)) == "ok");
  for (const tune::CandidateResult& c : r.shapes[0].results)
    if (c.status == "fault") CHECK(c.error.find("CUDA_ERROR_") != std::string::npos);
  REQUIRE(r.shapes[0].best >= 0);
  CHECK(r.shapes[0].results[static_cast<size_t>(r.shapes[0].best)].candidate["mode"] == 0);
  // Only correct candidates can win; every result is in the database.
  const tuning::Db db = tuning::read_db(o.db_path);
  REQUIRE(db.environments.size() == 1);
  CHECK(db.environments[0].entries.at(0).best["mode"] == 0);
  CHECK(db.environments[0].entries.at(0).timings.size() == 9);
}

TEST_CASE("tune gpu: a worker that cannot start retires its device and the sweep says so",
          "[gpu][tune]") {
  if (!test::gpu_or_skip()) return;
  test::ScratchDir dir;
  tune::SweepOptions o;
  o.op = &ops::find_op("tma_copy");
  o.shapes = {{{"rows", 256}, {"cols", 256}}};
  o.space = json::array({json{{"stages", 2}}});
  o.cache_dir = dir.root();
  o.progress = false;
  o.worker_argv = {(dir.path / "no-such-worker").string(), "tune-worker"};
  try {
    tune::run_sweep(o);
    FAIL("the sweep ran without a worker");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("no device could run the sweep") != std::string::npos);
    CHECK(std::string(e.what()).find("exit status 127") != std::string::npos);
  }
}
