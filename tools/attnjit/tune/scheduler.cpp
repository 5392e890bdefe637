// The sweep's device scheduler (scheduler.hpp).
#include "scheduler.hpp"

#include <fmt/format.h>

#include <deque>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>

namespace attnjit::tune {

ScheduleReport schedule(const std::vector<int>& devices, size_t jobs,
                        const std::function<void(int device, size_t job)>& run) {
  ScheduleReport report;
  report.device_of.assign(jobs, -1);
  std::mutex m;
  std::deque<size_t> queue;
  for (size_t j = 0; j < jobs; ++j) queue.push_back(j);
  std::exception_ptr failure;

  auto runner = [&](int device) {
    for (;;) {
      size_t job;
      {
        std::lock_guard lock(m);
        if (failure || queue.empty()) return;
        job = queue.front();
        queue.pop_front();
      }
      try {
        run(device, job);
        std::lock_guard lock(m);
        report.device_of[job] = device;
      } catch (const DeviceUnusable& e) {
        std::lock_guard lock(m);
        queue.push_front(job);  // another device takes it next
        report.retired.emplace_back(device, e.what());
        return;
      } catch (...) {
        std::lock_guard lock(m);
        if (!failure) failure = std::current_exception();
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int d : devices) threads.emplace_back(runner, d);
  for (std::thread& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
  return report;
}

std::vector<DeviceDesc> select_devices(const std::vector<DeviceDesc>& visible,
                                       const std::string& wanted, std::vector<std::string>* notes) {
  std::vector<DeviceDesc> chosen;
  if (wanted.empty()) {
    chosen = visible;
  } else {
    std::stringstream ss(wanted);
    for (std::string item; std::getline(ss, item, ',');) {
      int ordinal = -1;
      size_t used = 0;
      try {
        ordinal = std::stoi(item, &used);
      } catch (...) {
        used = 0;
      }
      if (used == 0 || used != item.size() || ordinal < 0)
        throw std::invalid_argument(fmt::format("--devices: '{}' is not a device ordinal", item));
      const DeviceDesc* found = nullptr;
      for (const DeviceDesc& d : visible)
        if (d.ordinal == ordinal) found = &d;
      if (!found)
        throw std::invalid_argument(
            fmt::format("--devices: device {} is not visible ({} device(s) visible)", ordinal, visible.size()));
      bool dup = false;
      for (const DeviceDesc& d : chosen) dup = dup || d.ordinal == ordinal;
      if (!dup) chosen.push_back(*found);
    }
  }
  if (chosen.empty()) return chosen;
  std::vector<DeviceDesc> same;
  for (const DeviceDesc& d : chosen) {
    if (d.name == chosen.front().name && d.sm_count == chosen.front().sm_count) {
      same.push_back(d);
    } else if (notes) {
      notes->push_back(fmt::format("device {} ({}, {} SMs) left out: the sweep times on {} ({} SMs)",
                                   d.ordinal, d.name, d.sm_count, chosen.front().name,
                                   chosen.front().sm_count));
    }
  }
  return same;
}

}  // namespace attnjit::tune
