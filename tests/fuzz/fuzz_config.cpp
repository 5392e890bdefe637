// libFuzzer target: op config JSON, as `attnjit precompile --config`, manifests, tuning
// candidates and the public Config::from_json read it. Input: one byte choosing the op,
// then the JSON text.
//
// Contract: a bad config throws attnjit::Error (nothing else); a config accepted once is
// canonical — canonicalizing its canonical form gives it back, and the public struct's
// to_json/from_json agree with the registry.
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "attnjit/ops/merge_states.hpp"
#include "attnjit/ops/mha_fwd.hpp"
#include "attnjit/ops/mla_decode.hpp"
#include "attnjit/ops/tma_copy.hpp"
#include "fuzz_support.hpp"
#include "ops/registry.hpp"

namespace {

using attnjit::Error;
using attnjit::fuzz::finding;

// The public API: from_json, validate, and the to_json/from_json round trip.
template <class Config>
void public_round_trip(std::string_view text) {
  Config c;
  try {
    c = Config::from_json(text);
    c.validate();
  } catch (const Error&) {
    return;
  }
  const std::string canon = c.to_json();
  Config again;
  try {
    again = Config::from_json(canon);
  } catch (const Error& e) {
    finding("from_json refuses its own to_json", canon + " : " + e.what());
  }
  if (!(again == c)) finding("to_json/from_json round trip differs", canon);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto& ops = attnjit::ops::registry();
  const attnjit::ops::OpSpec& op = ops[data[0] % ops.size()];
  const std::string text = attnjit::fuzz::text_of(data + 1, size - 1);

  if (op.name == "tma_copy") public_round_trip<attnjit::TmaCopyConfig>(text);
  if (op.name == "mla_decode") public_round_trip<attnjit::MlaDecodeConfig>(text);
  if (op.name == "mha_fwd") public_round_trip<attnjit::MhaFwdConfig>(text);
  if (op.name == "merge_states") public_round_trip<attnjit::MergeStatesConfig>(text);

  // The registry's path (precompile, manifests, the tuner): JSON value → canonical config
  // → kernel recipe (the source text and key inputs; nothing is compiled).
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return 0;
  nlohmann::json canon;
  try {
    canon = op.canonicalize(j);
  } catch (const Error&) {
    return 0;
  }
  try {
    if (op.canonicalize(canon) != canon) finding("canonicalize is not idempotent", canon.dump());
    for (const attnjit::Arch& arch : op.archs) (void)op.recipe(canon, arch);
  } catch (const Error& e) {
    finding("a canonical config is refused", canon.dump() + " : " + e.what());
  }
  return 0;
}
