// The in-process table's single-flight map under concurrent misses.
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "attnjit/error.hpp"
#include "driver/driver.hpp"
#include "jit/kernel_table.hpp"
#include "jit/single_flight.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "test_cache_support.hpp"

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

// The process's kernel table itself (not only its map), as ops use it from many threads:
// concurrent misses of one key run the recipe and NVRTC once and share the Kernel; two
// keys compile side by side. Without a driver the Kernel cannot be loaded: then every
// caller gets the driver error and waiters share the failed build instead of each
// compiling again. The ThreadSanitizer build runs this (tools/sanitize_host.sh tsan).
TEST_CASE("kernel table: concurrent misses build each key once", "[jit][threads][nvrtc]") {
  attnjit::test::ScopedEnv cache_off("ATTNJIT_CACHE", "off");  // NVRTC only: no shared root
  const auto& op = attnjit::ops::find_op("tma_copy");
  const nlohmann::json configs[2] = {
      op.canonicalize({{"dtype", "bf16"}, {"block_m", 64}, {"block_n", 64}, {"stages", 2}}),
      op.canonicalize({{"dtype", "bf16"}, {"block_m", 64}, {"block_n", 128}, {"stages", 2}})};
  attnjit::jit::KernelKey keys[2];
  for (uint64_t i = 0; i < 2; ++i) {
    keys[i].op = 1977;  // a test-only family id (registry ids have the top bit set)
    keys[i].words[0] = 0x7357000 + i;
  }
  REQUIRE(attnjit::jit::find_kernel(keys[0]) == nullptr);
  const bool driver = attnjit::driver::available();
  std::atomic<int> recipes[2] = {0, 0}, driver_errors{0};
  std::atomic<bool> go{false};
  std::vector<const attnjit::jit::Kernel*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      const int k = t % 2;
      try {
        seen[static_cast<size_t>(t)] = &attnjit::jit::get_kernel(keys[k], [&] {
          recipes[k].fetch_add(1);
          std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the others wait
          return op.recipe(configs[k], attnjit::kSm90a);
        });
      } catch (const attnjit::Error& e) {
        if (e.kind() == attnjit::ErrorKind::kDriver) driver_errors.fetch_add(1);
      }
    });
  go = true;
  for (auto& th : threads) th.join();
  if (!driver) {
    CHECK(driver_errors.load() == 8);
    for (int k = 0; k < 2; ++k) {
      CHECK(recipes[k].load() >= 1);
      CHECK(recipes[k].load() < 4);  // waiters shared a failure instead of each rebuilding
      CHECK(attnjit::jit::find_kernel(keys[k]) == nullptr);
    }
    return;
  }
  CHECK(driver_errors.load() == 0);
  CHECK(recipes[0].load() == 1);
  CHECK(recipes[1].load() == 1);
  for (int t = 0; t < 8; ++t) {
    REQUIRE(seen[static_cast<size_t>(t)] != nullptr);
    CHECK(seen[static_cast<size_t>(t)] == seen[static_cast<size_t>(t % 2)]);
    CHECK(attnjit::jit::find_kernel(keys[t % 2]) == seen[static_cast<size_t>(t)]);
  }
  CHECK(seen[0] != seen[1]);
  CHECK_FALSE(seen[0]->compiled().cubin.empty());
}
