// The process's tuning database (attnjit/tuning.hpp): one Selector, replaced by reloads.
#include <atomic>
#include <memory>
#include <mutex>

#include "attnjit/error.hpp"
#include "attnjit/tuning.hpp"
#include "driver/driver.hpp"
#include "ops/registry.hpp"
#include "tuning/db.hpp"

namespace attnjit {
namespace {

std::mutex g_mutex;
std::shared_ptr<tuning::Selector> g_selector;  // guarded by g_mutex; null until first use
std::atomic<uint64_t> g_generation{1};

std::shared_ptr<tuning::Selector> selector() {
  std::lock_guard lock(g_mutex);
  if (!g_selector)
    g_selector = std::make_shared<tuning::Selector>(tuning::db_path_for(""), tuning::warn_stderr);
  return g_selector;
}

}  // namespace

std::string tuning_db_path() { return tuning::db_path_for(""); }

std::optional<nlohmann::json> tuned_config(std::string_view op, const ShapeKey& shape) {
  const ops::OpSpec& spec = ops::find_op(op);
  if (!spec.tuning.bucket || !spec.tuning.canonical_shape) return std::nullopt;
  const std::string bucket = spec.tuning.bucket(spec.tuning.canonical_shape(shape));
  const std::shared_ptr<tuning::Selector> sel = selector();
  // No database: answer without touching the driver (CPU-only callers stay CPU-only).
  if (sel->empty()) return std::nullopt;
  tuning::Identity who;
  try {
    who = tuning::identity_of(driver::cached_device_info(driver::current_device()));
  } catch (const Error&) {
    return std::nullopt;  // no GPU or no current context: the op reports that itself
  }
  return sel->find(op, bucket, who);
}

void reload_tuning_db() {
  std::lock_guard lock(g_mutex);
  g_selector.reset();
  g_generation.fetch_add(1);
}

uint64_t tuning_db_generation() noexcept { return g_generation.load(std::memory_order_acquire); }

}  // namespace attnjit
