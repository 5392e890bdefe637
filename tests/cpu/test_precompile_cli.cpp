// `attnjit precompile` and `attnjit cache` as users and CI run them: exit codes, JSON
// fields, manifest errors, several processes on one cold cache, and processes killed
// in the middle of a publish. Uses tma_copy only (its compiles take ~50-100 ms).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "attnjit/precompile.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "test_cache_support.hpp"

using namespace attnjit;
using attnjit::test::run_cli;
using attnjit::test::ScratchDir;
namespace fs = std::filesystem;

namespace {

std::string dir_arg(const ScratchDir& s) { return "--cache-dir " + test::shell_quote(s.root()); }

// A manifest file holding `text`; returns its path.
std::string manifest(const ScratchDir& s, const std::string& text) {
  static int n = 0;
  const fs::path p = s.path / fmt::format("manifest-{}.json", n++);
  test::write_text(p, text);
  return p.string();
}

const char* kTwoVariants = R"([
  {"op": "tma_copy", "config": {"dtype": "bf16", "block_m": 64, "block_n": 64, "stages": 2}},
  {"op": "tma_copy", "config": {"dtype": "e4m3", "block_m": 64, "block_n": 128, "stages": 2},
   "arch": "sm_90a"}
])";

}  // namespace

TEST_CASE("precompile: a manifest, then all hits; JSON fields; cache ls/stats/verify",
          "[cli][cache][nvrtc]") {
  ScratchDir s;
  const std::string m = manifest(s, kTwoVariants);
  const auto first = run_cli("precompile --json --jobs 2 --manifest " + m + " " + dir_arg(s));
  REQUIRE(first.rc == 0);
  const nlohmann::json j = test::json_of(first);
  INFO(first.out);
  CHECK(j["total"] == 2);
  CHECK(j["compiled"] == 2);
  CHECK(j["cache_hits"] == 0);
  CHECK(j["skipped"] == 0);
  CHECK(j["failed"] == 0);
  CHECK(j["variants"].size() == 2);

  const auto second = run_cli("precompile --json --manifest " + m + " " + dir_arg(s));
  REQUIRE(second.rc == 0);
  const nlohmann::json j2 = test::json_of(second);
  CHECK(j2["compiled"] == 0);
  CHECK(j2["cache_hits"] == 2);
  CHECK(j2["hit_ms_mean"].get<double>() >= 0);
  CHECK(j2["key_setup_ms"].get<double>() > 0);

  const nlohmann::json ls = test::json_of(run_cli("cache ls --json " + dir_arg(s)));
  REQUIRE(ls.is_array());
  REQUIRE(ls.size() == 2);
  std::set<std::string> dtypes;
  for (const auto& e : ls) {
    for (const char* f : {"op", "config", "arch", "registers", "spill_bytes", "compile_ms"})
      CHECK(e.contains(f));
    CHECK(e["op"] == "tma_copy");
    CHECK(e["arch"] == "sm_90a");
    CHECK(e["spill_bytes"] == 0);
    dtypes.insert(e["config"]["dtype"].get<std::string>());
  }
  CHECK(dtypes == std::set<std::string>{"bf16", "e4m3"});

  const nlohmann::json st = test::json_of(run_cli("cache stats --json " + dir_arg(s)));
  CHECK(st["entries"] == 2);
  CHECK(st["per_arch"]["sm_90a"] == 2);
  CHECK(st["root"] == s.root());

  const auto v = run_cli("cache verify --json " + dir_arg(s));
  CHECK(v.rc == 0);
  const nlohmann::json vj = test::json_of(v);
  CHECK(vj["entries"] == 2);
  CHECK(vj["ok"] == 2);
  CHECK(vj["corrupt"] == 0);

  // Damage one entry: verify reports it (exit 1) and quarantines it.
  const std::string key = ls[0]["key"].get<std::string>();
  const fs::path cubin = fs::path(s.root()) / "sm_90a" / key.substr(0, 2) / key / "kernel.cubin";
  test::write_text(cubin, "not a cubin");
  const auto bad = run_cli("cache verify --json " + dir_arg(s));
  CHECK(bad.rc == 1);
  CHECK(test::json_of(bad)["corrupt"] == 1);
  CHECK(test::json_of(run_cli("cache stats --json " + dir_arg(s)))["quarantined"] == 1);
  // ... and the next precompile rebuilds it.
  const nlohmann::json j3 =
      test::json_of(run_cli("precompile --json --manifest " + m + " " + dir_arg(s)));
  CHECK(j3["compiled"] == 1);
  CHECK(j3["cache_hits"] == 1);

  const nlohmann::json pr = test::json_of(run_cli("cache prune --max-size 0 --json " + dir_arg(s)));
  CHECK(pr["removed"] == 2);
  CHECK(pr["cleaned"] == 1);  // the quarantined entry
  CHECK(test::json_of(run_cli("cache ls --json " + dir_arg(s))).empty());
  REQUIRE(run_cli("precompile --manifest " + m + " " + dir_arg(s)).rc == 0);
  CHECK(test::json_of(run_cli("cache clear --json " + dir_arg(s)))["removed"] == 2);
  CHECK(test::json_of(run_cli("cache stats --json " + dir_arg(s)))["entries"] == 0);
}

