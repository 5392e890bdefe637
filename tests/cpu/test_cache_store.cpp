// The disk cache through its API (no GPU): publish and hit, corruption and crashes never
// loaded, quarantine and rebuild, lost publish races, LRU pruning, trust checks, strict
// mode and read-only roots.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "cache/cache.hpp"
#include "cache/entry.hpp"
#include "cache/hash.hpp"
#include "cache/root.hpp"
#include "jit/cache_client.hpp"
#include "jit/key_record.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "test_cache_support.hpp"

using namespace attnjit;
using attnjit::test::ScopedEnv;
using attnjit::test::ScratchDir;
using attnjit::test::tma_recipe;
namespace fs = std::filesystem;

namespace {

size_t count_dirs(const fs::path& p) {
  std::error_code ec;
  size_t n = 0;
  for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

void set_mtime(const std::string& path, time_t t) {
  const timespec times[2] = {{t, 0}, {t, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

std::string_view cubin_of(const jit::CompiledKernel& k) { return {k.cubin.data(), k.cubin.size()}; }

// What a fresh process finds: a new Cache on `root`.
jit::CachedKernel compile_in(const std::string& root, const jit::KernelRecipe& recipe) {
  cache::Cache c = cache::Cache::open(root);
  return jit::ensure_compiled(c, recipe);
}

// A synthetic entry (no NVRTC): distinct record, `bytes` of fake cubin.
std::string fake_entry(const cache::Cache& c, const std::string& tag, size_t bytes) {
  jit::KeyInputs in = jit::key_inputs(tma_recipe());
  in.config_json = tag;
  jit::CompiledKernel k;
  k.op = "fake";
  k.arch = kSm90a;
  k.lowered_name = "_Z4fakev";
  k.cubin.assign(bytes, 'x');
  const std::string key = jit::cache_key(in);
  REQUIRE(cache::publish_entry(c.root(), key, jit::to_record(in), cubin_of(k),
                               jit::entry_meta(in, k, 0)));
  return cache::entry_dir(c.root(), in.arch, key);
}

}  // namespace

TEST_CASE("cache: a miss compiles and publishes, the next lookup hits", "[cache][nvrtc]") {
  ScratchDir scratch;
  cache::Cache c = cache::Cache::open(scratch.root());
  struct stat st {};
  REQUIRE(::stat(scratch.root().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);  // created private
  CHECK_FALSE(c.settings().read_only);

  const jit::CachedKernel first = jit::ensure_compiled(c, tma_recipe());
  CHECK(first.from == jit::CachedKernel::From::kCompiled);
  const std::string dir = cache::entry_dir(c.root(), "sm_90a", first.key);
  CHECK(dir == (fs::path(c.root()) / "sm_90a" / first.key.substr(0, 2) / first.key).string());
  for (const char* f : {cache::kCubinFile, cache::kMetaFile, cache::kMarkerFile})
    CHECK(fs::exists(fs::path(dir) / f));
  CHECK(count_dirs(fs::path(c.root()) / "tmp") == 0);  // nothing left behind

  const nlohmann::json meta = nlohmann::json::parse(test::read_text(fs::path(dir) / "meta.json"));
  CHECK(meta["op"] == "tma_copy");
  CHECK(meta["arch"] == "sm_90a");
  CHECK(meta["config"] == test::tma_config());
  CHECK(meta["registers"].get<int>() > 0);
  CHECK(meta["spill_bytes"] == 0);
  CHECK(meta["compile_ms"].get<double>() > 0);
  CHECK(meta["dynamic_smem_bytes"].get<unsigned>() == tma_recipe().dynamic_smem_bytes);
  CHECK(meta["cubin_sha256"] == cache::sha256_hex(test::read_text(fs::path(dir) / "kernel.cubin")));
  CHECK(meta["record"]["source"] == jit::translation_unit(tma_recipe().source));

  const jit::CachedKernel again = jit::ensure_compiled(c, tma_recipe());
  CHECK(again.hit());
  CHECK(again.key == first.key);
  CHECK(again.kernel.cubin == first.kernel.cubin);
  CHECK(again.kernel.lowered_name == first.kernel.lowered_name);
  CHECK(again.kernel.ptxas.registers == first.kernel.ptxas.registers);
  // A second process (a new Cache on the same root) hits too.
  CHECK(compile_in(scratch.root(), tma_recipe()).hit());
}

TEST_CASE("cache: flipped or truncated cubin, meta and marker are quarantined and rebuilt",
          "[cache][nvrtc]") {
  ScratchDir scratch;
  cache::Cache c = cache::Cache::open(scratch.root());
  const jit::CachedKernel good = jit::ensure_compiled(c, tma_recipe());
  const fs::path dir = cache::entry_dir(c.root(), "sm_90a", good.key);
  const std::string files[] = {cache::kCubinFile, cache::kMetaFile, cache::kMarkerFile};
  size_t quarantined = 0;
  for (const std::string& file : files) {
    for (const char* damage : {"flip", "truncate", "remove"}) {
      INFO(file << ": " << damage);
      const std::string text = test::read_text(dir / file);
      if (std::string(damage) == "flip") {
        std::string bad = text;
        bad[bad.size() / 2] ^= 0x01;  // one bit
        test::write_text(dir / file, bad);
      } else if (std::string(damage) == "truncate") {
        test::write_text(dir / file, text.substr(0, text.size() - 1));
      } else {
        fs::remove(dir / file);
      }
      CHECK(cache::read_entry(dir.string(), good.key, "sm_90a").status ==
            cache::ReadResult::Status::kCorrupt);
      const jit::CachedKernel rebuilt = jit::ensure_compiled(c, tma_recipe());
      CHECK_FALSE(rebuilt.hit());  // never loaded
      CHECK(rebuilt.kernel.cubin == good.kernel.cubin);
      CHECK(count_dirs(fs::path(c.root()) / "quarantine") == ++quarantined);
      CHECK(jit::ensure_compiled(c, tma_recipe()).hit());  // the rebuilt entry is good
    }
  }
  // The quarantine says why.
  const fs::directory_entry q = *fs::directory_iterator(fs::path(c.root()) / "quarantine");
  CHECK_FALSE(test::read_text(q.path() / "REASON").empty());
  const cache::VerifyReport v = c.verify();
  CHECK(v.entries == 1);
  CHECK(v.ok == 1);
  CHECK(v.corrupt == 0);
}

TEST_CASE("cache: a meta.json that does not match its key is refused", "[cache][nvrtc]") {
  ScratchDir scratch;
  cache::Cache c = cache::Cache::open(scratch.root());
  const jit::CachedKernel good = jit::ensure_compiled(c, tma_recipe());
  const fs::path dir = cache::entry_dir(c.root(), "sm_90a", good.key);
  nlohmann::json meta = nlohmann::json::parse(test::read_text(dir / "meta.json"));
  SECTION("a record edited to claim another config") {
    // Forged consistently: the marker is rewritten to match the new meta.json, so only
    // the key record check can catch it.
    meta["record"]["config"] = "{\"forged\":1}";
    const std::string text = meta.dump();
    test::write_text(dir / "meta.json", text);
    std::string marker = test::read_text(dir / "COMMITTED");
    const size_t at = marker.find("meta-sha256 ") + 12;
    marker.replace(at, 64, cache::sha256_hex(text));
    test::write_text(dir / "COMMITTED", marker);
    const auto r = cache::read_entry(dir.string(), good.key, "sm_90a");
    CHECK(r.status == cache::ReadResult::Status::kCorrupt);
    CHECK(r.reason.find("does not hash to the key") != std::string::npos);
  }
  SECTION("an entry copied under another arch") {
    fs::create_directories(fs::path(c.root()) / "sm_100a" / good.key.substr(0, 2));
    const fs::path other = cache::entry_dir(c.root(), "sm_100a", good.key);
    fs::copy(dir, other);
    CHECK(cache::read_entry(other.string(), good.key, "sm_100a").status ==
          cache::ReadResult::Status::kCorrupt);
  }
  SECTION("not JSON at all") {
    test::write_text(dir / "meta.json", "{\"format\": 1, ");
    CHECK(cache::read_entry(dir.string(), good.key, "sm_90a").status ==
          cache::ReadResult::Status::kCorrupt);
  }
}

TEST_CASE("cache: what a killed publisher leaves is never loaded", "[cache][nvrtc]") {
  ScratchDir scratch;
  cache::Cache c = cache::Cache::open(scratch.root());
  const std::string key = jit::cache_key(jit::key_inputs(tma_recipe()));
  const fs::path dir = cache::entry_dir(c.root(), "sm_90a", key);
  SECTION("a half-written entry in tmp/ is invisible") {
    const fs::path tmp = fs::path(c.root()) / "tmp" / (key.substr(0, 16) + "-999-0-0");
    fs::create_directories(tmp);
    test::write_text(tmp / "kernel.cubin",
                     "\x7f"
                     "ELF partial");
    CHECK(c.entries().empty());
    CHECK(c.stats().tmp_dirs == 1);
    CHECK_FALSE(jit::ensure_compiled(c, tma_recipe()).hit());
    CHECK(jit::ensure_compiled(c, tma_recipe()).hit());
    // prune leaves recent tmp dirs (they may be a live publish) and deletes stale ones.
    CHECK(c.prune(cache::kDefaultMaxSize).cleaned == 0);
    set_mtime(tmp.string(), ::time(nullptr) - 7200);
    CHECK(c.prune(cache::kDefaultMaxSize).cleaned == 1);
    CHECK_FALSE(fs::exists(tmp));
  }
  SECTION("an entry directory without its marker is quarantined") {
    const jit::CachedKernel good = compile_in(scratch.root(), tma_recipe());
    fs::remove(dir / cache::kMarkerFile);
    const jit::CachedKernel again = jit::ensure_compiled(c, tma_recipe());
    CHECK_FALSE(again.hit());
    CHECK(count_dirs(fs::path(c.root()) / "quarantine") == 1);
    CHECK(fs::exists(dir / cache::kMarkerFile));
  }
}

TEST_CASE("cache: losing a publish race keeps the winner's entry", "[cache][nvrtc]") {
  ScratchDir scratch;
  cache::Cache c = cache::Cache::open(scratch.root());
  const jit::KernelRecipe r = tma_recipe();
  const jit::KeyInputs in = jit::key_inputs(r);
  const std::string key = jit::cache_key(in);
  const jit::CompiledKernel k = jit::compile_recipe(r);
  const nlohmann::ordered_json meta = jit::entry_meta(in, k, r.dynamic_smem_bytes);
  CHECK(cache::publish_entry(c.root(), key, jit::to_record(in), cubin_of(k), meta));
  CHECK_FALSE(cache::publish_entry(c.root(), key, jit::to_record(in), cubin_of(k), meta));  // lost: fine
  CHECK(count_dirs(fs::path(c.root()) / "tmp") == 0);
  CHECK(c.verify().ok == 1);
  CHECK(jit::ensure_compiled(c, r).hit());
}

TEST_CASE("cache: prune removes least recently used entries first", "[cache]") {
  ScratchDir scratch;
  cache::Cache c = cache::Cache::open(scratch.root());
  const std::string a = fake_entry(c, "a", 10000), b = fake_entry(c, "b", 10000),
                    d = fake_entry(c, "d", 10000);
  const time_t now = ::time(nullptr);
  set_mtime(a, now - 300);  // oldest
  set_mtime(b, now - 100);
  set_mtime(d, now - 200);
  // A hit stamps recency: `a` becomes the newest.
  cache::stamp_used(a);
  const uint64_t one = c.entries().front().bytes;
  const cache::PruneReport r = c.prune(2 * one + one / 2);  // room for two
  CHECK(r.removed == 1);
  CHECK(r.kept == 2);
  CHECK_FALSE(fs::exists(d));
  CHECK(fs::exists(a));
  CHECK(fs::exists(b));
  CHECK(c.prune(one).removed == 1);  // then b (older than a)
  CHECK(fs::exists(a));
  CHECK_FALSE(fs::exists(b));
  CHECK(c.prune(0).kept == 0);
  CHECK(c.entries().empty());
}

TEST_CASE("cache: a hit from disk stamps the entry's recency", "[cache][nvrtc]") {
  ScratchDir scratch;
  cache::Cache c = cache::Cache::open(scratch.root());
  const jit::CachedKernel first = jit::ensure_compiled(c, tma_recipe());
  const std::string dir = cache::entry_dir(c.root(), "sm_90a", first.key);
  set_mtime(dir, 1000000);
  REQUIRE(c.entries().front().last_used == 1000000);
  CHECK(jit::ensure_compiled(c, tma_recipe()).hit());
  CHECK(c.entries().front().last_used > 1000000);
}

TEST_CASE("cache: the size cap prunes when a publish exceeds it", "[cache][nvrtc]") {
  ScratchDir scratch;
  ScopedEnv cap("ATTNJIT_CACHE_MAX_SIZE", "30K");
  cache::Cache c = cache::Cache::open(scratch.root());
  CHECK(c.settings().max_size == 30 << 10);
  const std::string old = fake_entry(c, "old", 20000);
  set_mtime(old, ::time(nullptr) - 1000);
  jit::ensure_compiled(c, tma_recipe());  // ~15 KB more: over the cap, the old one goes
  CHECK_FALSE(fs::exists(old));
  CHECK(c.entries().size() == 1);
}

TEST_CASE("cache: unsafe roots are refused, naming the problem", "[cache]") {
  ScratchDir scratch;
  const std::string root = scratch.root();
  cache::Cache::open(root);  // creates it 0700
  ::chmod(root.c_str(), 0777);
  REQUIRE_ERROR(cache::Cache::open(root), ErrorKind::kCache, root.c_str(),
                "writable by group and others", "0777", "chmod go-w");
  ::chmod(root.c_str(), 0720);
  REQUIRE_ERROR(cache::Cache::open(root), ErrorKind::kCache, "writable by group", "0720");
  ::chmod(root.c_str(), 0702);
  REQUIRE_ERROR(cache::Cache::open(root), ErrorKind::kCache, "writable by others");
  ::chmod(root.c_str(), 0755);  // readable by others is fine
  CHECK_NOTHROW(cache::Cache::open(root));
  // Owned by someone else (only root can arrange that here).
  if (::geteuid() == 0) {
    REQUIRE(::chown(root.c_str(), 12345, 12345) == 0);
    REQUIRE_ERROR(cache::Cache::open(root), ErrorKind::kCache, "owned by", "uid 12345",
                  "not by the current user");
    REQUIRE(::chown(root.c_str(), 0, 0) == 0);
  }
  // A file is not a root.
  test::write_text(scratch.path / "file", "x");
  REQUIRE_ERROR(cache::Cache::open((scratch.path / "file").string()), ErrorKind::kCache,
                "not a directory");
}

TEST_CASE("cache: the root comes from --cache-dir, the environment, XDG, HOME", "[cache]") {
  ScopedEnv dir("ATTNJIT_CACHE_DIR", nullptr), xdg("XDG_CACHE_HOME", nullptr),
      home("HOME", "/home/someone");
  CHECK(cache::resolve_root("").first == "/home/someone/.cache/attnjit");
  {
    ScopedEnv x("XDG_CACHE_HOME", "relative/ignored");
    CHECK(cache::resolve_root("").first == "/home/someone/.cache/attnjit");
  }
  ScopedEnv x("XDG_CACHE_HOME", "/xdg");
  CHECK(cache::resolve_root("") ==
        std::pair<std::string, std::string>{"/xdg/attnjit", "XDG_CACHE_HOME"});
  ScopedEnv d("ATTNJIT_CACHE_DIR", "/env/cache");
  CHECK(cache::resolve_root("").first == "/env/cache");
  CHECK(cache::resolve_root("/flag/dir").first == "/flag/dir");
  CHECK(cache::resolve_root("/flag/dir").second == "--cache-dir");
}

TEST_CASE("cache: strict mode turns a miss into an error with the precompile line",
          "[cache][nvrtc]") {
  ScratchDir scratch;
  {
    ScopedEnv strict("ATTNJIT_NO_COMPILE", "1");
    cache::Cache c = cache::Cache::open(scratch.root());
    CHECK(c.settings().strict);
    const std::string config = tma_recipe().source.config_json;
    REQUIRE_ERROR(jit::ensure_compiled(c, tma_recipe()), ErrorKind::kCache, "ATTNJIT_NO_COMPILE",
                  "op 'tma_copy'", config.c_str(), "sm_90a",
                  "attnjit precompile --op tma_copy --config '", "--arch sm_90a --cache-dir");
    CHECK(c.entries().empty());
  }
  compile_in(scratch.root(), tma_recipe());
  ScopedEnv strict("ATTNJIT_NO_COMPILE", "1");
  CHECK(compile_in(scratch.root(), tma_recipe()).hit());
}

TEST_CASE("cache: a read-only root serves hits and compiles misses into memory", "[cache][nvrtc]") {
  ScratchDir scratch;
  compile_in(scratch.root(), tma_recipe());
  auto check_read_only = [&](cache::Cache c) {
    REQUIRE(c.settings().read_only);
    CHECK(jit::ensure_compiled(c, tma_recipe()).hit());
    const time_t stamp = c.entries().front().last_used;
    const jit::CachedKernel miss = jit::ensure_compiled(c, tma_recipe({{"stages", 3}}));
    CHECK(miss.from == jit::CachedKernel::From::kCompiledNotStored);
    CHECK_FALSE(miss.kernel.cubin.empty());
    CHECK(c.entries().size() == 1);  // nothing written
    CHECK(c.entries().front().last_used == stamp);
    CHECK_THROWS_AS(c.prune(0), Error);
  };
  // Root ignores permission bits, so as root read-only is simulated with the switch
  // (which is also how a user marks a shared cache as not theirs to write).
  {
    ScopedEnv ro("ATTNJIT_CACHE_READ_ONLY", "1");
    check_read_only(cache::Cache::open(scratch.root()));
  }
  if (::geteuid() != 0) {
    ::chmod(scratch.root().c_str(), 0555);
    check_read_only(cache::Cache::open(scratch.root()));
    ::chmod(scratch.root().c_str(), 0700);
  }
  // A root that cannot even be created is an empty read-only cache, not a failure.
  {
    ScopedEnv ro("ATTNJIT_CACHE_READ_ONLY", nullptr);
    test::write_text(scratch.path / "blocker", "x");
    cache::Cache c = cache::Cache::open((scratch.path / "blocker" / "cache").string());
    CHECK(c.settings().read_only);
    CHECK(c.settings().read_only_reason.find("cannot create") != std::string::npos);
  }
}

TEST_CASE("cache: a kernel that cannot be stored is still returned", "[cache][nvrtc]") {
  ScratchDir scratch;
  cache::Cache c = cache::Cache::open(scratch.root());
  test::write_text(fs::path(c.root()) / "sm_90a", "a file where the arch folder goes");
  const jit::CachedKernel r = jit::ensure_compiled(c, tma_recipe());
  CHECK(r.from == jit::CachedKernel::From::kCompiledNotStored);
  CHECK_FALSE(r.store_error.empty());
  CHECK_FALSE(r.kernel.cubin.empty());
  CHECK(c.entries().empty());
  CHECK(count_dirs(fs::path(c.root()) / "tmp") == 0);  // the half-built entry is gone
}

TEST_CASE("cache: symlinks in the root are never followed for reading or writing",
          "[cache][nvrtc]") {
  ScratchDir scratch;
  const fs::path outside = scratch.path / "outside";
  fs::create_directories(outside);
  const jit::CachedKernel first = compile_in(scratch.root(), tma_recipe());
  const fs::path dir = cache::entry_dir(scratch.root(), "sm_90a", first.key);
  // A good copy of the entry outside the root: if a symlink were followed, it would verify.
  fs::copy(dir, outside / "copy");
  auto outside_untouched = [&] {
    for (const char* f : {cache::kCubinFile, cache::kMetaFile, cache::kMarkerFile})
      CHECK(fs::is_regular_file(outside / "copy" / f));
    CHECK_FALSE(fs::exists(outside / "copy" / "REASON"));
  };

  SECTION("an entry swapped for a symlink is refused and the link quarantined") {
    fs::remove_all(dir);
    fs::create_directory_symlink(outside / "copy", dir);
    const jit::CachedKernel again = compile_in(scratch.root(), tma_recipe());
    CHECK(again.from == jit::CachedKernel::From::kCompiled);  // not a hit through the link
    CHECK_FALSE(fs::is_symlink(dir));
    outside_untouched();
  }
  SECTION("a marker or cubin that is a symlink is refused") {
    for (const char* f : {cache::kMarkerFile, cache::kCubinFile}) {
      fs::remove(dir / f);
      fs::create_symlink(outside / "copy" / f, dir / f);
      cache::Cache c = cache::Cache::open(scratch.root());
      const cache::VerifyReport r = c.verify();
      CHECK(r.corrupt == 1);
      REQUIRE(r.problems.size() == 1);
      CHECK(r.problems[0].second.find("is a symlink") != std::string::npos);
      CHECK(compile_in(scratch.root(), tma_recipe()).from == jit::CachedKernel::From::kCompiled);
    }
    outside_untouched();
  }
  SECTION("a symlinked arch folder is neither read nor moved nor written through") {
    const fs::path arch = fs::path(scratch.root()) / "sm_90a";
    fs::rename(arch, outside / "sm_90a");
    fs::create_directory_symlink(outside / "sm_90a", arch);
    cache::Cache c = cache::Cache::open(scratch.root());
    CHECK(c.entries().empty());
    const jit::CachedKernel r = jit::ensure_compiled(c, tma_recipe());
    CHECK(r.from == jit::CachedKernel::From::kCompiledNotStored);
    CHECK(r.store_error.find("is a symlink") != std::string::npos);
    CHECK(fs::is_directory(outside / "sm_90a" / first.key.substr(0, 2) / first.key));
  }
  SECTION("tmp/ and quarantine/ swapped for symlinks: no write and no delete outside") {
    test::write_text(outside / "precious", "keep me");
    set_mtime((outside / "precious").string(), ::time(nullptr) - 100000);  // "stale"
    fs::remove_all(fs::path(scratch.root()) / "tmp");
    fs::create_directory_symlink(outside, fs::path(scratch.root()) / "tmp");
    fs::create_directory_symlink(outside, fs::path(scratch.root()) / "quarantine");
    cache::Cache c = cache::Cache::open(scratch.root());
    const jit::CachedKernel r = jit::ensure_compiled(c, tma_recipe({{"stages", 3}}));
    CHECK(r.from == jit::CachedKernel::From::kCompiledNotStored);
    CHECK(r.store_error.find("is a symlink") != std::string::npos);
    c.prune(0);
    CHECK(test::read_text(outside / "precious") == "keep me");
    CHECK(count_dirs(outside) == 2);  // precious and copy: nothing added, nothing removed
  }
}
