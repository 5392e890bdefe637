// libFuzzer target: `attnjit precompile --manifest FILE` — the file's text goes through
// the CLI's own parse_manifest (tools/attnjit/manifest.cpp).
//
// Contract: a bad manifest throws cli::UsageError (exit code 2, naming the item), nothing
// else; every variant of an accepted manifest is a canonical config of its op.
#include "attnjit/error.hpp"
#include "fuzz_support.hpp"
#include "manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using attnjit::cli::UsageError;
  const std::string text = attnjit::fuzz::text_of(data, size);
  std::vector<attnjit::cli::ManifestVariant> variants;
  try {
    variants = attnjit::cli::parse_manifest(text, "fuzz.json", {attnjit::kSm90a});
  } catch (const UsageError&) {
    return 0;
  }
  for (const auto& v : variants) {
    try {
      if (v.op->canonicalize(v.config) != v.config)
        attnjit::fuzz::finding("a manifest variant is not canonical", v.config.dump());
    } catch (const attnjit::Error& e) {
      attnjit::fuzz::finding("a manifest variant is refused", v.config.dump() + " : " + e.what());
    }
  }
  return 0;
}
