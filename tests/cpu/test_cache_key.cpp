// The disk cache key: stable for equal inputs, different when any input differs, and
// free of anything that depends on where things are installed or built.
#include <fmt/format.h>

#include <set>
#include <string>
#include <vector>

#include "cache/hash.hpp"
#include "cache/key.hpp"
#include "cache/root.hpp"
#include "jit/compiler.hpp"
#include "jit/embedded.hpp"
#include "jit/key_record.hpp"
#include "jit/toolkit.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "test_cache_support.hpp"

using namespace attnjit;
using attnjit::test::tma_recipe;

TEST_CASE("cache key: stable for the same inputs, 64 hex digits", "[cache][key]") {
  const std::string a = jit::cache_key(jit::key_inputs(tma_recipe()));
  const std::string b = jit::cache_key(jit::key_inputs(tma_recipe()));
  CHECK(a == b);
  CHECK(a.size() == 64);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  // The record survives its trip through meta.json.
  const jit::KeyInputs in = jit::key_inputs(tma_recipe());
  const cache::KeyRecord stored = cache::key_record_from_json(cache::to_json(jit::to_record(in)));
  CHECK(cache::cache_key(stored) == a);
  CHECK(jit::cache_key(jit::key_inputs_from_record(stored)) == a);
}

TEST_CASE("cache key: every config field, the arch and each option change it", "[cache][key]") {
  std::vector<std::string> keys = {jit::cache_key(jit::key_inputs(tma_recipe()))};
  for (const nlohmann::json& change :
       {nlohmann::json{{"dtype", "f16"}}, nlohmann::json{{"block_m", 128}},
        nlohmann::json{{"block_n", 128}}, nlohmann::json{{"stages", 3}},
        nlohmann::json{{"swizzle", "64B"}}})
    keys.push_back(jit::cache_key(jit::key_inputs(tma_recipe(change))));
  keys.push_back(jit::cache_key(jit::key_inputs(tma_recipe({}, kSm100a))));
  jit::KernelRecipe with_define = tma_recipe();
  with_define.options.extra.push_back("-DATTNJIT_CHECK=1");
  keys.push_back(jit::cache_key(jit::key_inputs(with_define)));
  jit::KernelRecipe with_lineinfo = tma_recipe();
  with_lineinfo.options.line_info = true;
  keys.push_back(jit::cache_key(jit::key_inputs(with_lineinfo)));
  CHECK(std::set<std::string>(keys.begin(), keys.end()).size() == keys.size());
}

TEST_CASE("cache key: each field of the record matters", "[cache][key]") {
  const jit::KeyInputs base = jit::key_inputs(tma_recipe());
  const std::string k0 = jit::cache_key(base);
  auto differs = [&](auto mutate) {
    jit::KeyInputs in = base;
    mutate(in);
    return jit::cache_key(in) != k0;
  };
  CHECK(differs([](auto& in) { in.attnjit_version += "+1"; }));
  CHECK(differs([](auto& in) { in.template_id += "x"; }));
  CHECK(differs([](auto& in) { in.config_json += " "; }));
  CHECK(differs([](auto& in) { in.source += "\n"; }));
  CHECK(differs([](auto& in) { in.embedded_headers[0] ^= 1; }));
  CHECK(differs([](auto& in) { in.toolkit_headers[0] ^= 1; }));
  CHECK(differs([](auto& in) { in.nvrtc_version = "13.1"; }));
  CHECK(differs([](auto& in) { in.arch = "sm_100a"; }));
  CHECK(differs([](auto& in) { in.options.push_back("-G"); }));
  // Length prefixes: moving a byte from one field to the next is a different record.
  jit::KeyInputs x = base, y = base;
  x.options = {"-DAB", "-DC"};
  y.options = {"-DA", "B-DC"};
  CHECK(jit::cache_key(x) != jit::cache_key(y));
}

TEST_CASE("cache key: embedded header content is hashed", "[cache][key]") {
  const auto files = jit::embedded_templates();
  REQUIRE_FALSE(files.empty());
  std::vector<std::string> contents;
  for (const auto& f : files) contents.emplace_back(f.content);
  auto hash_with = [&](size_t changed, const std::string& text) {
    std::vector<jit::EmbeddedFile> copy(files.begin(), files.end());
    copy[changed].content = text;
    return jit::embedded_headers_hash(copy);
  };
  const std::string h0 = jit::embedded_headers_hash(files);
  CHECK(h0 == jit::process_inputs().embedded_headers);
  CHECK(hash_with(0, contents[0]) == h0);
  CHECK(hash_with(0, contents[0] + " ") != h0);
  CHECK(hash_with(files.size() - 1, contents.back() + "// edit") != h0);
  // Order of the table does not matter; one file fewer does.
  std::vector<jit::EmbeddedFile> reversed(files.rbegin(), files.rend());
  CHECK(jit::embedded_headers_hash(reversed) == h0);
  CHECK(jit::embedded_headers_hash(std::span(files.data(), files.size() - 1)) != h0);
}

