// libFuzzer target: a disk cache entry's meta.json, as the cache verifies it
// (cache::read_entry), the JIT decodes it into a kernel (jit::kernel_from_entry, also
// `attnjit cache verify`'s check) and `attnjit cache ls` summarizes it
// (jit::entry_summary).
//
// The input is meta.json's text. The target plays the publisher for everything else —
// kernel.cubin (fixed bytes) and a COMMITTED marker with the right hashes, the key taken
// from the meta's own key record when it has one — so the fuzzer's bytes reach the JSON
// checks behind the marker instead of all stopping at the hash comparison.
//
// Contract: read_entry and kernel_from_entry never throw for a bad entry (they answer
// corrupt / a reason); entry_summary never throws for any text.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "cache/entry.hpp"
#include "cache/hash.hpp"
#include "fuzz_support.hpp"
#include "jit/cache_client.hpp"

namespace {

using attnjit::fuzz::finding;
namespace cache = attnjit::cache;

constexpr std::string_view kCubin = "\x7f" "ELF fuzz cubin";

void write(const std::string& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) std::abort();
  if (::write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) std::abort();
  ::close(fd);
}

const std::string& entry_dir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string d = std::string(tmp && *tmp ? tmp : "/tmp") + "/attnjit_fuzz_entry_" +
                    std::to_string(::getpid());
    ::mkdir(d.c_str(), 0755);
    write(d + "/" + cache::kCubinFile, kCubin);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string meta_text = attnjit::fuzz::text_of(data, size);
  const std::string& dir = entry_dir();

  // What a publisher would have named: the key of the meta's record and its arch.
  std::string key(64, '0'), arch = "sm_90a";
  cache::KeyRecord record;
  const auto meta = nlohmann::ordered_json::parse(meta_text, nullptr, false);
  if (meta.is_object()) {
    try {
      record = cache::key_record_from_json(meta.at("record"));
      key = cache::cache_key(record);
      if (const std::string* a = record.text("arch")) arch = *a;
    } catch (const nlohmann::json::exception&) {
    } catch (const attnjit::Error&) {
    }
  }
  write(dir + "/" + cache::kMetaFile, meta_text);
  write(dir + "/" + cache::kMarkerFile,
        "attnjit cache entry v1\nkey " + key + "\ncubin-sha256 " + cache::sha256_hex(kCubin) +
            "\nmeta-sha256 " + cache::sha256_hex(meta_text) + "\n");

  attnjit::jit::CompiledKernel kernel;
  const auto check = [&](const cache::Entry& e) { return attnjit::jit::kernel_from_entry(e, kernel); };
  try {
    (void)cache::read_entry(dir, key, arch, check);
    // The JIT's decoding also on metas the cache refused (another arch, a wrong size...).
    if (meta.is_object()) {
      cache::Entry e{key, arch, dir, std::string(kCubin), meta, record};
      (void)attnjit::jit::kernel_from_entry(e, kernel);
    }
  } catch (const std::exception& e) {
    finding("reading an entry threw", e.what());
  }
  try {
    (void)attnjit::jit::entry_summary(meta_text);
  } catch (const std::exception& e) {
    finding("entry_summary threw", e.what());
  }
  return 0;
}
