// The tuning database on the CPU: JSON round trip, merge rules, saves from several
// processes and threads at once (no entry lost, no torn file), corrupt files (one warning
// naming the file, then ignored; never silently overwritten), the fingerprint rules of the
// runtime lookup, bucket lookup, and where the file lives.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <thread>

#include <fmt/format.h>

#include <atomic>

#include "attnjit/error.hpp"
#include "attnjit/ops/mla_decode.hpp"
#include "attnjit/ops/tma_copy.hpp"
#include "attnjit/tuning.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "test_cache_support.hpp"
#include "tuning/db.hpp"

using namespace attnjit;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

tuning::Fingerprint fp(const std::string& gpu = "NVIDIA H100 80GB HBM3", int sms = 132,
                       const std::string& version = tuning::attnjit_version(), int driver = 13000) {
  return {gpu, sms, "sm_90a", driver, "13.0", version};
}

tuning::Entry entry(const std::string& op, const std::string& bucket, int block_m = 64,
                    int64_t updated = 1000) {
  tuning::Entry e;
  e.op = op;
  e.bucket = bucket;
  e.shape = {{"rows", 4096}, {"cols", 4096}, {"dtype", "bf16"}};
  e.best = {{"dtype", "bf16"}, {"block_m", block_m}, {"block_n", 128}, {"stages", 2}, {"swizzle", "none"}};
  e.best_us = 10.0;
  e.default_candidate = {{"dtype", "bf16"}, {"block_m", 128}, {"block_n", 128}, {"stages", 4}, {"swizzle", "none"}};
  e.default_us = 12.0;
  e.iters = 20;
  e.updated = updated;
  e.timings = {{e.best, "ok", 10.0, "", 0}, {e.default_candidate, "ok", 12.0, "", 1},
               {{{"block_m", 8}}, "fault", -1, "CUDA_ERROR_ILLEGAL_ADDRESS", 0}};
  return e;
}

tuning::Db db_of(const tuning::Fingerprint& f, std::vector<tuning::Entry> entries) {
  tuning::Db db;
  db.environments.push_back({f, std::move(entries)});
  return db;
}

size_t count_entries(const tuning::Db& db) {
  size_t n = 0;
  for (const auto& env : db.environments) n += env.entries.size();
  return n;
}

struct Warnings {
  std::vector<std::string> lines;
  tuning::Warn sink() {
    return [this](const std::string& w) { lines.push_back(w); };
  }
};

}  // namespace

TEST_CASE("tune db: JSON round trip keeps every field", "[tune]") {
  const tuning::Db db = db_of(fp(), {entry("tma_copy", "bf16 rows=2^12 cols=2^12")});
  const json j = tuning::to_json(db);
  CHECK(j["attnjit_tuning_db"] == tuning::kDbVersion);
  const json& e = j["environments"][0]["entries"][0];
  CHECK(e["speedup"].get<double>() == Approx(1.2));
  CHECK(e["timings"][2]["status"] == "fault");
  CHECK_FALSE(e["timings"][2].contains("us"));
  const tuning::Db back = tuning::from_json(j, "x.json");
  REQUIRE(back.environments.size() == 1);
  CHECK(back.environments[0].fingerprint == fp());
  const tuning::Entry& b = back.environments[0].entries.at(0);
  CHECK(b.best == db.environments[0].entries[0].best);
  CHECK(b.timings.size() == 3);
  CHECK(b.timings[0].us == 10.0);
  CHECK(b.timings[2].error == "CUDA_ERROR_ILLEGAL_ADDRESS");
  CHECK(tuning::to_json(back) == j);
}

