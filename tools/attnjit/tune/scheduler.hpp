#pragma once
// Spreading a sweep's candidates over GPUs. One runner thread per device takes the next
// unclaimed candidate whenever its device is free, so a faster or less loaded device
// simply takes more. A device whose worker cannot even start is retired and the
// candidate goes back to the others. Nothing here touches CUDA: tests drive it with a
// fake device list.
#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnjit::tune {

// Thrown by a job runner when its device cannot run anything (its worker does not start
// or cannot set up): the device is retired and the job is handed to another device.
struct DeviceUnusable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ScheduleReport {
  std::vector<int> device_of;                          // per job; -1 = never ran
  std::vector<std::pair<int, std::string>> retired;    // device, why
};

// Runs jobs 0..jobs-1, each exactly once, over `devices`; run(device, job) never runs two
// jobs on one device at once. Any exception other than DeviceUnusable stops the schedule
// (no new jobs start) and is rethrown once every runner has stopped.
ScheduleReport schedule(const std::vector<int>& devices, size_t jobs,
                        const std::function<void(int device, size_t job)>& run);

struct DeviceDesc {
  int ordinal = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
};

// The devices a sweep uses: `wanted` ("" = every visible device, else a list like "0,2")
// among `visible`. Devices whose name or SM count differ from the first chosen one are
// left out with a note (their timings would not be comparable, and the database keys an
// entry by one GPU). Throws std::invalid_argument naming a bad or unknown ordinal.
std::vector<DeviceDesc> select_devices(const std::vector<DeviceDesc>& visible,
                                       const std::string& wanted, std::vector<std::string>* notes);

}  // namespace attnjit::tune