TEST_CASE("precompile: variants whose op lacks the arch are skipped", "[cli][cache]") {
  ScratchDir s;
  const auto r = run_cli("precompile --json --op tma_copy --arch sm_80 " + dir_arg(s));
  REQUIRE(r.rc == 0);
  const nlohmann::json j = test::json_of(r);
  CHECK(j["total"].get<int>() > 0);
  CHECK(j["skipped"] == j["total"]);
  CHECK(j["compiled"] == 0);
  CHECK(j["failed"] == 0);
}

TEST_CASE("precompile: manifest and usage errors exit 2 naming the problem", "[cli][cache]") {
  ScratchDir s;
  auto expect_usage = [&](const std::string& args, const std::string& needle) {
    const auto r = run_cli(args + " " + dir_arg(s), true);
    INFO(args << "\n" << r.out);
    CHECK(r.rc == 2);
    CHECK(r.out.find(needle) != std::string::npos);
  };
  auto with = [&](const std::string& text) { return "precompile --manifest " + manifest(s, text); };
  expect_usage(with(R"([{"op": "tma_copy", "cfg": {}}])"), "unknown field 'cfg'");
  expect_usage(with(R"([{"op": "tma_copy", "config": {"block_q": 64}}])"), "block_q");
  expect_usage(with(R"([{"op": "tma_copy", "config": {"block_m": 7}}])"), "block_m");
  expect_usage(with(R"([{"op": "tma_copy", "config": {"stages": 99}}])"), "stages");
  expect_usage(with(R"([{"op": "tma_copy", "config": {"dtype": "bf17"}}])"), "bf17");
  expect_usage(with(R"([{"op": "flash_nope", "config": {}}])"), "flash_nope");
  expect_usage(with(R"([{"op": "tma_copy", "config": {}, "arch": "sm_9000"}])"), "sm_9000");
  expect_usage(with(R"([{"config": {}}])"), "'op'");
  expect_usage(with(R"({"op": "tma_copy"})"), "JSON list");
  expect_usage(with("[{"), "not JSON");
  expect_usage(with(R"([{"op": "tma_copy"}, {"op": "tma_copy", "config": {"block_m": 7}}])"),
               "item 1");
  expect_usage("precompile --manifest /nonexistent/manifest.json", "cannot read");
  expect_usage("precompile --arch sm_nope", "sm_nope");
  expect_usage("precompile --jobs 0", "jobs");
  expect_usage("precompile --config '{}'", "--config needs --op");
  expect_usage("precompile --frobnicate", "frobnicate");
  expect_usage("cache frob", "frob");
  expect_usage("cache prune --max-size 10X", "10X");
  expect_usage("cache ls --max-size 1G", "--max-size only applies to prune");
  CHECK_FALSE(fs::exists(fs::path(s.root()) / "sm_90a"));  // nothing was built
}

TEST_CASE("precompile: an unsafe root is refused with exit 1", "[cli][cache]") {
  ScratchDir s;
  fs::create_directories(s.root());
  fs::permissions(s.root(), fs::perms::all);
  const auto r = run_cli("precompile --op tma_copy " + dir_arg(s), true);
  CHECK(r.rc == 1);
  CHECK(r.out.find("writable by group and others") != std::string::npos);
  const auto st = run_cli("cache stats " + dir_arg(s), true);
  CHECK(st.rc == 1);
}