TEST_CASE("cache key: toolkit headers by content, not location", "[cache][key]") {
  namespace fs = std::filesystem;
  test::ScratchDir scratch;
  const std::string real = jit::toolkit().include_dir;
  auto copy_to = [&](const std::string& name) {
    const fs::path dir = scratch.path / name / "include";
    for (const std::string& rel : jit::toolkit_key_headers()) {
      fs::create_directories((dir / rel).parent_path());
      fs::copy_file(fs::path(real) / rel, dir / rel);
    }
    return dir;
  };
  const fs::path a = copy_to("a"), b = copy_to("deeper/b");
  const std::string h = jit::toolkit_headers_hash(real);
  CHECK(h == jit::process_inputs().toolkit_headers);
  CHECK(jit::toolkit_headers_hash(a.string()) == h);  // moved toolkit: same hash
  CHECK(jit::toolkit_headers_hash(b.string()) == h);
  for (const std::string& rel : jit::toolkit_key_headers()) {
    INFO(rel);
    const std::string text = test::read_text(b / rel);
    test::write_text(b / rel, text + "\n// patched\n");
    CHECK(jit::toolkit_headers_hash(b.string()) != h);
    test::write_text(b / rel, text);
  }
  fs::remove(a / "cuda_fp8.hpp");
  CHECK(jit::toolkit_headers_hash(a.string()) != h);  // a missing header is a change too
}

TEST_CASE("cache key: options lose their -I paths; the record names no path", "[cache][key]") {
  CHECK(jit::normalize_options({"-I/usr/local/cuda/include", "-std=c++20", "--include-path=/x",
                                  "-DX=1"}) == std::vector<std::string>{"-std=c++20", "-DX=1"});
  // normalized_options() predicts exactly what a real compile passed, minus -I.
  jit::KernelRecipe r = tma_recipe();
  r.options.line_info = true;
  r.options.extra = {"-DATTNJIT_TEST_OPTION=1"};
  const jit::CompiledKernel k = jit::compile_recipe(r);
  CHECK(jit::normalize_options(k.options) == jit::normalized_options(r.options));
  // Nothing in the record depends on where the toolkit, the sources or the build live,
  // so a build from another directory (or a moved install) computes the same key.
  const std::string record = cache::to_json(jit::to_record(jit::key_inputs(r))).dump();
  CHECK(record.find(jit::toolkit().root) == std::string::npos);
  CHECK(record.find(ATTNJIT_SOURCE_DIR) == std::string::npos);
  CHECK(record.find(std::filesystem::current_path().string()) == std::string::npos);
}

TEST_CASE("cache sizes: 500M, 10G and friends", "[cache]") {
  CHECK(cache::parse_size("4096", "x") == 4096);
  CHECK(cache::parse_size("64K", "x") == 64u << 10);
  CHECK(cache::parse_size("500M", "x") == 500ull << 20);
  CHECK(cache::parse_size("10G", "x") == 10ull << 30);
  CHECK(cache::parse_size("10gb", "x") == 10ull << 30);
  CHECK(cache::parse_size("1.5G", "x") == 3ull << 29);
  CHECK(cache::parse_size("2TiB", "x") == 2ull << 40);
  for (const char* bad : {"", "G", "10X", "ten", "1.2.3M", "-5M"})
    REQUIRE_ERROR(cache::parse_size(bad, "ATTNJIT_CACHE_MAX_SIZE"), ErrorKind::kCache,
                  "ATTNJIT_CACHE_MAX_SIZE", "500M");
}

