#include "jit/kernel_table.hpp"

#include <fmt/format.h>

#include <memory>

#include "attnjit/error.hpp"
#include "driver/driver.hpp"
#include "jit/cache_client.hpp"
#include "jit/launch_count.hpp"
#include "jit/single_flight.hpp"

namespace attnjit::jit {

// ---- Kernel -------------------------------------------------------------------------

namespace {

CUlaunchAttribute cluster_attribute(const LaunchShape& shape) {
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  a.value.clusterDim.x = shape.cluster[0];
  a.value.clusterDim.y = shape.cluster[1];
  a.value.clusterDim.z = shape.cluster[2];
  return a;
}

// `shape`'s block and shared memory over `grid`, with the attributes given.
CUlaunchConfig launch_config(const unsigned (&grid)[3], const LaunchShape& shape, CUstream stream,
                             CUlaunchAttribute* attrs, unsigned n_attrs) {
  CUlaunchConfig cfg{};
  cfg.gridDimX = grid[0];
  cfg.gridDimY = grid[1];
  cfg.gridDimZ = grid[2];
  cfg.blockDimX = shape.block[0];
  cfg.blockDimY = shape.block[1];
  cfg.blockDimZ = shape.block[2];
  cfg.sharedMemBytes = shape.dynamic_smem;
  cfg.hStream = stream;
  cfg.attrs = n_attrs ? attrs : nullptr;
  cfg.numAttrs = n_attrs;
  return cfg;
}

// jit/launch_count.hpp. Relaxed: a count for tests, ordered with nothing else.
std::atomic<uint64_t> g_launches{0};
}  // namespace

uint64_t launch_count() noexcept { return g_launches.load(std::memory_order_relaxed); }

Kernel::Kernel(CompiledKernel compiled, unsigned dynamic_smem_bytes)
    : compiled_(std::move(compiled)), dynamic_smem_(dynamic_smem_bytes) {
  // cuLibraryLoadData gives a context-independent library: the same CUkernel launches on
  // every device; the driver loads it into each context on first use (or prepare).
  ATTNJIT_CU(cuLibraryLoadData, &library_, compiled_.cubin.data(), nullptr, nullptr, 0, nullptr,
             nullptr, 0);
  CUresult r = driver::api().cuLibraryGetKernel(&kernel_, library_, compiled_.lowered_name.c_str());
  if (r != CUDA_SUCCESS) {
    driver::api().cuLibraryUnload(library_);
    driver::check(r, "cuLibraryGetKernel", "entry " + compiled_.lowered_name);
  }
}

Kernel::~Kernel() {
  if (library_ && driver::available()) driver::api().cuLibraryUnload(library_);
}

void Kernel::prepare_current_device() const {
  const CUdevice dev = driver::current_device();
  if (dev < 0 || dev >= kMaxDevices)
    throw Error(ErrorKind::kDriver, fmt::format("device ordinal {} is beyond the {} attnjit "
                                                "supports", static_cast<int>(dev), kMaxDevices));
  const uint64_t bit = uint64_t{1} << dev;
  if (prepared_devices_.load(std::memory_order_acquire) & bit) return;
  // Force the module into the current context now (not lazily at the first launch,
  // which may be inside a graph capture).
  CUfunction fn = nullptr;
  ATTNJIT_CU(cuKernelGetFunction, &fn, kernel_);
  int static_smem = 0;
  ATTNJIT_CU(cuFuncGetAttribute, &static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn);
  const driver::DeviceInfo info = driver::device_info(dev);
  if (static_cast<int>(dynamic_smem_) + static_smem > info.max_smem_optin)
    throw Error(ErrorKind::kUnsupportedConfig,
                fmt::format("op '{}' needs {} B of shared memory per block ({} dynamic + {} "
                            "static) but {} allows {} B",
                            compiled_.op, dynamic_smem_ + static_cast<unsigned>(static_smem),
                            dynamic_smem_, static_smem, info.name, info.max_smem_optin));
  ATTNJIT_CU(cuKernelSetAttribute, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
             static_cast<int>(dynamic_smem_), kernel_, dev);
  prepared_devices_.fetch_or(bit, std::memory_order_acq_rel);
}

int Kernel::max_active_clusters(const LaunchShape& shape) const {
  prepare_current_device();
  CUfunction fn = nullptr;
  ATTNJIT_CU(cuKernelGetFunction, &fn, kernel_);
  CUlaunchAttribute attr = cluster_attribute(shape);
  // The query reads the cluster's shape, not the grid's.
  CUlaunchConfig cfg = launch_config(shape.cluster, shape, nullptr, &attr, 1);
  int clusters = 0;
  ATTNJIT_CU(cuOccupancyMaxActiveClusters, &clusters, fn, &cfg);
  return clusters;
}

void Kernel::launch(const LaunchShape& shape, CUstream stream, void** args) const {
  g_launches.fetch_add(1, std::memory_order_relaxed);  // attempts: counted before the driver
  const driver::Api& api = driver::api();
  CUdevice dev = 0;
  driver::check(api.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  if (!(prepared_devices_.load(std::memory_order_acquire) & (uint64_t{1} << (dev & 63))))
    prepare_current_device();

  CUlaunchAttribute attrs[2];
  unsigned n_attrs = 0;
  if (shape.cluster[0] * shape.cluster[1] * shape.cluster[2] > 1) attrs[n_attrs++] = cluster_attribute(shape);
  if (shape.programmatic_dependent_launch) {
    attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[n_attrs].value.programmaticStreamSerializationAllowed = 1;
    ++n_attrs;
  }
  CUlaunchConfig cfg = launch_config(shape.grid, shape, stream, attrs, n_attrs);
  // A CUkernel is accepted wherever a CUfunction is; it launches in the current context.
  CUresult r = api.cuLaunchKernelEx(&cfg, reinterpret_cast<CUfunction>(kernel_), args, nullptr);
  if (r != CUDA_SUCCESS)
    driver::check(r, "cuLaunchKernelEx",
                  fmt::format("(op '{}', grid [{}, {}, {}], block [{}, {}, {}], smem {} B)",
                              compiled_.op, shape.grid[0], shape.grid[1], shape.grid[2],
                              shape.block[0], shape.block[1], shape.block[2], shape.dynamic_smem));
}

// ---- the table ----------------------------------------------------------------------

namespace {

struct KeyHash {
  size_t operator()(const KernelKey& k) const noexcept {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t{k.op} << 32 | k.arch);
    for (uint64_t w : k.words) {
      h ^= w + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    return static_cast<size_t>(h);
  }
};

using Table = SingleFlightMap<KernelKey, Kernel, KeyHash>;

Table& table() {
  static Table* t = new Table();  // never destroyed: kernels outlive static teardown order
  return *t;
}

}  // namespace

const Kernel* find_kernel(const KernelKey& key) noexcept { return table().find(key); }

CompiledKernel compile_recipe(const KernelRecipe& recipe) {
  return compile(recipe.source, recipe.options);
}

const Kernel& build_kernel(const KernelKey& key, const std::function<KernelRecipe()>& recipe) {
  return table().get_or_create(key, [&] {
    KernelRecipe r = recipe();
    // The disk cache (verified hit, or compile and publish); ATTNJIT_CACHE=off skips it.
    return std::make_unique<Kernel>(runtime_compile(r), r.dynamic_smem_bytes);
  });
}

}  // namespace attnjit::jit
