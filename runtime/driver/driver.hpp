#pragma once
// The CUDA Driver API, resolved at run time. libattnjit never links libcuda: it
// dlopen()s libcuda.so.1 on first use and asks cuGetProcAddress for each entry point,
// so compiling kernels, validating configs and building the default set all work on a
// machine without a GPU. Only launching (and encoding tensor maps) needs the driver.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

namespace attnjit::driver {

// Every driver entry point attnjit calls, with the ABI version cuda.h's declaration has.
// cuGetProcAddress returns the newest ABI not above the version asked for, so asking
// for CUDA_VERSION would hand back e.g. cuCtxGetDevice's 13.0 form (with a context
// argument) where the header declares the 2.0 one. Each entry names its version, and
// its type is cudaTypedefs.h's PFN_<name>_v<version>. Member names go through cuda.h's
// macros (cuMemAlloc → cuMemAlloc_v2) exactly as calls do, so `api().cuMemAlloc(...)`
// resolves to the member.
#define ATTNJIT_DRIVER_FUNCTIONS(X) \
  X(cuInit, 2000)                         \
  X(cuDriverGetVersion, 2020)             \
  X(cuGetErrorName, 6000)                 \
  X(cuGetErrorString, 6000)               \
  X(cuDeviceGet, 2000)                    \
  X(cuDeviceGetCount, 2000)               \
  X(cuDeviceGetName, 2000)                \
  X(cuDeviceGetAttribute, 2000)           \
  X(cuDevicePrimaryCtxRetain, 7000)       \
  X(cuCtxGetCurrent, 4000)                \
  X(cuCtxSetCurrent, 4000)                \
  X(cuCtxGetDevice, 2000)                 \
  X(cuCtxSynchronize, 2000)               \
  X(cuLibraryLoadData, 12000)              \
  X(cuLibraryUnload, 12000)                \
  X(cuLibraryGetKernel, 12000)             \
  X(cuKernelGetFunction, 12000)            \
  X(cuKernelSetAttribute, 12000)           \
  X(cuFuncGetAttribute, 2020)             \
  X(cuLaunchKernelEx, 11060)               \
  X(cuOccupancyMaxActiveClusters, 11070)   \
  X(cuTensorMapEncodeTiled, 12000)         \
  X(cuMemAlloc, 3020)                     \
  X(cuMemFree, 3020)                      \
  X(cuMemAllocAsync, 11020)               \
  X(cuMemFreeAsync, 11020)                \
  X(cuMemcpyHtoD, 3020)                   \
  X(cuMemcpyDtoH, 3020)                   \
  X(cuMemcpyDtoDAsync, 3020)              \
  X(cuMemsetD8Async, 3020)                \
  X(cuMemsetD32Async, 3020)               \
  X(cuStreamCreate, 2000)                 \
  X(cuStreamDestroy, 4000)                \
  X(cuStreamSynchronize, 2000)            \
  X(cuStreamIsCapturing, 10000)            \
  X(cuStreamBeginCapture, 10010)           \
  X(cuStreamEndCapture, 10000)             \
  X(cuGraphInstantiateWithFlags, 11040)             \
  X(cuGraphLaunch, 10000)                  \
  X(cuGraphExecDestroy, 10000)             \
  X(cuGraphDestroy, 10000)                 \
  X(cuEventCreate, 2000)                  \
  X(cuEventDestroy, 4000)                 \
  X(cuEventRecord, 2000)                  \
  X(cuEventSynchronize, 2000)             \
  X(cuEventElapsedTime, 12080)

struct Api {
#define ATTNJIT_DRIVER_MEMBER(name, version) PFN_##name##_v##version name = nullptr;
  ATTNJIT_DRIVER_FUNCTIONS(ATTNJIT_DRIVER_MEMBER)
#undef ATTNJIT_DRIVER_MEMBER
  int driver_version = 0;  // cuDriverGetVersion, e.g. 13000
};

// Loads libcuda and calls cuInit(0) once. Throws Error(kDriver) with the reason
// (library missing, driver too old, cuInit failed) when that is not possible.
const Api& api();

// True when api() would succeed; never throws. Tests use it to skip [gpu] cases.
bool available() noexcept;
// Why available() is false ("" when it is true).
std::string unavailable_reason();

// Throws Error(kDriver) "<call>: CUDA_ERROR_X (text) [context]" when r != CUDA_SUCCESS.
void check(CUresult r, const char* call, const std::string& context = {});

// The device of the calling thread's current context. Throws a clear error when no
// context is current (ops run on the current device's primary context).
CUdevice current_device();

// Retains `ordinal`'s primary context and makes it current on this thread (what the
// CUDA runtime's cudaSetDevice does). For tools and tests that own no context.
void use_device(int ordinal);

struct DeviceInfo {
  std::string name;
  int ordinal = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  int max_smem_optin = 0;  // opt-in dynamic shared memory per block, bytes
  int l2_bytes = 0;
};
DeviceInfo device_info(CUdevice dev);

// device_info() read once per device and kept (launch paths need the SM count).
const DeviceInfo& cached_device_info(CUdevice dev);

}  // namespace attnjit::driver

// ATTNJIT_CU(cuFoo(args...)) → calls through the loaded table and checks the result.
#define ATTNJIT_CU(fn, ...) \
  ::attnjit::driver::check(::attnjit::driver::api().fn(__VA_ARGS__), #fn)
