// The sweep orchestrator (sweep.hpp).
#include "sweep.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "attnjit/error.hpp"
#include "cache/cache.hpp"
#include "driver/driver.hpp"
#include "jit/cache_client.hpp"
#include "process.hpp"
#include "scheduler.hpp"

namespace attnjit::tune {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::vector<DeviceDesc> visible_devices() {
  if (!driver::available())
    throw Error(ErrorKind::kDriver,
                fmt::format("attnjit tune needs a GPU: {}", driver::unavailable_reason()));
  int count = 0;
  ATTNJIT_CU(cuDeviceGetCount, &count);
  std::vector<DeviceDesc> out;
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    ATTNJIT_CU(cuDeviceGet, &dev, i);
    const driver::DeviceInfo info = driver::device_info(dev);
    out.push_back({i, info.name, info.sm_count, info.cc_major, info.cc_minor});
  }
  return out;
}

// Progress on stderr: a status line on a terminal, one line per result otherwise.
class Progress {
 public:
  Progress(bool on, std::string what) : on_(on), tty_(::isatty(STDERR_FILENO)), what_(std::move(what)) {}
  void compiled(size_t done, size_t total) {
    if (!on_) return;
    std::lock_guard lock(m_);
    if (tty_)
      fmt::print(stderr, "\r{}: compiling {}/{}   ", what_, done, total);
    else if (done == total)
      fmt::print(stderr, "{}: compiled {} candidates\n", what_, total);
  }
  void timed(size_t done, size_t total, const CandidateResult& r, const std::string& change,
             double best_us, const std::string& best, double elapsed_ms) {
    if (!on_) return;
    std::lock_guard lock(m_);
    const double left_s = done ? elapsed_ms / static_cast<double>(done) * static_cast<double>(total - done) / 1e3 : 0;
    const std::string best_text =
        best_us > 0 ? fmt::format("best {:.2f} us ({})", best_us, best) : std::string("no best yet");
    if (tty_) {
      fmt::print(stderr, "\r{}: {}/{} timed, {}, ~{:.0f} s left        ", what_, done, total, best_text, left_s);
    } else {
      fmt::print(stderr, "{}: [{}/{}] {:<13} {:>10} {}{} | {}, ~{:.0f} s left\n", what_, done, total,
                 r.status, r.status == "ok" ? fmt::format("{:.2f} us", r.us) : "", change,
                 r.error.empty() ? "" : " (" + r.error.substr(0, 160) + ")", best_text, left_s);
    }
  }
  void done() {
    if (on_ && tty_) fmt::print(stderr, "\n");
  }

 private:
  std::mutex m_;
  bool on_, tty_;
  std::string what_;
};

// One device's worker, started on first use and after every fault, crash or timeout.
struct Session {
  std::unique_ptr<WorkerProcess> proc;
};

std::string trimmed_tail(const std::string& s) {
  std::string t = s.size() > 600 ? s.substr(s.size() - 600) : s;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

}  // namespace

tuning::Entry entry_of(const std::string& op, const ShapeResult& r, int iters) {
  tuning::Entry e;
  e.op = op;
  e.bucket = r.space.bucket;
  e.shape = r.space.shape;
  e.default_candidate = r.space.default_candidate;
  e.default_us = r.default_us();
  if (r.best >= 0) {
    e.best = r.results[static_cast<size_t>(r.best)].candidate;
    e.best_us = r.results[static_cast<size_t>(r.best)].us;
  }
  e.iters = iters;
  e.updated = static_cast<int64_t>(std::time(nullptr));
  for (const CandidateResult& c : r.results)
    e.timings.push_back({c.candidate, c.status, c.us, c.error, c.device});
  for (const Pruned& p : r.space.pruned) e.timings.push_back({p.candidate, "pruned", -1, p.reason, -1});
  return e;
}

