#include "driver/driver.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

#include "attnjit/error.hpp"

namespace attnjit::driver {
namespace {

// The ABI of every member of Api is the one cuda.h describes; ask the driver for it.
constexpr int kRequiredDriverVersion = CUDA_VERSION;

struct Loaded {
  Api api;
  std::string error;  // empty when loading worked
};

Loaded load() {
  Loaded out;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    out.error = fmt::format(
        "cannot load the CUDA driver (libcuda.so.1): {}. Launching kernels needs an NVIDIA "
        "driver; compiling does not",
        why ? why : "not found");
    return out;
  }
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t,
                               CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    out.error = "libcuda.so.1 has no cuGetProcAddress_v2: the driver is older than CUDA 12";
    return out;
  }
  auto driver_get_version = reinterpret_cast<CUresult (*)(int*)>(dlsym(lib, "cuDriverGetVersion"));
  int version = 0;
  if (driver_get_version == nullptr || driver_get_version(&version) != CUDA_SUCCESS) {
    out.error = "cuDriverGetVersion failed";
    return out;
  }
  if (version < kRequiredDriverVersion) {
    out.error = fmt::format(
        "the CUDA driver supports CUDA {}.{}, attnjit needs {}.{} or newer (its cubins come "
        "from NVRTC {}.{})",
        version / 1000, version % 1000 / 10, kRequiredDriverVersion / 1000,
        kRequiredDriverVersion % 1000 / 10, kRequiredDriverVersion / 1000,
        kRequiredDriverVersion % 1000 / 10);
    return out;
  }
  out.api.driver_version = version;
#define ATTNJIT_DRIVER_RESOLVE(name, version)                                                       \
  {                                                                                           \
    void* fn = nullptr;                                                                       \
    CUdriverProcAddressQueryResult status{};                                                  \
    if (get_proc(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != \
            CUDA_SUCCESS ||                                                                   \
        fn == nullptr) {                                                                      \
      out.error = "the CUDA driver has no entry point " #name;                                \
      return out;                                                                             \
    }                                                                                         \
    out.api.name = reinterpret_cast<decltype(out.api.name)>(fn);                              \
  }
  ATTNJIT_DRIVER_FUNCTIONS(ATTNJIT_DRIVER_RESOLVE)
#undef ATTNJIT_DRIVER_RESOLVE
  CUresult r = out.api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    out.api.cuGetErrorName(r, &name);
    out.error = fmt::format("cuInit failed: {} (no usable GPU?)", name ? name : "unknown");
  }
  return out;
}

const Loaded& loaded() {
  static const Loaded instance = load();  // thread-safe, once per process
  return instance;
}

}  // namespace

const Api& api() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw Error(ErrorKind::kDriver, l.error);
  return l.api;
}

bool available() noexcept {
  try {
    return loaded().error.empty();
  } catch (...) {
    return false;
  }
}

std::string unavailable_reason() { return loaded().error; }

void check(CUresult r, const char* call, const std::string& context) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  const Api& a = loaded().api;
  if (a.cuGetErrorName) a.cuGetErrorName(r, &name);
  if (a.cuGetErrorString) a.cuGetErrorString(r, &text);
  throw Error(ErrorKind::kDriver,
              fmt::format("{}: {} ({}){}{}", call, name ? name : "CUDA_ERROR_?",
                          text ? text : "no description", context.empty() ? "" : " ", context));
}

CUdevice current_device() {
  CUdevice dev = 0;
  CUresult r = api().cuCtxGetDevice(&dev);
  if (r == CUDA_ERROR_INVALID_CONTEXT) {
    throw Error(ErrorKind::kDriver,
                "no CUDA context is current on this thread: make a device current first "
                "(cudaSetDevice, torch.cuda.set_device, or attnjit::driver::use_device)");
  }
  check(r, "cuCtxGetDevice");
  return dev;
}

void use_device(int ordinal) {
  CUdevice dev = 0;
  ATTNJIT_CU(cuDeviceGet, &dev, ordinal);
  CUcontext ctx = nullptr;
  ATTNJIT_CU(cuDevicePrimaryCtxRetain, &ctx, dev);
  ATTNJIT_CU(cuCtxSetCurrent, ctx);
}

DeviceInfo device_info(CUdevice dev) {
  DeviceInfo info;
  char name[256] = {};
  ATTNJIT_CU(cuDeviceGetName, name, static_cast<int>(sizeof(name)), dev);
  info.name = name;
  info.ordinal = static_cast<int>(dev);
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    ATTNJIT_CU(cuDeviceGetAttribute, &v, a, dev);
    return v;
  };
  info.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  info.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info.max_smem_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  info.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  return info;
}

const DeviceInfo& cached_device_info(CUdevice dev) {
  constexpr int kMaxCached = 64;
  static std::once_flag once[kMaxCached];
  static DeviceInfo infos[kMaxCached];
  if (dev < 0 || dev >= kMaxCached)
    throw Error(ErrorKind::kDriver, fmt::format("device ordinal {} out of range", static_cast<int>(dev)));
  std::call_once(once[dev], [&] { infos[dev] = device_info(dev); });
  return infos[dev];
}

}  // namespace attnjit::driver
