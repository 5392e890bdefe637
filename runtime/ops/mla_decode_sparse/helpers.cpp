// mla_decode_sparse's helpers: the 656-byte quantizer and the index remap, their launches
// and host references. The quantizer's reference computes the same f32 values as the
// device (amax / 448 and x / scale correctly rounded, RN-even e4m3 with saturation), so
// it is bit-exact against it. The e4m3 encoder is mla_decode_fp8's (the same cvt rule).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attnjit/error.hpp"
#include "attnjit/ops/mla_decode_fp8.hpp"
#include "attnjit/ops/mla_decode_sparse.hpp"
#include "driver/driver.hpp"
#include "mla_decode_sparse/layout.cuh"
#include "ops/launch_support.hpp"
#include "ops/mla_decode_sparse/internal.hpp"

namespace attnjit {
namespace {

namespace dev = layout::mla_decode_sparse;

float bf16_to_float(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

Arch current_arch() {
  return ops::device_arch(driver::cached_device_info(driver::current_device()));
}

unsigned grid_for(int64_t items, int per_cta) {
  return static_cast<unsigned>(std::clamp<int64_t>((items + per_cta - 1) / per_cta, 1, 65535));
}

}  // namespace

void mla_sparse_quantize_row_host(const uint16_t* src, uint8_t* dst) {
  for (int b = 0; b < dev::kFp8Scales; ++b) {
    float amax = 0.0f;
    for (int k = 0; k < dev::kFp8ScaleBlock; ++k)
      amax = std::fmax(amax, std::fabs(bf16_to_float(src[b * dev::kFp8ScaleBlock + k])));
    const float scale = amax > 0.0f ? amax / dev::kE4M3Max : 1.0f;
    std::memcpy(dst + dev::kFp8ScaleOffset + 4 * b, &scale, 4);
    for (int k = 0; k < dev::kFp8ScaleBlock; ++k) {
      const int i = b * dev::kFp8ScaleBlock + k;
      dst[i] = e4m3_from_float(bf16_to_float(src[i]) / scale);  // mla_decode_fp8's encoder
    }
  }
  std::memcpy(dst + dev::kFp8RopeOffset, src + dev::kValueDim, 2 * dev::kRopeDims);
}

int mla_sparse_remap_host(int pos, const int* table_row, int max_pages, int page_size, int num_pages) {
  if (pos < 0 || int64_t{pos} >= int64_t{max_pages} * page_size) return -1;
  const int page = table_row[pos / page_size];
  return page >= 0 && page < num_pages ? page * page_size + pos % page_size : -1;
}

void mla_sparse_quantize(const TensorView& src, const TensorView& dst_rows, const TensorView& pool,
                         CUstream stream) {
  if (src.rank != 2 || src.shape[1] != dev::kHeadDim)
    fail_arg("src", fmt::format("must be rank 2 [n, 576] bf16, got {}", src.describe()));
  ops::check_tensor(src, "src", DType::kBF16, 16);
  const int64_t n = src.shape[0];
  if ((pool.rank != 2 && pool.rank != 3) || pool.shape[pool.rank - 1] != dev::kFp8RowBytes ||
      (pool.dtype != DType::kU8 && pool.dtype != DType::kE4M3))
    fail_arg("pool", fmt::format("must be [rows, 656] or [pages, page_size, 656] u8, got {}",
                                 pool.describe()));
  ops::check_tensor(pool, "pool", pool.dtype, 16);
  const int64_t rows = pool.rank == 3 ? pool.shape[0] * pool.shape[1] : pool.shape[0];
  if (rows > INT32_MAX) fail_arg("pool", "holds more than 2^31 rows");
  if (dst_rows.data != nullptr) {
    ops::check_dims(dst_rows, "dst_rows", {n}, "rank 1 [n] i32 (a physical row per source row)");
    ops::check_tensor(dst_rows, "dst_rows", DType::kI32, 4);
  } else if (n > rows) {
    fail_arg("src", fmt::format("has {} rows but the pool only {} (without dst_rows row i goes "
                                "to pool row i)",
                                n, rows));
  }
  if (n == 0) return;
  const jit::Kernel& k = ops::mla_sparse_quantize_kernel(current_arch());
  dev::QuantArgs qa{static_cast<const unsigned short*>(src.data), static_cast<const int*>(dst_rows.data),
                    static_cast<unsigned char*>(pool.data), n, static_cast<int>(rows), 0};
  jit::LaunchShape shape;
  shape.grid[0] = grid_for(n, dev::kQuantThreads / 32);
  shape.block[0] = dev::kQuantThreads;
  void* args[] = {&qa};
  k.launch(shape, stream, args);
}

void mla_sparse_remap(const TensorView& logical, const TensorView& block_table, int page_size,
                      int num_pages, const TensorView& physical, CUstream stream) {
  if (logical.rank != 2 && logical.rank != 3)
    fail_arg("logical", fmt::format("must be [tokens, topk] or [b, q_len, topk] i32, got {}",
                                    logical.describe()));
  if (logical.dtype != DType::kI32 || logical.stride(logical.rank - 1) != 1)
    fail_arg("logical", fmt::format("must be i32 with a contiguous last dim, got {}", logical.describe()));
  const int64_t topk = logical.shape[logical.rank - 1];
  const int64_t tokens = logical.rank == 3 ? logical.shape[0] * logical.shape[1] : logical.shape[0];
  const int64_t stride = logical.stride(logical.rank - 2);
  if (logical.rank == 3 && logical.stride(0) != logical.shape[1] * stride)
    fail_arg("logical", "token rows must be evenly spaced: stride[0] = q_len × stride[1]");
  if (block_table.rank != 2)
    fail_arg("block_table", fmt::format("must be rank 2 [b, max_pages] i32, got {}", block_table.describe()));
  ops::check_tensor(block_table, "block_table", DType::kI32, 4);
  const int64_t b = block_table.shape[0];
  if (b < 1 || tokens % b != 0)
    fail_arg("block_table", fmt::format("has {} sequences, which must divide the {} tokens", b, tokens));
  if (page_size < 1 || num_pages < 0)
    fail_arg("page_size", fmt::format("page_size must be >= 1 and num_pages >= 0, got {} and {}",
                                      page_size, num_pages));
  if (block_table.shape[1] * page_size > INT32_MAX)
    fail_arg("block_table", "max_pages × page_size is over 2^31");
  if (tokens > INT32_MAX || (tokens - 1) * stride + topk > INT32_MAX)
    fail_arg("logical", "spans more than 2^31 elements");
  if (physical.rank != logical.rank || physical.numel() != tokens * topk)
    fail_arg("physical", fmt::format("must have logical's shape, got {}", physical.describe()));
  ops::check_tensor(physical, "physical", DType::kI32, 4);
  if (tokens * topk == 0) return;
  const jit::Kernel& k = ops::mla_sparse_remap_kernel(current_arch());
  dev::RemapArgs ra{static_cast<const int*>(logical.data),
                    static_cast<const int*>(block_table.data),
                    nullptr,
                    static_cast<int*>(physical.data),
                    tokens,
                    static_cast<int>(topk),
                    static_cast<int>(stride),
                    static_cast<int>(block_table.shape[1]),
                    page_size,
                    num_pages,
                    static_cast<int>(tokens / b),
                    0};
  jit::LaunchShape shape;
  shape.grid[0] = grid_for(tokens, 1);
  shape.block[0] = dev::kRemapThreads;
  void* args[] = {&ra};
  k.launch(shape, stream, args);
}

}  // namespace attnjit
