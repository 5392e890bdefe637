#pragma once
// The CUDA Driver API, resolved at run time. libattnjit never links libcuda: it
// dlopen()s libcuda.so.1 on first use and asks cuGetProcAddress for each entry point,
// so compiling kernels, validating configs and building the default set all work on a
// machine without a GPU. Only launching (and encoding tensor maps) needs the driver.
#include <cuda.h>

#include <string>

namespace attnjit::driver {

// Every driver entry point attnjit calls. Names go through cuda.h's versioning macros
// (cuMemAlloc → cuMemAlloc_v2), so the member type always matches the header's ABI;
// the unexpanded name is what cuGetProcAddress is asked for.
#define ATTNJIT_DRIVER_FUNCTIONS(X) \
  X(cuInit)                         \
  X(cuDriverGetVersion)             \
  X(cuGetErrorName)                 \
  X(cuGetErrorString)               \
  X(cuDeviceGet)                    \
  X(cuDeviceGetCount)               \
  X(cuDeviceGetName)                \
  X(cuDeviceGetAttribute)           \
  X(cuDevicePrimaryCtxRetain)       \
  X(cuCtxGetCurrent)                \
  X(cuCtxSetCurrent)                \
  X(cuCtxGetDevice)                 \
  X(cuCtxSynchronize)               \
  X(cuLibraryLoadData)              \
  X(cuLibraryUnload)                \
  X(cuLibraryGetKernel)             \
  X(cuKernelGetFunction)            \
  X(cuKernelSetAttribute)           \
  X(cuFuncGetAttribute)             \
  X(cuLaunchKernelEx)               \
  X(cuTensorMapEncodeTiled)         \
  X(cuMemAlloc)                     \
  X(cuMemFree)                      \
  X(cuMemcpyHtoD)                   \
  X(cuMemcpyDtoH)                   \
  X(cuMemcpyDtoDAsync)              \
  X(cuMemsetD8Async)                \
  X(cuMemsetD32Async)               \
  X(cuStreamCreate)                 \
  X(cuStreamDestroy)                \
  X(cuStreamSynchronize)            \
  X(cuStreamIsCapturing)            \
  X(cuStreamBeginCapture)           \
  X(cuStreamEndCapture)             \
  X(cuGraphInstantiate)             \
  X(cuGraphLaunch)                  \
  X(cuGraphExecDestroy)             \
  X(cuGraphDestroy)                 \
  X(cuEventCreate)                  \
  X(cuEventDestroy)                 \
  X(cuEventRecord)                  \
  X(cuEventSynchronize)             \
  X(cuEventElapsedTime)

struct Api {
#define ATTNJIT_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
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
