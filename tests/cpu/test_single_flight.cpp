// The in-process table's single-flight map under concurrent misses.
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "jit/kernel_table.hpp"
#include "jit/single_flight.hpp"
#include "support/catch.hpp"

namespace {
struct IntHash {
  size_t operator()(int k) const { return static_cast<size_t>(k); }
};
}  // namespace

TEST_CASE("single-flight: concurrent misses of one key build once", "[jit][threads]") {
  attnjit::jit::SingleFlightMap<int, int, IntHash> map;
  std::atomic<int> builds{0};
  std::atomic<bool> go{false};
  std::vector<const int*> seen(16, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      const int& v = map.get_or_create(7, [&] {
        builds.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a slow "compile"
        return std::make_unique<int>(42);
      });
      seen[static_cast<size_t>(t)] = &v;
    });
  }
  go = true;
  for (auto& th : threads) th.join();
  CHECK(builds.load() == 1);
  for (const int* p : seen) {
    REQUIRE(p != nullptr);
    CHECK(p == seen[0]);
    CHECK(*p == 42);
  }
  CHECK(map.find(7) == seen[0]);
  CHECK(map.find(8) == nullptr);
}

TEST_CASE("single-flight: distinct keys build independently", "[jit][threads]") {
  attnjit::jit::SingleFlightMap<int, int, IntHash> map;
  std::atomic<int> builds{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      map.get_or_create(t % 4, [&] {
        builds.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return std::make_unique<int>(t % 4);
      });
    });
  for (auto& th : threads) th.join();
  CHECK(builds.load() == 4);
  CHECK(map.size() == 4);
}

TEST_CASE("single-flight: a failed build reaches every waiter and is retried later",
          "[jit][threads]") {
  attnjit::jit::SingleFlightMap<int, int, IntHash> map;
  std::atomic<int> builds{0}, failures{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      try {
        map.get_or_create(1, [&]() -> std::unique_ptr<int> {
          builds.fetch_add(1);
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          throw std::runtime_error("compile failed");
        });
      } catch (const std::runtime_error&) {
        failures.fetch_add(1);
      }
    });
  go = true;
  for (auto& th : threads) th.join();
  CHECK(failures.load() == 8);
  CHECK(builds.load() >= 1);
  CHECK(builds.load() < 8);  // waiters shared the failure instead of each rebuilding
  CHECK(map.find(1) == nullptr);
  CHECK(map.get_or_create(1, [] { return std::make_unique<int>(5); }) == 5);  // retried
}

TEST_CASE("kernel keys compare configs as bytes", "[jit]") {
  struct Cfg {
    int32_t a, b;
  };
  auto k1 = attnjit::jit::make_key(1, attnjit::kSm90a, Cfg{1, 2});
  auto k2 = attnjit::jit::make_key(1, attnjit::kSm90a, Cfg{1, 2});
  CHECK(k1 == k2);
  CHECK_FALSE(k1 == attnjit::jit::make_key(1, attnjit::kSm90a, Cfg{1, 3}));
  CHECK_FALSE(k1 == attnjit::jit::make_key(1, attnjit::kSm100a, Cfg{1, 2}));
  CHECK_FALSE(k1 == attnjit::jit::make_key(2, attnjit::kSm90a, Cfg{1, 2}));
}
