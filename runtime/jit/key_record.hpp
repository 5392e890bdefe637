#pragma once
// The disk cache key record of a kernel: everything that decides its cubin's bytes, as
// the cache contract lists it (docs/design.md, docs/cache.md "The key"). The JIT builds it;
// the cache only hashes and stores it (cache/key.hpp). Every input is explicit
// (KeyInputs), so tests vary one at a time; key_inputs() fills them for a recipe in this
// process.
//
// Deliberately absent: mtimes and absolute paths (the -I options name the toolkit's
// location, which is covered by the content of its headers instead). Moving the install
// or building from another directory still hits; editing any header misses.
#include <span>
#include <string>
#include <vector>

#include "cache/key.hpp"
#include "jit/compiler.hpp"
#include "jit/embedded.hpp"
#include "jit/kernel_table.hpp"

namespace attnjit::jit {

// Bump when the record's layout or the meaning of a field changes: every key changes.
inline constexpr int kKeyRecordVersion = 1;

struct KeyInputs {
  std::string attnjit_version;       // ATTNJIT_VERSION of the library
  std::string template_id;           // "<op>:<header>:<kernel template>"
  std::string config_json;           // canonical config
  std::string source;                // the generated translation unit
  std::string embedded_headers;      // embedded_headers_hash()
  std::string toolkit_headers;       // toolkit_headers_hash()
  std::string nvrtc_version;         // "13.0"
  std::string arch;                  // "sm_90a"
  std::vector<std::string> options;  // normalize_options(): NVRTC options minus -I paths
};

// The record the cache hashes and stores: version kKeyRecordVersion, fields in this
// order (their names are the ones meta.json shows): attnjit_version, template_id,
// config, source, embedded_headers, toolkit_headers, nvrtc, arch, options.
cache::KeyRecord to_record(const KeyInputs& in);
// Back from a stored record; throws Error(kCache) naming a missing or mistyped field or
// another record version.
KeyInputs key_inputs_from_record(const cache::KeyRecord& record);

// cache::cache_key(to_record(in)): 64 hex digits.
std::string cache_key(const KeyInputs& in);

// Content hash of a set of embedded headers: (path, content) pairs in path order.
std::string embedded_headers_hash(std::span<const EmbeddedFile> files);

// The toolkit headers whose content enters the key, relative to <toolkit>/include:
// cuda_bf16/fp16/fp8 .h and .hpp, and CCCL's version header (CCCL ships as one
// versioned release, so its version stands for cuda/ptx, cuda/std/... that templates
// include). A missing file hashes as "missing", which is itself a distinct key.
const std::vector<std::string>& toolkit_key_headers();
std::string toolkit_headers_hash(const std::string& include_dir);

// NVRTC options with the -I<path> entries removed (absolute paths of this machine).
std::vector<std::string> normalize_options(const std::vector<std::string>& nvrtc_options);
// The normalized options compile() will pass for `opts` (computed without compiling; a
// test checks it against a real compile's option list, so the two cannot drift apart).
std::vector<std::string> normalized_options(const CompileOptions& opts);

// The parts of the key that are the same for every kernel of a process, computed once
// (hashing the toolkit headers is the only costly step, ~1 ms).
struct ProcessInputs {
  std::string attnjit_version;
  std::string embedded_headers;
  std::string toolkit_headers;
  std::string nvrtc_version;
  double setup_ms = 0;  // how long computing them took
};
// Throws Error(kCompile) when no toolkit is found (then nothing could be compiled either).
const ProcessInputs& process_inputs();

// All inputs for one recipe in this process.
KeyInputs key_inputs(const KernelRecipe& recipe);

}  // namespace attnjit::jit
