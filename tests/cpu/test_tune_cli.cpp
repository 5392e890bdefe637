// `attnjit tune` without a GPU, as users and scripts run it: the search-space listing,
// usage errors (exit 2), a sweep refused without a GPU (exit 1), the report and its SVG
// plot, corrupt databases reported by name, `precompile` building the database's tuned
// configs for its arch only, and `cache clear` leaving the database alone.
#include <fmt/format.h>

#include <filesystem>

#include "attnjit/ops/tma_copy.hpp"
#include "driver/driver.hpp"
#include "jit/embedded.hpp"
#include "jit/key_record.hpp"
#include "support/catch.hpp"
#include "test_cache_support.hpp"
#include "tuning/db.hpp"

using namespace attnjit;
using attnjit::test::run_cli;
using attnjit::test::ScratchDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string q(const std::string& s) { return test::shell_quote(s); }

tuning::Entry tma_entry(const std::string& bucket, const json& best, double best_us) {
  tuning::Entry e;
  e.op = "tma_copy";
  e.bucket = bucket;
  e.shape = {{"rows", 4096}, {"cols", 4096}, {"dtype", "bf16"}};
  e.default_candidate = json::parse(tma_copy_default_config(DType::kBF16).to_json());
  e.best = best;
  e.best_us = best_us;
  e.default_us = 20.0;
  e.iters = 10;
  e.updated = 1700000000;
  e.timings = {{e.default_candidate, "ok", 20.0, "", 0}, {best, "ok", best_us, "", 0},
               {test::tma_config({{"stages", 3}}), "mismatch", -1, "bytes differ", 0}};
  return e;
}

tuning::Fingerprint fp(const std::string& arch) {
  return {"NVIDIA H100 80GB HBM3", 132, arch, 13000, "13.0", tuning::attnjit_version()};
}

}  // namespace

TEST_CASE("tune cli: --list-space lists candidates and pruned ones without a GPU", "[tune][cli]") {
  const auto r = run_cli("tune --op mla_decode --shape b=8,s_k=256,h=64 --list-space --json");
  REQUIRE(r.rc == 0);
  const json j = test::json_of(r);
  REQUIRE(j.is_array());
  REQUIRE(j.size() == 1);
  CHECK(j[0]["bucket"] == "bf16 h=64 q_len=1 page=64 b=2^3 s_k=2^8");
  // 5 schedule/tile/stage configs (seesaw 64×2; softmax_wg 64×2, 32×2..4) × splits 0, 1, 2, 4
  CHECK(j[0]["candidates"].size() == 20);
  CHECK(j[0]["candidates"][0] == j[0]["default"]);
  CHECK(j[0]["pruned"].size() > 0);

  ScratchDir s;
  const fs::path space = s.path / "space.json";
  test::write_text(space, R"({"block_m": [64, 128], "stages": [2, 4]})");
  const fs::path shapes = s.path / "shapes.json";
  test::write_text(shapes, R"(["rows=4096,cols=4096", {"rows": 64, "cols": 256, "dtype": "e4m3"}])");
  const json k = test::json_of(
      run_cli("tune --op tma_copy --shapes " + q(shapes.string()) + " --space " + q(space.string()) + " --list-space --json"));
  REQUIRE(k.size() == 2);
  CHECK(k[0]["candidates"].size() == 4);  // the default is one of the four
  CHECK(k[1]["default"]["dtype"] == "e4m3");
  CHECK(k[1]["pruned"].size() == 2);  // block_m 128 taller than 64 rows
}

TEST_CASE("tune cli: usage errors exit 2 and name the problem", "[tune][cli]") {
  ScratchDir s;
  const fs::path bad_space = s.path / "space.json";
  test::write_text(bad_space, R"({"blockm": [64]})");
  for (const auto& [args, text] : std::vector<std::pair<std::string, std::string>>{
           {"tune --op nope --shape rows=1", "unknown op 'nope'"},
           {"tune --op mla_decode_combine --shape rows=1", "no search space"},
           {"tune --op tma_copy --shape depth=3", "unknown key"},
           {"tune --op tma_copy --shape rows", "not key=value"},
           {"tune --op tma_copy", "exactly one of"},
           {"tune --op tma_copy --shape rows=4 --bench-shapes", "exactly one of"},
           {"tune --op tma_copy --shape rows=64 --space " + q(bad_space.string()), "no field 'blockm'"},
           {"tune --op tma_copy --shape rows=64 --space /nonexistent.json", "cannot read"},
           {"tune --shape rows=64", "--op is required"},
           {"tune --op tma_copy --shape rows=64 --iters 0", "iters"},
       }) {
    INFO(args);
    const auto r = run_cli(args, true);
    CHECK(r.rc == 2);
    CHECK(r.out.find(text) != std::string::npos);
  }
}