TEST_CASE("precompile: strict mode's error line builds the missing kernel", "[cli][cache][nvrtc]") {
  ScratchDir s;
  const std::string config = R"('{"dtype":"bf16","block_m":64,"block_n":64,"stages":2}')";
  CHECK(run_cli("precompile --op tma_copy --config " + config + " " + dir_arg(s)).rc == 0);
  // In strict mode precompile is a coverage check: hits pass, every miss fails.
  const std::string strict_env = "ATTNJIT_NO_COMPILE=1";
  const auto hit = run_cli("precompile --json --op tma_copy --config " + config + " " + dir_arg(s),
                           false, strict_env);
  const auto miss =
      run_cli("precompile --json --op tma_copy --config " +
                  std::string(R"('{"dtype":"f16","block_m":64,"block_n":64,"stages":2}')") + " " +
                  dir_arg(s),
              false, strict_env);
  CHECK(hit.rc == 0);
  CHECK(test::json_of(hit)["cache_hits"] == 1);
  REQUIRE(miss.rc == 1);
  const nlohmann::json mj = test::json_of(miss);
  CHECK(mj["failed"] == 1);
  const std::string error = mj["variants"][0]["error"].get<std::string>();
  INFO(error);
  const size_t at = error.find("attnjit precompile ");
  REQUIRE(at != std::string::npos);
  // Run exactly the printed line (with this build's binary): then strict mode hits.
  const std::string line = error.substr(at + std::string("attnjit ").size());
  CHECK(run_cli(line).rc == 0);
  const auto after = run_cli(line + " --json", false, strict_env);
  CHECK(after.rc == 0);
  CHECK(test::json_of(after)["cache_hits"] == 1);
  // A coverage check writes nothing, so a read-only (shipped, mounted) cache is fine; a
  // build into it is refused.
  const std::string ro_env = strict_env + " ATTNJIT_CACHE_READ_ONLY=1";
  const auto ro_hit = run_cli(line + " --json", false, ro_env);
  CHECK(ro_hit.rc == 0);
  CHECK(test::json_of(ro_hit)["cache_hits"] == 1);
  const auto ro_build = run_cli(line, true, "ATTNJIT_CACHE_READ_ONLY=1");
  CHECK(ro_build.rc == 1);
  CHECK(ro_build.out.find("read-only") != std::string::npos);
}

TEST_CASE("precompile: processes racing on one cold cache leave exactly one entry",
          "[cli][cache][nvrtc][processes]") {
  ScratchDir s;
  constexpr int kProcs = 6;
  const std::string m = manifest(s, kTwoVariants);
  // All start together; each writes its JSON and exit code.
  std::string script = "for i in $(seq " + std::to_string(kProcs) +
                       "); do (" ATTNJIT_CLI_PATH " precompile --json --jobs 2 --manifest " + m +
                       " " + dir_arg(s) + " > " + (s.path / "out-$i.json").string() +
                       " 2>/dev/null; echo $? > " + (s.path / "rc-$i").string() + ") & done; wait";
  REQUIRE(std::system(script.c_str()) == 0);
  int compiled = 0, hits = 0;
  for (int i = 1; i <= kProcs; ++i) {
    INFO("process " << i);
    CHECK(test::read_text(s.path / fmt::format("rc-{}", i)) == "0\n");
    const nlohmann::json j = nlohmann::json::parse(
        test::read_text(s.path / fmt::format("out-{}.json", i)), nullptr, false);
    REQUIRE(j.is_object());
    CHECK(j["failed"] == 0);
    compiled += j["compiled"].get<int>();
    hits += j["cache_hits"].get<int>();
  }
  CHECK(compiled + hits == 2 * kProcs);
  CHECK(compiled >= 2);
  const nlohmann::json v = test::json_of(run_cli("cache verify --json " + dir_arg(s)));
  CHECK(v["entries"] == 2);
  CHECK(v["ok"] == 2);
  CHECK(test::json_of(run_cli("cache stats --json " + dir_arg(s)))["quarantined"] == 0);
}

TEST_CASE("precompile: a process killed while publishing leaves nothing loadable",
          "[cli][cache][nvrtc][processes]") {
  ScratchDir s;
  const std::string args =
      "precompile --json --op tma_copy --config "
      R"('{"dtype":"bf16","block_m":64,"block_n":64,"stages":2}' )" +
      dir_arg(s);
  for (const char* step : {"cubin", "marker", "rename"}) {
    INFO("killed before " << step);
    const auto killed = run_cli(args, false, std::string("ATTNJIT_CACHE_TEST_KILL_AT=") + step);
    CHECK(killed.rc == 128 + 9);  // SIGKILL
    const nlohmann::json st = test::json_of(run_cli("cache stats --json " + dir_arg(s)));
    CHECK(st["entries"] == 0);  // the half-built entry is only in tmp/
    CHECK(st["tmp"].get<int>() >= 1);
  }
  const nlohmann::json j = test::json_of(run_cli(args));
  CHECK(j["compiled"] == 1);
  const nlohmann::json v = test::json_of(run_cli("cache verify --json " + dir_arg(s)));
  CHECK(v["entries"] == 1);
  CHECK(v["ok"] == 1);
}

