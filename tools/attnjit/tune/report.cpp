// The tuning report and its SVG plot (report.hpp).
#include "report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <map>

#include "space.hpp"

namespace attnjit::tune {
namespace {

std::string date(int64_t t) {
  char buf[32];
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  ::localtime_r(&tt, &tm);
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M", &tm);
  return buf;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string report_text(const tuning::Db& db, const std::string& path) {
  std::string out = fmt::format("tuning database {}\n", path);
  // Per op, then per environment, one row per bucket.
  std::map<std::string, std::vector<std::pair<const tuning::Environment*, const tuning::Entry*>>> by_op;
  for (const tuning::Environment& env : db.environments)
    for (const tuning::Entry& e : env.entries) by_op[e.op].emplace_back(&env, &e);
  for (auto& [op, rows] : by_op) {
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
      return a.second->bucket < b.second->bucket;
    });
    out += fmt::format("\n{}\n  {:<34} {:<26} {:>10} {:>10} {:>8} {:>7}  {:<16}  {}\n", op, "bucket",
                       "gpu (SMs, attnjit)", "default us", "best us", "speedup", "ok/all", "updated",
                       "best (change from default)");
    for (const auto& [env, e] : rows) {
      size_t ok = 0, all = 0;
      for (const tuning::Timing& t : e->timings) {
        if (t.status == "pruned") continue;
        ++all;
        ok += t.status == "ok";
      }
      const std::string gpu = fmt::format("{} ({}, {})", env->fingerprint.gpu, env->fingerprint.sm_count,
                                          env->fingerprint.attnjit);
      out += fmt::format("  {:<34} {:<26} {:>10} {:>10.2f} {:>8} {:>7}  {:<16}  {}\n", e->bucket, gpu,
                         e->default_us > 0 ? fmt::format("{:.2f}", e->default_us) : "-", e->best_us,
                         e->default_us > 0 && e->best_us > 0 ? fmt::format("{:.3f}x", e->default_us / e->best_us) : "-",
                         fmt::format("{}/{}", ok, all), date(e->updated),
                         describe_change(e->best, e->default_candidate));
    }
  }
  if (by_op.empty()) out += "  (no entries)\n";
  return out;
}

const tuning::Entry* pick_entry(const tuning::Db& db, const std::string& op, const std::string& bucket,
                                const tuning::Environment** env) {
  const tuning::Entry* best = nullptr;
  for (const tuning::Environment& en : db.environments)
    for (const tuning::Entry& e : en.entries)
      if ((op.empty() || e.op == op) && (bucket.empty() || e.bucket == bucket) &&
          (!best || e.updated > best->updated)) {
        best = &e;
        if (env) *env = &en;
      }
  return best;
}

std::string plot_svg(const tuning::Entry& e, const tuning::Fingerprint& f) {
  struct Bar {
    std::string label;
    double us;
    bool is_default, is_best;
  };
  std::vector<Bar> bars;
  for (const tuning::Timing& t : e.timings)
    if (t.status == "ok" && t.us > 0)
      bars.push_back({describe_change(t.candidate, e.default_candidate), t.us,
                      t.candidate == e.default_candidate, t.candidate == e.best});
  std::sort(bars.begin(), bars.end(), [](const Bar& a, const Bar& b) { return a.us < b.us; });
  double max_us = 0;
  for (const Bar& b : bars) max_us = std::max(max_us, b.us);

  const int label_w = 330, bar_w = 520, row_h = 18, top = 56, right = 90;
  const int width = label_w + bar_w + right;
  const int height = top + static_cast<int>(bars.size()) * row_h + 30;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"monospace\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height);
  s += fmt::format("<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{} {}</text>\n",
                   xml_escape(e.op), xml_escape(e.bucket));
  s += fmt::format("<text x=\"10\" y=\"38\">{} ({} SMs, {}), attnjit {}; median of {} iterations; "
                   "grey = default, green = best</text>\n",
                   xml_escape(f.gpu), f.sm_count, xml_escape(f.arch), xml_escape(f.attnjit), e.iters);
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const int y = top + static_cast<int>(i) * row_h;
    const int w = max_us > 0 ? std::max(1, static_cast<int>(bar_w * b.us / max_us)) : 1;
    const char* color = b.is_best ? "#2e8b57" : b.is_default ? "#999999" : "#4682b4";
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", label_w - 6, y + 13,
                     xml_escape(b.label.substr(0, 48)));
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n", label_w, y + 2, w,
                     row_h - 4, color);
    s += fmt::format("<text x=\"{}\" y=\"{}\">{:.2f} us</text>\n", label_w + w + 4, y + 13, b.us);
  }
  if (bars.empty())
    s += fmt::format("<text x=\"10\" y=\"{}\">no timed candidates</text>\n", top + 13);
  s += "</svg>\n";
  return s;
}

}  // namespace attnjit::tune
