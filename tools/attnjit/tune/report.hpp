#pragma once
// `attnjit tune --report`: the database as a table per op and bucket, and a bar chart
// (SVG, written by hand: no plotting dependency) of the time of every candidate of one
// entry.
#include <string>

#include "tuning/db.hpp"

namespace attnjit::tune {

std::string report_text(const tuning::Db& db, const std::string& path);

// The entry a plot shows: of `op` ("" = any) and `bucket` ("" = any), the newest.
// nullptr when none; `env` receives its environment.
const tuning::Entry* pick_entry(const tuning::Db& db, const std::string& op,
                                const std::string& bucket, const tuning::Environment** env);

// Horizontal bars, fastest first: every timed candidate of `e` (the default in grey, the
// best in green), labelled with what it changes from the default.
std::string plot_svg(const tuning::Entry& e, const tuning::Fingerprint& f);

}  // namespace attnjit::tune