// A key changes only through a stated kKeyRecordVersion bump. This record's key and JSON
// were computed by the code from before the JIT built the record and the cache only hashed
// it (bdabe3f), so any change to the hashing, the field names or their order fails here.
TEST_CASE("cache key: the record's hashing and layout are pinned", "[cache][key]") {
  jit::KeyInputs in;
  in.attnjit_version = "0.1.0";
  in.template_id = "tma_copy:tma_copy/tma_copy.cuh:attnjit::tma_copy::kernel";
  in.config_json = R"({"dtype":"bf16","block_m":64})";
  in.source = "// Generated by attnjit. op: tma_copy\n";
  in.embedded_headers = std::string(64, 'e');
  in.toolkit_headers = std::string(64, 't');
  in.nvrtc_version = "13.0";
  in.arch = "sm_90a";
  in.options = {"--gpu-architecture=sm_90a", "-std=c++20", "--ptxas-options=--verbose"};
  CHECK(jit::kKeyRecordVersion == 1);
  CHECK(jit::cache_key(in) == "fcc5bf5a3ccd22c3288de428f866704e2158db7324b88e2d36a6ff89ebf9b1b4");
  CHECK(cache::to_json(jit::to_record(in)).dump() ==
        R"({"record_version":1,)"
        R"("attnjit_version":"0.1.0",)"
        R"("template_id":"tma_copy:tma_copy/tma_copy.cuh:attnjit::tma_copy::kernel",)"
        R"("config":"{\"dtype\":\"bf16\",\"block_m\":64}",)"
        R"("source":"// Generated by attnjit. op: tma_copy\n",)"
        R"("embedded_headers":"eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee",)"
        R"("toolkit_headers":"tttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttt",)"
        R"("nvrtc":"13.0",)"
        R"("arch":"sm_90a",)"
        R"("options":["--gpu-architecture=sm_90a",)"
        R"("-std=c++20",)"
        R"("--ptxas-options=--verbose"]})");
}

// Every default variant's record carries the contract's fields (docs/design.md, "The disk
// cache contract"), in the pinned order, with this process's values.
TEST_CASE("cache key: every default variant's record has the contract's fields",
          "[cache][key]") {
  const std::vector<std::string> names = {
      "record_version", "attnjit_version", "template_id",     "config", "source",
      "embedded_headers", "toolkit_headers", "nvrtc", "arch", "options"};
  const jit::ProcessInputs& p = jit::process_inputs();
  const auto [nvrtc_major, nvrtc_minor] = jit::nvrtc_version();
  int variants = 0;
  for (const ops::OpSpec& op : ops::registry()) {
    if (!op.supports(kSm90a)) continue;
    for (const nlohmann::json& config : op.default_set()) {
      INFO(op.name << " " << config.dump());
      const jit::KernelRecipe r = op.recipe(config, kSm90a);
      const nlohmann::ordered_json j = cache::to_json(jit::to_record(jit::key_inputs(r)));
      std::vector<std::string> got;
      for (const auto& [name, value] : j.items()) got.push_back(name);
      CHECK(got == names);
      CHECK(j["record_version"] == 1);
      CHECK(j["attnjit_version"] == p.attnjit_version);
      CHECK(j["attnjit_version"] != "unknown");
      CHECK(j["template_id"] ==
            fmt::format("{}:{}:{}", r.source.op, r.source.header, r.source.kernel));
      CHECK(j["config"] == r.source.config_json);
      // The record names the kernel's config in the op that owns the template (a
      // mla_prefill_sparse config runs mla_decode_sparse's kernel), canonical there.
      const nlohmann::json recorded = nlohmann::json::parse(j["config"].get<std::string>());
      const ops::OpSpec& owner = ops::find_op(r.source.op);
      CHECK(owner.canonicalize(recorded) == recorded);
      if (&owner == &op) CHECK(recorded == config);
      CHECK(j["source"] == jit::translation_unit(r.source));
      CHECK(j["embedded_headers"] == jit::embedded_headers_hash(jit::embedded_templates()));
      CHECK(j["toolkit_headers"] == jit::toolkit_headers_hash(jit::toolkit().include_dir));
      CHECK(j["nvrtc"] == fmt::format("{}.{}", nvrtc_major, nvrtc_minor));
      CHECK(j["arch"] == "sm_90a");
      CHECK(j["options"] == std::vector<std::string>{"--gpu-architecture=sm_90a", "-std=c++20",
                                                     "--ptxas-options=--verbose"});
      ++variants;
    }
  }
  CHECK(variants > 0);
  // tma_copy's template id, spelled out once.
  CHECK(cache::to_json(jit::to_record(jit::key_inputs(tma_recipe())))["template_id"] ==
        "tma_copy:tma_copy/tma_copy.cuh:attnjit::tma_copy::kernel");
}