TEST_CASE("tune db: merge keeps other buckets and environments, replaces the same bucket", "[tune]") {
  tuning::Db base = db_of(fp(), {entry("tma_copy", "A", 64), entry("tma_copy", "B", 64)});
  merge_into(base, db_of(fp(), {entry("tma_copy", "B", 128), entry("mla_decode", "A", 64)}));
  merge_into(base, db_of(fp("NVIDIA H200"), {entry("tma_copy", "A", 256)}));
  REQUIRE(base.environments.size() == 2);
  const auto& h100 = base.environments[0].entries;
  REQUIRE(h100.size() == 3);
  for (const tuning::Entry& e : h100) {
    if (e.op == "tma_copy" && e.bucket == "A") CHECK(e.best["block_m"] == 64);
    if (e.op == "tma_copy" && e.bucket == "B") CHECK(e.best["block_m"] == 128);  // replaced
  }
  CHECK(base.environments[1].entries.at(0).best["block_m"] == 256);
  // A different driver is another environment (recorded), not an overwrite.
  merge_into(base, db_of(fp("NVIDIA H100 80GB HBM3", 132, tuning::attnjit_version(), 13010),
                         {entry("tma_copy", "A", 32)}));
  CHECK(base.environments.size() == 3);
}

TEST_CASE("tune db: concurrent saves from processes and threads lose no entry", "[tune]") {
  test::ScratchDir dir;
  const std::string path = (dir.path / "sub" / "tuning.json").string();  // parent created on save
  constexpr int kProcs = 4, kThreads = 4, kEach = 8;
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int rc = 0;
      try {
        for (int i = 0; i < kEach; ++i)
          tuning::save_merged(path, db_of(fp(), {entry("tma_copy", fmt::format("proc{}-{}", p, i))}),
                              [](const std::string&) {});
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    kids.push_back(pid);
  }
  std::vector<std::thread> threads;
  std::atomic<int> thread_failures{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < kEach; ++i)
          tuning::save_merged(path, db_of(fp(), {entry("mla_decode", fmt::format("thread{}-{}", t, i))}),
                              [](const std::string&) {});
      } catch (...) {
        ++thread_failures;
      }
    });
  for (std::thread& t : threads) t.join();
  for (pid_t pid : kids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(thread_failures == 0);
  const tuning::Db db = tuning::read_db(path);
  REQUIRE(db.environments.size() == 1);
  CHECK(count_entries(db) == static_cast<size_t>((kProcs + kThreads) * kEach));
  std::set<std::string> buckets;
  for (const auto& e : db.environments[0].entries) buckets.insert(e.bucket);
  CHECK(buckets.size() == static_cast<size_t>((kProcs + kThreads) * kEach));
  for (const auto& f : fs::directory_iterator(dir.path / "sub"))  // no temp file left behind
    CHECK(f.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("tune db: a corrupt file is reported once naming it, ignored, and never overwritten",
          "[tune]") {
  test::ScratchDir dir;
  const std::string path = (dir.path / "tuning.json").string();
  for (const char* text : {"{not json", "[]", R"({"attnjit_tuning_db": 99, "environments": []})",
                           R"({"attnjit_tuning_db": 1, "environments": [{"fingerprint": {}, "entries": []}]})"}) {
    INFO(text);
    test::write_text(path, text);
    CHECK_THROWS_AS(tuning::read_db(path), Error);
    Warnings w;
    CHECK(tuning::load_db(path, w.sink()).empty());
    REQUIRE(w.lines.size() == 1);
    CHECK(w.lines[0].find(path) != std::string::npos);
    CHECK(w.lines[0].find("corrupt") != std::string::npos);

    tuning::Selector sel(path, w.sink());
    CHECK_FALSE(sel.find("tma_copy", "x", {"g", 1, "v"}));
    CHECK_FALSE(sel.find("tma_copy", "x", {"g", 1, "v"}));
    CHECK(w.lines.size() == 2);  // the selector loads once: one more warning, not two
  }
  // A wrong type deep inside names the place.
  json j = tuning::to_json(db_of(fp(), {entry("tma_copy", "A")}));
  j["environments"][0]["entries"][0]["best_us"] = "fast";
  test::write_text(path, j.dump());
  try {
    tuning::read_db(path);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("environments[0].entries[0].best_us") != std::string::npos);
  }
  // Saving over a corrupt file moves it aside (with a warning) instead of losing it.
  test::write_text(path, "{garbage");
  Warnings w;
  tuning::save_merged(path, db_of(fp(), {entry("tma_copy", "A")}), w.sink());
  REQUIRE(w.lines.size() == 1);
  CHECK(w.lines[0].find("moved it to") != std::string::npos);
  CHECK(count_entries(tuning::read_db(path)) == 1);
  int aside = 0;
  for (const auto& f : fs::directory_iterator(dir.path))
    if (f.path().filename().string().find("tuning.json.corrupt-") == 0) {
      ++aside;
      CHECK(test::read_text(f.path()) == "{garbage");
    }
  CHECK(aside == 1);
}

TEST_CASE("tune db: fingerprint rules — GPU name, SM count and attnjit version must match", "[tune]") {
  const tuning::Identity me{"NVIDIA H100 80GB HBM3", 132, tuning::attnjit_version()};
  CHECK(tuning::matches(fp(), me));
  CHECK(tuning::matches(fp("NVIDIA H100 80GB HBM3", 132, tuning::attnjit_version(), 12080), me));  // driver: recorded only
  tuning::Fingerprint other_nvrtc = fp();
  other_nvrtc.nvrtc = "12.9";
  CHECK(tuning::matches(other_nvrtc, me));
  CHECK_FALSE(tuning::matches(fp("NVIDIA H200"), me));
  CHECK_FALSE(tuning::matches(fp("NVIDIA H100 80GB HBM3", 114), me));  // PCIe part
  CHECK_FALSE(tuning::matches(fp("NVIDIA H100 80GB HBM3", 132, "0.0.1"), me));

  test::ScratchDir dir;
  const std::string path = (dir.path / "tuning.json").string();
  tuning::save_merged(path, db_of(fp("NVIDIA H200", 132), {entry("tma_copy", "A", 256)}));
  Warnings w;
  tuning::Selector sel(path, w.sink());
  for (int i = 0; i < 3; ++i) CHECK_FALSE(sel.find("tma_copy", "A", me));
  REQUIRE(w.lines.size() == 1);  // ONE warning per selector (the process has one)
  CHECK(w.lines[0].find(path) != std::string::npos);
  CHECK(w.lines[0].find("NVIDIA H200") != std::string::npos);
  CHECK(w.lines[0].find("built-in heuristics") != std::string::npos);

  // A matching environment: its entry wins; with several, the newest entry.
  tuning::save_merged(path, db_of(fp(), {entry("tma_copy", "A", 64, 1000)}));
  tuning::save_merged(path, db_of(fp("NVIDIA H100 80GB HBM3", 132, tuning::attnjit_version(), 13010),
                                  {entry("tma_copy", "A", 32, 2000)}));
  Warnings w2;
  tuning::Selector sel2(path, w2.sink());
  const auto got = sel2.find("tma_copy", "A", me);
  REQUIRE(got);
  CHECK((*got)["block_m"] == 32);
  CHECK_FALSE(sel2.find("tma_copy", "B", me));  // no entry for the bucket: heuristic, silently
  CHECK_FALSE(sel2.find("mla_decode", "A", me));
  CHECK(w2.lines.empty());
}

TEST_CASE("tune db: lookup by bucket — any shape of the bucket finds the entry", "[tune]") {
  const ops::TuningSpec& t = ops::find_op("tma_copy").tuning;
  auto bucket = [&](int64_t r, int64_t c) { return t.bucket(t.canonical_shape({{"rows", r}, {"cols", c}})); };
  test::ScratchDir dir;
  const std::string path = (dir.path / "tuning.json").string();
  tuning::save_merged(path, db_of(fp(), {entry("tma_copy", bucket(4096, 4096), 64)}));
  tuning::Selector sel(path, [](const std::string&) {});
  const tuning::Identity me{"NVIDIA H100 80GB HBM3", 132, tuning::attnjit_version()};
  CHECK(sel.find("tma_copy", bucket(4096, 4096), me));
  CHECK(sel.find("tma_copy", bucket(3000, 2049), me));
  CHECK_FALSE(sel.find("tma_copy", bucket(4097, 4096), me));
  CHECK_FALSE(sel.find("tma_copy", bucket(4096, 2048), me));
}

TEST_CASE("tune db: where the file lives (ATTNJIT_TUNING_DB, off, <cache root>/tuning.json)", "[tune]") {
  test::ScratchDir dir;
  {
    test::ScopedEnv db("ATTNJIT_TUNING_DB", nullptr);
    test::ScopedEnv root("ATTNJIT_CACHE_DIR", dir.root().c_str());
    CHECK(tuning_db_path() == dir.root() + "/tuning.json");
    CHECK(tuning::db_path_for("/elsewhere/cache") == "/elsewhere/cache/tuning.json");
  }
  {
    test::ScopedEnv db("ATTNJIT_TUNING_DB", (dir.path / "mine.json").c_str());
    CHECK(tuning_db_path() == (dir.path / "mine.json").string());
    CHECK(tuning::db_path_for("/elsewhere/cache") == (dir.path / "mine.json").string());
  }
  {
    test::ScopedEnv db("ATTNJIT_TUNING_DB", "off");
    CHECK(tuning_db_path().empty());
  }
}

TEST_CASE("tune db: tuned_config without a database or a GPU is the heuristic's call", "[tune]") {
  test::ScratchDir dir;
  test::ScopedEnv db("ATTNJIT_TUNING_DB", (dir.path / "missing.json").c_str());
  reload_tuning_db();
  const uint64_t g = tuning_db_generation();
  CHECK_FALSE(tuned_config("tma_copy", {{"rows", 4096}, {"cols", 4096}}));
  CHECK_THROWS_AS(tuned_config("no_such_op", json::object()), Error);
  CHECK_THROWS_AS(tuned_config("tma_copy", {{"rows", -1}}), Error);
  // Calls without a config on CPU pick exactly the heuristic's config.
  CHECK(tma_copy_selected_config({DType::kBF16, 4096, 4096}) == tma_copy_default_config(DType::kBF16));
  MlaDecodeShape s{.batch = 4, .q_len = 2, .num_heads = 64, .page_size = 32, .max_pages = 25};
  CHECK(mla_decode_selected_config(s) == mla_decode_default_config(DType::kBF16, 64, 2, 32));
  s.num_heads = 200;  // no config runs h = 200
  CHECK(mla_decode_selected_config(s) == mla_decode_default_config(DType::kBF16, 200, 2, 32));
  reload_tuning_db();
  CHECK(tuning_db_generation() == g + 1);
}

// The runtime's reading of a tuned candidate's run-time field (mha_fwd and mla_decode's
// num_splits). It was `value("num_splits", 0)`: a string threw json::type_error past the
// ops' `catch (const Error&)` ("unusable entry: use the heuristic") into the caller, and
// 1e300 was a float-to-int cast out of range. Found while writing the tuning database's
// fuzz target (tests/fuzz/fuzz_tuning_db.cpp).
TEST_CASE("tune db: a tuned candidate's run-time field is an integer in range or an Error",
          "[tune]") {
  using attnjit::tuning::take_runtime_int;
  nlohmann::json c = {{"block_n", 64}, {"num_splits", 4}};
  CHECK(take_runtime_int(c, "num_splits", 0, 0, 256) == 4);
  CHECK_FALSE(c.contains("num_splits"));  // taken out: the rest is the op's config
  CHECK(take_runtime_int(c, "num_splits", 7, 0, 256) == 7);  // missing: the fallback
  for (const nlohmann::json& bad : {nlohmann::json("4"), nlohmann::json(1e300), nlohmann::json(4.0),
                                    nlohmann::json(-1), nlohmann::json(257), nlohmann::json(nullptr),
                                    nlohmann::json(uint64_t{18446744073709551615u})}) {
    nlohmann::json b = {{"num_splits", bad}};
    INFO(bad.dump());
    REQUIRE_ERROR(take_runtime_int(b, "num_splits", 0, 0, 256), attnjit::ErrorKind::kUnsupportedConfig,
                  "num_splits");
  }
  nlohmann::json not_object = nlohmann::json::array();
  REQUIRE_ERROR(take_runtime_int(not_object, "num_splits", 0, 0, 256),
                attnjit::ErrorKind::kUnsupportedConfig, "JSON object");
}