TEST_CASE("tune cli: a sweep without a GPU fails with exit 1 and says why", "[tune][cli]") {
  if (driver::available()) {
    WARN("a GPU is present: the no-GPU refusal is not observable here");
    return;
  }
  ScratchDir s;
  const auto r = run_cli("tune --op tma_copy --shape rows=256,cols=256 --cache-dir " + q(s.root()) +
                             " --db " + q((s.path / "db.json").string()),
                         true);
  CHECK(r.rc == 1);
  CHECK(r.out.find("needs a GPU") != std::string::npos);
  CHECK_FALSE(fs::exists(s.path / "db.json"));
}

TEST_CASE("tune cli: --report prints a table per op and bucket and plots one entry as SVG",
          "[tune][cli]") {
  ScratchDir s;
  const std::string db = (s.path / "tuning.json").string();
  tuning::Db d;
  d.environments.push_back(
      {fp("sm_90a"),
       {tma_entry("bf16 rows=2^12 cols=2^12", test::tma_config({{"block_m", 64}, {"block_n", 128}, {"stages", 2}, {"swizzle", "none"}}), 16.0),
        tma_entry("bf16 rows=2^14 cols=2^13", test::tma_config({{"block_m", 256}, {"block_n", 64}, {"stages", 4}, {"swizzle", "128B"}}), 10.0)}});
  tuning::save_merged(db, d);
  const auto r = run_cli("tune --report --db " + q(db) + " --plot " + q((s.path / "p.svg").string()) +
                         " --bucket " + q("bf16 rows=2^12 cols=2^12"));
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("tma_copy") != std::string::npos);
  CHECK(r.out.find("bf16 rows=2^12 cols=2^12") != std::string::npos);
  CHECK(r.out.find("bf16 rows=2^14 cols=2^13") != std::string::npos);
  CHECK(r.out.find("1.250x") != std::string::npos);  // 20 / 16
  CHECK(r.out.find("2.000x") != std::string::npos);  // 20 / 10
  CHECK(r.out.find("2/3") != std::string::npos);     // ok / all
  const std::string svg = test::read_text(s.path / "p.svg");
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(svg.find("bf16 rows=2^12 cols=2^12") != std::string::npos);
  size_t bars = 0;
  for (size_t p = 0; (p = svg.find("<rect x=", p)) != std::string::npos; ++p) ++bars;
  CHECK(bars == 2);  // the two timed candidates; the mismatch has no bar
  CHECK(svg.find("16.00 us") != std::string::npos);

  const json j = test::json_of(run_cli("tune --report --json --db " + q(db)));
  CHECK(j["environments"][0]["entries"].size() == 2);
  CHECK(run_cli("tune --report --db " + q((s.path / "none.json").string())).rc == 1);
}

TEST_CASE("tune cli: a corrupt database is reported by name and ignored by report and precompile",
          "[tune][cli][nvrtc]") {
  ScratchDir s;
  const std::string db = (s.path / "tuning.json").string();
  test::write_text(db, "{\"attnjit_tuning_db\": 1, \"environments\": 7}");
  const auto rep = run_cli("tune --report --db " + q(db), true);
  CHECK(rep.rc == 1);
  CHECK(rep.out.find("warning: tuning database " + db + " is corrupt") != std::string::npos);

  const auto pre = run_cli("precompile --op tma_copy --json --jobs 2 --cache-dir " + q(s.root()), true,
                           "ATTNJIT_TUNING_DB=" + q(db));
  CHECK(pre.rc == 0);
  CHECK(pre.out.find(db) != std::string::npos);
  CHECK(pre.out.find("corrupt") != std::string::npos);
  CHECK(test::read_text(db) == "{\"attnjit_tuning_db\": 1, \"environments\": 7}");  // left as it was
}

