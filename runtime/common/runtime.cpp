#include "attnjit/runtime.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace attnjit {
namespace {

std::atomic<int>& check_state() {
  // -1: not decided yet (read ATTNJIT_CHECK on first use); 0 / 1 afterwards.
  static std::atomic<int> state{-1};
  return state;
}

}  // namespace

void set_check_mode(bool on) noexcept { check_state().store(on ? 1 : 0, std::memory_order_relaxed); }

bool check_mode() noexcept {
  int s = check_state().load(std::memory_order_relaxed);
  if (s < 0) {
    const char* v = std::getenv("ATTNJIT_CHECK");
    s = v != nullptr && std::strcmp(v, "1") == 0 ? 1 : 0;
    int expected = -1;
    check_state().compare_exchange_strong(expected, s, std::memory_order_relaxed);
    s = check_state().load(std::memory_order_relaxed);
  }
  return s == 1;
}

}  // namespace attnjit