SweepResult run_sweep(const SweepOptions& o) {
  const auto start = Clock::now();
  ::signal(SIGPIPE, SIG_IGN);  // a worker that died must not kill the sweep on our next write
  if (!o.op) throw UsageError("--op is required");
  if (o.worker_argv.empty()) throw UsageError("no worker command");
  SweepResult result;
  result.op = o.op->name;
  std::vector<DeviceDesc> devices;
  try {
    devices = select_devices(visible_devices(), o.devices, &result.notes);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (devices.empty()) throw Error(ErrorKind::kDriver, "attnjit tune: the driver sees no device");
  for (const DeviceDesc& d : devices) result.devices.push_back(d.ordinal);
  CUdevice first = 0;
  ATTNJIT_CU(cuDeviceGet, &first, devices.front().ordinal);
  result.fingerprint = tuning::fingerprint_of(driver::device_info(first));
  const Arch arch{devices.front().cc_major, devices.front().cc_minor, true};
  if (!o.op->supports(arch))
    throw Error(ErrorKind::kUnsupportedConfig,
                fmt::format("{} is not built for {} ({})", o.op->name, arch.name(), devices.front().name));
  cache::Cache cache = cache::Cache::open(o.cache_dir);
  const int jobs = std::max(1, o.jobs > 0 ? o.jobs : static_cast<int>(std::thread::hardware_concurrency()));

  for (const json& shape_in : o.shapes) {
    const auto shape_start = Clock::now();
    ShapeResult sr;
    sr.space = enumerate(*o.op, shape_in, o.space);
    const std::vector<json>& cands = sr.space.candidates;
    const std::string what = fmt::format("tune {} [{}]", o.op->name, sr.space.bucket);
    Progress progress(o.progress, what);
    sr.results.resize(cands.size());
    for (size_t i = 0; i < cands.size(); ++i) sr.results[i].candidate = cands[i];

    // 1. Compile every candidate's kernels into the cache, in parallel (no GPU needed).
    std::atomic<size_t> next{0}, compiled{0};
    auto compile = [&] {
      for (size_t i; (i = next.fetch_add(1)) < cands.size();) {
        try {
          const json config = split_candidate(*o.op, cands[i]).first;
          for (const ops::KernelVariant& v : o.op->tuning.variants(config)) {
            const jit::CachedKernel c = jit::ensure_compiled(cache, v.op->recipe(v.config, arch));
            (void)c;
          }
        } catch (const std::exception& e) {
          sr.results[i].status = "compile_failed";
          sr.results[i].error = e.what();
        }
        progress.compiled(compiled.fetch_add(1) + 1, cands.size());
      }
    };
    {
      std::vector<std::thread> pool;
      for (int t = 1; t < std::min<int>(jobs, static_cast<int>(cands.size())); ++t) pool.emplace_back(compile);
      compile();
      for (std::thread& t : pool) t.join();
    }
    if (sr.results.front().status == "compile_failed")
      throw Error(ErrorKind::kCompile, fmt::format("{}: the reference (default) candidate {} does not "
                                                   "compile: {}",
                                                   what, cands.front().dump(), sr.results.front().error));

    // 2. Time what compiled, spread over the devices, each candidate in a worker process.
    std::vector<size_t> todo;
    for (size_t i = 0; i < cands.size(); ++i)
      if (sr.results[i].status.empty()) todo.push_back(i);
    std::vector<Session> sessions(devices.size());
    std::mutex m;
    size_t timed = 0;
    double best_us = -1;
    std::string best_change;
    const auto measure_start = Clock::now();
    const json setup = {{"cmd", "setup"},        {"op", o.op->name},    {"shape", sr.space.shape},
                        {"reference", cands.front()}, {"warmup", o.warmup}, {"iters", o.iters}};
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
    const auto setup_timeout = std::chrono::milliseconds(
        static_cast<int64_t>(std::max(o.setup_timeout_s, o.timeout_s) * 1000));

    auto run_one = [&](int device, size_t job) {
      size_t slot = 0;
      while (devices[slot].ordinal != device) ++slot;
      Session& s = sessions[slot];
      if (!s.proc) {
        std::vector<std::string> argv = o.worker_argv;
        argv.push_back("--device");
        argv.push_back(std::to_string(device));
        try {
          s.proc = std::make_unique<WorkerProcess>(
              argv, std::vector<std::pair<std::string, std::string>>{
                        {"ATTNJIT_CACHE_DIR", cache.root()}, {"ATTNJIT_TUNING_DB", "off"}});
        } catch (const std::exception& e) {
          throw DeviceUnusable(fmt::format("cannot start a worker on device {}: {}", device, e.what()));
        }
        const WorkerProcess::Reply r = s.proc->request(setup.dump(), setup_timeout);
        json j = r.kind == WorkerProcess::Reply::kLine ? json::parse(r.line, nullptr, false) : json();
        if (!j.is_object() || j.value("status", "") != "ok") {
          const std::string why =
              r.kind == WorkerProcess::Reply::kTimeout
                  ? fmt::format("no answer in {:.0f} s", setup_timeout.count() / 1e3)
              : r.kind == WorkerProcess::Reply::kExited
                  ? fmt::format("worker {}: {}", r.why, trimmed_tail(s.proc->stderr_tail()))
              : j.is_object() ? j.value("error", r.line)
                              : "answered: " + r.line.substr(0, 200);
          s.proc.reset();
          throw DeviceUnusable(fmt::format("device {}: the worker could not set up {} with the "
                                           "reference candidate: {}",
                                           device, sr.space.shape.dump(), why));
        }
      }
      const size_t i = todo[job];
      CandidateResult& cr = sr.results[i];
      cr.device = device;
      const WorkerProcess::Reply r =
          s.proc->request(json{{"cmd", "run"}, {"candidate", cands[i]}}.dump(), timeout);
      if (r.kind == WorkerProcess::Reply::kTimeout) {
        s.proc.reset();  // SIGKILL: a spinning kernel dies with its context
        cr.status = "timeout";
        cr.error = fmt::format("no answer in {:.0f} s; worker killed", o.timeout_s);
      } else if (r.kind == WorkerProcess::Reply::kExited) {
        cr.status = "crashed";
        cr.error = fmt::format("worker {}: {}", r.why, trimmed_tail(s.proc->stderr_tail()));
        s.proc.reset();
      } else {
        const json j = json::parse(r.line, nullptr, false);
        if (!j.is_object()) {
          cr.status = "crashed";
          cr.error = "worker answered: " + r.line.substr(0, 200);
          s.proc.reset();
        } else {
          cr.status = j.value("status", "crashed");
          cr.us = cr.status == "ok" ? j.value("us", -1.0) : -1.0;
          cr.error = j.value("error", "");
          if (j.value("restart", false)) s.proc.reset();  // never reuse a faulted context
        }
      }
      std::lock_guard lock(m);
      ++timed;
      if (cr.status == "ok" && (best_us < 0 || cr.us < best_us)) {
        best_us = cr.us;
        best_change = describe_change(cands[i], cands.front());
      }
      progress.timed(timed, todo.size(), cr, describe_change(cands[i], cands.front()), best_us,
                     best_change, ms_since(measure_start));
    };
    std::vector<int> ordinals;
    for (const DeviceDesc& d : devices) ordinals.push_back(d.ordinal);
    const ScheduleReport report = schedule(ordinals, todo.size(), run_one);
    sessions.clear();  // kills the workers: their inputs belong to this shape
    progress.done();
    for (const auto& [device, why] : report.retired) result.notes.push_back(why);
    for (size_t job = 0; job < todo.size(); ++job)
      if (report.device_of[job] < 0) {
        std::string why;
        for (const auto& [device, reason] : report.retired) why += "\n  " + reason;
        throw Error(ErrorKind::kDriver, fmt::format("{}: no device could run the sweep:{}", what, why));
      }

    for (size_t i = 0; i < sr.results.size(); ++i)
      if (sr.results[i].status == "ok" &&
          (sr.best < 0 || sr.results[i].us < sr.results[static_cast<size_t>(sr.best)].us))
        sr.best = static_cast<int>(i);
    sr.wall_ms = ms_since(shape_start);
    // Saved per shape, so an interrupted multi-shape sweep keeps what it finished.
    if (!o.db_path.empty() && sr.best >= 0) {
      tuning::Db add;
      add.environments.push_back({result.fingerprint, {entry_of(o.op->name, sr, o.iters)}});
      tuning::save_merged(o.db_path, add, [&](const std::string& w) {
        tuning::warn_stderr(w);
        result.notes.push_back(w);
      });
    }
    result.shapes.push_back(std::move(sr));
  }
  result.wall_ms = ms_since(start);
  return result;
}

json to_json(const SweepResult& r) {
  json j;
  j["op"] = r.op;
  j["fingerprint"] = r.fingerprint.to_json();
  j["devices"] = r.devices;
  j["wall_ms"] = r.wall_ms;
  j["notes"] = r.notes;
  j["shapes"] = json::array();
  for (const ShapeResult& s : r.shapes) {
    const tuning::Entry e = entry_of(r.op, s, 0);
    json sj;
    sj["shape"] = s.space.shape;
    sj["bucket"] = s.space.bucket;
    sj["candidates"] = s.space.candidates.size();
    sj["pruned"] = s.space.pruned.size();
    sj["default"] = s.space.default_candidate;
    sj["default_us"] = s.default_us();
    sj["best"] = s.best >= 0 ? e.best : json();
    sj["best_us"] = e.best_us;
    sj["speedup"] = e.best_us > 0 && e.default_us > 0 ? e.default_us / e.best_us : 0.0;
    sj["wall_ms"] = s.wall_ms;
    sj["results"] = json::array();
    for (const tuning::Timing& t : e.timings) {
      json tj = {{"candidate", t.candidate}, {"status", t.status}};
      if (t.status == "ok") tj["us"] = t.us;
      if (!t.error.empty()) tj["error"] = t.error;
      if (t.device >= 0) tj["device"] = t.device;
      sj["results"].push_back(tj);
    }
    j["shapes"].push_back(sj);
  }
  return j;
}

std::string to_text(const SweepResult& r) {
  std::string out = fmt::format("tune {} on {} ({} SMs, {}), device(s) {}; {:.1f} s\n", r.op,
                                r.fingerprint.gpu, r.fingerprint.sm_count, r.fingerprint.arch,
                                fmt::format("{}", fmt::join(r.devices, ",")), r.wall_ms / 1e3);
  for (const std::string& n : r.notes) out += "  note: " + n + "\n";
  for (const ShapeResult& s : r.shapes) {
    size_t ok = 0;
    for (const CandidateResult& c : s.results) ok += c.status == "ok";
    out += fmt::format("\n{} {}: {} candidates ({} pruned), {} timed ok, {:.1f} s\n", r.op,
                       s.space.bucket, s.results.size(), s.space.pruned.size(), ok, s.wall_ms / 1e3);
    std::vector<const CandidateResult*> order;
    for (const CandidateResult& c : s.results) order.push_back(&c);
    std::stable_sort(order.begin(), order.end(), [](const CandidateResult* a, const CandidateResult* b) {
      if ((a->status == "ok") != (b->status == "ok")) return a->status == "ok";
      return a->status == "ok" && a->us < b->us;
    });
    const double def = s.default_us();
    out += fmt::format("  {:>10}  {:>8}  {:<14}  {}\n", "us", "vs def", "status", "candidate (change from default)");
    for (const CandidateResult* c : order) {
      const std::string us = c->status == "ok" ? fmt::format("{:.2f}", c->us) : "-";
      const std::string ratio = c->status == "ok" && def > 0 ? fmt::format("{:.3f}x", def / c->us) : "-";
      out += fmt::format("  {:>10}  {:>8}  {:<14}  {}{}\n", us, ratio, c->status,
                         describe_change(c->candidate, s.space.default_candidate),
                         c->error.empty() ? "" : "  (" + c->error.substr(0, 200) + ")");
    }
    if (s.best >= 0)
      out += fmt::format("  best: {} {:.2f} us ({:.3f}x the default)\n",
                         s.results[static_cast<size_t>(s.best)].candidate.dump(),
                         s.results[static_cast<size_t>(s.best)].us,
                         def > 0 ? def / s.results[static_cast<size_t>(s.best)].us : 0.0);
    else
      out += "  no candidate matched the reference and timed\n";
  }
  return out;
}

}  // namespace attnjit::tune
