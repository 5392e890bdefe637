// libFuzzer target: CLI shape strings — `attnjit bench --shape k=v,...`
// (cli::parse_shape_json) and `attnjit tune --shape` / --shapes items
// (tune::shape_from_text) — and what reads the resulting shape object: each tunable op's
// canonical_shape (tuning/shape.hpp's ShapeReader), bucket and default candidate.
//
// Contract: bad text or a bad shape throws attnjit::Error or tune::UsageError, nothing
// else; an accepted shape's canonical form is canonical again and has a bucket, and its
// default candidate is a valid candidate of the op.
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "cli.hpp"
#include "fuzz_support.hpp"
#include "ops/registry.hpp"
#include "tune/space.hpp"

namespace {

using attnjit::Error;
using attnjit::fuzz::finding;
using nlohmann::json;

void read_shape(const attnjit::ops::OpSpec& op, const json& shape) {
  json canon;
  try {
    canon = op.tuning.canonical_shape(shape);
  } catch (const Error&) {
    return;
  }
  try {
    if (op.tuning.canonical_shape(canon) != canon)
      finding("canonical_shape is not idempotent", canon.dump());
    if (op.tuning.bucket && op.tuning.bucket(canon).empty()) finding("empty bucket", canon.dump());
    if (!op.tuning.default_candidate) return;  // not tunable: the shape is all it reads
    const json def = op.tuning.default_candidate(canon);
    (void)attnjit::tune::canonical_candidate(op, def);
    if (op.tuning.prune) (void)op.tuning.prune(def, canon);
  } catch (const Error& e) {
    finding("a canonical shape or its default candidate is refused",
            canon.dump() + " : " + e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = attnjit::fuzz::text_of(data, size);
  std::vector<json> shapes;
  try {
    shapes.push_back(attnjit::cli::parse_shape_json(text));
  } catch (const Error&) {
  }
  try {
    shapes.push_back(attnjit::tune::shape_from_text(text));
  } catch (const attnjit::tune::UsageError&) {
  }
  for (const auto& op : attnjit::ops::registry())
    if (op.tuning.canonical_shape)
      for (const json& s : shapes) read_shape(op, s);
  return 0;
}
