// libFuzzer target: the tuning database file (tuning.json; runtime/tuning/db.cpp), as the
// runtime's Selector loads it and `attnjit precompile` turns its winners into variants.
//
// Contract: a corrupt file throws Error(kCache) from read_db (load_db warns and ignores
// it); nothing else escapes. An accepted database writes back (to_json) to a file that
// reads back the same, and its merges, lookups and tuned variants never throw.
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "attnjit/ops/mha_fwd.hpp"
#include "attnjit/ops/mla_decode.hpp"
#include "attnjit/ops/tma_copy.hpp"
#include "fuzz_support.hpp"
#include "tune/tuned_variants.hpp"
#include "tuning/db.hpp"

namespace {

using attnjit::Error;
using attnjit::fuzz::finding;
namespace tuning = attnjit::tuning;

// One file per process (libFuzzer's -fork/-jobs run several).
const std::string& db_file() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/attnjit_fuzz_tuning_" +
           std::to_string(::getpid()) + ".json";
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(db_file(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  tuning::Db db;
  try {
    db = tuning::read_db(db_file());
  } catch (const Error& e) {
    if (e.kind() != attnjit::ErrorKind::kCache) finding("read_db threw a non-cache Error", e.what());
    return 0;
  }
  const nlohmann::json written = tuning::to_json(db);
  try {
    if (tuning::to_json(tuning::from_json(written, "rewritten")) != written)
      finding("to_json/from_json round trip differs", written.dump());
  } catch (const Error& e) {
    finding("from_json refuses its own to_json", written.dump() + " : " + e.what());
  }
  tuning::Db merged = db;
  tuning::merge_into(merged, db);  // what save_merged does with a re-read file

  // The runtime's lookup (a Selector on the file) for every entry it holds.
  std::vector<std::string> warnings;
  tuning::Selector sel(db_file(), [&](const std::string& w) { warnings.push_back(w); });
  for (const auto& env : db.environments)
    for (const auto& e : env.entries)
      (void)sel.find(e.op, e.bucket,
                     tuning::Identity{env.fingerprint.gpu, env.fingerprint.sm_count,
                                      env.fingerprint.attnjit});
  (void)sel.find("tma_copy", "x", tuning::Identity{"other", 1, "0"});

  // The runtime's reading of a found entry (mha_fwd/mla_decode's tuned choice): the
  // run-time field out, the rest as the op's config; a bad one is an Error.
  for (const auto& env : db.environments)
    for (const auto& e : env.entries) {
      nlohmann::json t = e.best;
      try {
        (void)tuning::take_runtime_int(t, "num_splits", 0, 0, 256);
        if (e.op == "mha_fwd") (void)attnjit::MhaFwdConfig::from_json(t.dump());
        if (e.op == "mla_decode") (void)attnjit::MlaDecodeConfig::from_json(t.dump());
        if (e.op == "tma_copy") (void)attnjit::TmaCopyConfig::from_json(t.dump());
      } catch (const Error&) {
      }
    }

  // `attnjit precompile`'s use: the winners of entries tuned for sm_90a.
  std::vector<std::string> skipped;
  try {
    (void)attnjit::tune::tuned_variants(db, {attnjit::kSm90a}, "", &skipped);
  } catch (const Error& e) {
    finding("tuned_variants threw", e.what());
  }
  return 0;
}