TEST_CASE("tune cli: precompile also builds the database's tuned configs of its arch", "[tune][cli][nvrtc]") {
  ScratchDir s;
  const json tuned90 = test::tma_config({{"block_m", 64}, {"block_n", 128}, {"stages", 3}, {"swizzle", "none"}});
  const json tuned100 = test::tma_config({{"block_m", 32}, {"block_n", 128}, {"stages", 5}, {"swizzle", "none"}});
  tuning::Db d;
  d.environments.push_back({fp("sm_90a"), {tma_entry("bf16 rows=2^12 cols=2^12", tuned90, 10.0)}});
  d.environments.push_back({fp("sm_100a"), {tma_entry("bf16 rows=2^12 cols=2^12", tuned100, 10.0)}});
  // The default database: <cache root>/tuning.json (GPU-less machine, no ATTNJIT_TUNING_DB).
  fs::create_directories(s.root());
  fs::permissions(s.root(), fs::perms::owner_all, fs::perm_options::replace);
  tuning::save_merged(s.root() + "/tuning.json", d);

  const auto r = run_cli("precompile --op tma_copy --json --jobs 2 --cache-dir " + q(s.root()), false,
                         "ATTNJIT_TUNING_DB=");
  REQUIRE(r.rc == 0);
  const json j = test::json_of(r);
  INFO(r.out);
  CHECK(j["total"] == 9);  // the 8 defaults + the sm_90a winner; the sm_100a one is not for this arch
  CHECK(j["tuned"] == 1);
  CHECK(j["failed"] == 0);
  int tuned = 0;
  for (const json& v : j["variants"])
    if (v.value("tuned", false)) {
      ++tuned;
      CHECK(v["config"] == tuned90);
      CHECK(v["arch"] == "sm_90a");
    }
  CHECK(tuned == 1);

  const json both = test::json_of(run_cli("precompile --op tma_copy --arch sm_90a,sm_100a --json --jobs 2 --cache-dir " +
                                          q(s.root()), false, "ATTNJIT_TUNING_DB="));
  CHECK(both["tuned"] == 2);
  CHECK(both["total"] == 18);

  // A manifest is exactly what it lists: the database adds nothing to it.
  const fs::path m = s.path / "m.json";
  test::write_text(m, R"([{"op": "tma_copy"}])");
  const json man = test::json_of(run_cli("precompile --manifest " + q(m.string()) + " --json --cache-dir " + q(s.root()),
                                         false, "ATTNJIT_TUNING_DB="));
  CHECK(man["total"] == 1);

  // `cache clear` deletes kernels, never the tuning database in the same root.
  REQUIRE(run_cli("cache clear --cache-dir " + q(s.root())).rc == 0);
  CHECK(fs::exists(s.root() + "/tuning.json"));
  CHECK(tuning::read_db(s.root() + "/tuning.json").environments.size() == 2);
}

TEST_CASE("attnjit --version names the commit and the kernel templates' digest", "[cli]") {
  const auto r = run_cli("--version");
  REQUIRE(r.rc == 0);
  // The digest is the cache key's embedded-headers hash: one source tree, one digest.
  const std::string digest = jit::embedded_headers_hash(jit::embedded_templates()).substr(0, 12);
  CHECK(r.out.find("kernel templates " + digest) != std::string::npos);
  CHECK(r.out.find("commit ") != std::string::npos);
  // The commit is stamped at every build (cmake/write_commit.cmake): in a checkout it is
  // HEAD's, not the one the build directory was configured at.
  // ATTNJIT_COMMIT, which a GPU run sets, would be reported over the stamp: cleared here.
  const auto stamped = run_cli("--version", false, "ATTNJIT_COMMIT=");
  std::string head =
      test::run_shell("git -C " + test::shell_quote(ATTNJIT_SOURCE_DIR) + " rev-parse --short=12 HEAD 2>/dev/null").out;
  while (!head.empty() && (head.back() == '\n' || head.back() == '\r')) head.pop_back();
  if (head.size() >= 12)
    CHECK(stamped.out.find("commit " + head) != std::string::npos);
  else
    WARN("not a git checkout: the stamped commit is not compared with HEAD");
  // A different template set has a different digest.
  const jit::EmbeddedFile one{"common/x.cuh", "x"};
  CHECK(jit::embedded_headers_hash({&one, 1}).substr(0, 12) != digest);
}
