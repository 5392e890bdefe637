#pragma once
// The in-process kernel table and the launch path.
//
// Ops look kernels up by a binary key (op id + arch + the raw bytes of the config
// struct): no strings, JSON or hashing of sources on the hot path, and no allocation
// once the kernel is loaded. A miss is single-flight per key: concurrent callers of one
// missing kernel wait for one compile. Loaded kernels live for the whole process.
#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#include "attnjit/types.hpp"
#include "jit/compiler.hpp"

namespace attnjit::jit {

inline constexpr int kMaxDevices = 64;

struct KernelKey {
  uint32_t op = 0;    // registry id of the op (or a test family)
  uint32_t arch = 0;  // Arch::number() * 2 + arch_specific
  std::array<uint64_t, 8> words{};  // the config struct's bytes, zero padded

  friend bool operator==(const KernelKey&, const KernelKey&) = default;
};

// Packs a config struct into a key. The struct must have no padding bytes, so two equal
// configs always give equal keys.
template <class Config>
KernelKey make_key(uint32_t op_id, Arch arch, const Config& config) {
  static_assert(std::is_trivially_copyable_v<Config>);
  static_assert(std::has_unique_object_representations_v<Config>,
                "config structs must have no padding (they are compared as bytes)");
  static_assert(sizeof(Config) <= sizeof(KernelKey::words));
  KernelKey key;
  key.op = op_id;
  key.arch = static_cast<uint32_t>(arch.number() * 2 + (arch.arch_specific ? 1 : 0));
  std::memcpy(key.words.data(), &config, sizeof(Config));
  return key;
}

// Launch geometry, everything cuLaunchKernelEx takes besides the function and args.
struct LaunchShape {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned dynamic_smem = 0;
  unsigned cluster[3] = {1, 1, 1};  // {1,1,1} = no cluster
  bool programmatic_dependent_launch = false;
};

// A compiled and loaded kernel. Immutable after construction except the per-device
// "attributes set" flags.
class Kernel {
 public:
  Kernel(CompiledKernel compiled, unsigned dynamic_smem_bytes);
  ~Kernel();
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  const CompiledKernel& compiled() const noexcept { return compiled_; }
  unsigned dynamic_smem_bytes() const noexcept { return dynamic_smem_; }
  CUkernel handle() const noexcept { return kernel_; }

  // Loads the kernel into the current context and sets its attributes (max dynamic
  // shared memory) for the current device. Idempotent; call before a graph capture.
  void prepare_current_device() const;

  // Hot path: counts the launch (jit/launch_count.hpp), checks the per-device flag (one
  // atomic load) and launches.
  void launch(const LaunchShape& shape, CUstream stream, void** args) const;

  // How many clusters of `shape` (its block, shared memory and cluster dims) the current
  // device runs at once: a plan that wants one wave of clusters asks this, since clusters
  // are placed within a GPC and the SMs a GPC has left over stay idle. Not for the hot path.
  int max_active_clusters(const LaunchShape& shape) const;

 private:
  void ensure_loaded() const;
  CompiledKernel compiled_;
  unsigned dynamic_smem_;
  mutable std::atomic<bool> loaded_{false};
  mutable CUlibrary library_ = nullptr;
  mutable CUkernel kernel_ = nullptr;
  mutable std::atomic<uint64_t> prepared_devices_{0};  // bit d: attributes set on device d
};

// What a miss needs to produce a kernel.
struct KernelRecipe {
  KernelSource source;
  CompileOptions options;
  unsigned dynamic_smem_bytes = 0;
};

// Fast path: the loaded kernel for `key`, or nullptr. A shared lock and one hash lookup.
const Kernel* find_kernel(const KernelKey& key) noexcept;

// Slow path: produces and loads the kernel for `key` once (single-flight: concurrent
// callers with the same key wait for the first). The cubin comes from the disk cache
// (jit/cache_client.hpp: a verified entry, else NVRTC and publish), so a fresh process that
// finds the kernel on disk does not compile. A failed build is not remembered, so a
// later call retries.
const Kernel& build_kernel(const KernelKey& key, const std::function<KernelRecipe()>& recipe);

// Looks `key` up; on a miss calls `recipe()` (building strings there costs nothing warm).
template <class RecipeFn>
const Kernel& get_kernel(const KernelKey& key, RecipeFn&& recipe) {
  if (const Kernel* k = find_kernel(key)) return *k;
  return build_kernel(key, std::function<KernelRecipe()>(std::forward<RecipeFn>(recipe)));
}

// Compile without loading (works without a GPU); touches neither the table nor the disk
// cache (jit::ensure_compiled is the cached equivalent).
CompiledKernel compile_recipe(const KernelRecipe& recipe);

}  // namespace attnjit::jit
