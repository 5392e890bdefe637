// The sweep's multi-GPU scheduler against fake device lists (no CUDA): every candidate
// runs exactly once, never two at a time on one device, every device takes work, a device
// whose worker cannot start is retired and its candidate goes to another, and device
// selection keeps one kind of GPU.
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "support/catch.hpp"
#include "tune/scheduler.hpp"

using namespace attnjit;

TEST_CASE("tune scheduler: candidates spread over fake devices, each once, one at a time per device",
          "[tune]") {
  const std::vector<int> devices = {0, 1, 2, 5};
  constexpr size_t kJobs = 60;
  std::mutex m;
  std::map<int, int> busy, max_busy, ran_on;
  std::vector<int> runs(kJobs, 0);
  const tune::ScheduleReport r = tune::schedule(devices, kJobs, [&](int device, size_t job) {
    {
      std::lock_guard lock(m);
      max_busy[device] = std::max(max_busy[device], ++busy[device]);
      ++runs[job];
      ++ran_on[device];
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + job % 3));
    std::lock_guard lock(m);
    --busy[device];
  });
  for (size_t j = 0; j < kJobs; ++j) {
    CHECK(runs[j] == 1);
    CHECK(r.device_of[j] >= 0);
  }
  CHECK(r.retired.empty());
  for (int d : devices) {
    CHECK(ran_on[d] > 0);      // every device took work
    CHECK(max_busy[d] == 1);   // never two candidates at once on one device
  }
  int total = 0;
  for (const auto& [d, n] : ran_on) total += n;
  CHECK(total == static_cast<int>(kJobs));
}

TEST_CASE("tune scheduler: an unusable device is retired and its candidate runs elsewhere", "[tune]") {
  constexpr size_t kJobs = 20;
  std::atomic<int> attempts_on_1{0};
  const tune::ScheduleReport r = tune::schedule({0, 1}, kJobs, [&](int device, size_t) {
    if (device == 1) {
      ++attempts_on_1;
      throw tune::DeviceUnusable("device 1: worker does not start");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  CHECK(attempts_on_1 == 1);  // retired after the first failure
  REQUIRE(r.retired.size() == 1);
  CHECK(r.retired[0].first == 1);
  CHECK(r.retired[0].second == "device 1: worker does not start");
  for (size_t j = 0; j < kJobs; ++j) CHECK(r.device_of[j] == 0);

  // Every device unusable: nothing ran, and the report says so.
  const tune::ScheduleReport none = tune::schedule({0, 1}, 3, [](int d, size_t) {
    throw tune::DeviceUnusable("dead " + std::to_string(d));
  });
  CHECK(none.retired.size() == 2);
  for (int d : none.device_of) CHECK(d == -1);
}

TEST_CASE("tune scheduler: any other exception stops the schedule and is rethrown", "[tune]") {
  std::atomic<int> ran{0};
  CHECK_THROWS_AS(tune::schedule({0, 1, 2}, 100,
                                 [&](int, size_t job) {
                                   ++ran;
                                   if (job == 3) throw std::logic_error("bug");
                                   std::this_thread::sleep_for(std::chrono::milliseconds(2));
                                 }),
                  std::logic_error);
  CHECK(ran < 100);
  // No devices, no jobs: nothing happens.
  CHECK(tune::schedule({}, 0, [](int, size_t) {}).device_of.empty());
}

TEST_CASE("tune scheduler: device selection keeps one kind of GPU and checks --devices", "[tune]") {
  const std::vector<tune::DeviceDesc> visible = {{0, "NVIDIA H100 80GB HBM3", 132, 9, 0},
                                                 {1, "NVIDIA H100 80GB HBM3", 132, 9, 0},
                                                 {2, "NVIDIA A100-SXM4-80GB", 108, 8, 0},
                                                 {3, "NVIDIA H100 80GB HBM3", 132, 9, 0}};
  std::vector<std::string> notes;
  auto ordinals = [](const std::vector<tune::DeviceDesc>& v) {
    std::vector<int> o;
    for (const auto& d : v) o.push_back(d.ordinal);
    return o;
  };
  CHECK(ordinals(tune::select_devices(visible, "", &notes)) == std::vector<int>{0, 1, 3});
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("device 2") != std::string::npos);
  notes.clear();
  CHECK(ordinals(tune::select_devices(visible, "3,1,3", &notes)) == std::vector<int>{3, 1});
  CHECK(notes.empty());
  CHECK(ordinals(tune::select_devices(visible, "2,0", &notes)) == std::vector<int>{2});  // first chosen sets the kind
  CHECK_THROWS_AS(tune::select_devices(visible, "7", &notes), std::invalid_argument);
  CHECK_THROWS_AS(tune::select_devices(visible, "x", &notes), std::invalid_argument);
  CHECK_THROWS_AS(tune::select_devices(visible, ",1", &notes), std::invalid_argument);
  CHECK(tune::select_devices({}, "", &notes).empty());
}