TEST_CASE("precompile: a variant that cannot be stored counts as failed", "[cli][cache][nvrtc]") {
  ScratchDir s;
  fs::create_directories(s.root());
  fs::permissions(s.root(), fs::perms::owner_all, fs::perm_options::replace);
  test::write_text(fs::path(s.root()) / "sm_90a", "a file where the arch folder goes");
  const auto r = run_cli("precompile --json --op tma_copy --config "
                         R"('{"dtype":"bf16","block_m":64,"block_n":64,"stages":2}' )" +
                         dir_arg(s));
  CHECK(r.rc == 1);
  const nlohmann::json j = test::json_of(r);
  CHECK(j["failed"] == 1);
  CHECK(j["variants"][0]["error"].get<std::string>().find("sm_90a") != std::string::npos);
}

// The library's precompile (attnjit/precompile.hpp), what an engine calls at build time:
// the same kernel, key and cache entry as the CLI's --op/--config line.
TEST_CASE("precompile(): the public API compiles into the cache, then hits", "[cache][nvrtc]") {
  ScratchDir s;
  const std::string config = R"({"dtype":"bf16","block_m":64,"block_n":64,"stages":2})";
  const PrecompiledKernel first = precompile("tma_copy", config, kSm90a, s.root());
  CHECK_FALSE(first.cache_hit);
  CHECK(first.op == "tma_copy");
  CHECK(first.arch == "sm_90a");
  CHECK(first.cache_dir == s.root());
  CHECK(first.key.size() == 64);
  CHECK(first.registers > 0);
  CHECK(first.cubin_bytes > 0);
  const PrecompiledKernel again = precompile("tma_copy", config, kSm90a, s.root());
  CHECK(again.cache_hit);
  CHECK(again.key == first.key);
  CHECK(again.config == first.config);
  // The CLI finds the same entry.
  const auto cli = run_cli("precompile --json --op tma_copy --config '" + config + "' " + dir_arg(s));
  CHECK(test::json_of(cli)["variants"][0]["key"] == first.key);
  CHECK(test::json_of(cli)["cache_hits"] == 1);
  const std::vector<std::string> ops = kernel_ops();
  CHECK(std::find(ops.begin(), ops.end(), "mla_decode_combine") != ops.end());
  REQUIRE_ERROR(precompile("no_such_op", "{}", kSm90a, s.root()), ErrorKind::kUnsupportedConfig,
                "no_such_op");
  REQUIRE_ERROR(precompile("tma_copy", R"({"block_m": 7})", kSm90a, s.root()),
                ErrorKind::kUnsupportedConfig, "block_m");
  REQUIRE_ERROR(precompile("tma_copy", "not json", kSm90a, s.root()),
                ErrorKind::kUnsupportedConfig, "not a JSON object");
}

// Found by fuzzing the entry meta (tests/fuzz/fuzz_entry_meta.cpp): `cache ls` lists
// unverified entries, and read a meta.json field of another type (an "op" number, a
// "registers" string) with get<>(), which threw out of the whole listing, or a huge float
// into an int (undefined behaviour). One bad entry must show as such, the rest still list.
TEST_CASE("cache ls: an entry whose meta.json has wrongly typed fields is listed", "[cli][cache]") {
  ScratchDir s;
  const fs::path entry = fs::path(s.root()) / "sm_90a" / "ab" / ("ab" + std::string(62, '0'));
  fs::create_directories(entry);
  test::write_text(entry / "meta.json",
                   R"({"op": 5, "registers": "many", "spill_bytes": 1e300, "compile_ms": "x",
                       "static_smem_bytes": 99999999999999999999, "dynamic_smem_bytes": -1e300})");
  const fs::path other = fs::path(s.root()) / "sm_90a" / "cd" / ("cd" + std::string(62, '0'));
  fs::create_directories(other);
  test::write_text(other / "meta.json", "[1, 2");  // not JSON at all

  const auto text = run_cli("cache ls " + dir_arg(s));
  INFO(text.out);
  CHECK(text.rc == 0);
  const auto js = run_cli("cache ls --json " + dir_arg(s));
  REQUIRE(js.rc == 0);
  const nlohmann::json ls = test::json_of(js);
  REQUIRE(ls.size() == 2);
  CHECK(ls[0]["op"] == "?");
  for (const char* f : {"registers", "spill_bytes", "compile_ms", "static_smem_bytes",
                        "dynamic_smem_bytes"})
    CHECK(ls[0][f] == -1);
  CHECK_FALSE(ls[0].contains("unreadable"));
  CHECK(ls[1]["unreadable"] == true);
}
